"""Seed 003 DESIRED statistics, LND link hooks and health notices, without root.

The engine side (counters, ``notify.py``, ``views.testbed_stats``) on the sim backend's virtual
clock, the link watcher's simulated link state with a faked carrier, and the event log writer.
The Mininet suite (tests/lutf/suite_health/test_health_stats.py) proves the same end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from enginekit import settle_sim

from nodes.daemon import linkwatch
from nodes.daemon.eventlog import EventLog
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import ENOENT, LNetConfigError
from nodes.lnet.nid import NID
from nodes.lnet.notify import MAX_PENDING, drain
from testbed.sim import SimTestbed

C1 = ("10.10.0.1@tcp", "10.11.0.1@tcp")
S1 = ("10.10.0.2@tcp", "10.11.0.2@tcp")
TESTBED_KEYS = ("ni_down_events", "ni_up_events", "send_time", "transaction_time")


@pytest.fixture
def tb() -> SimTestbed:
    # the default topology: c1, s1, two rails; static peers discovered first (spec §5.3)
    return settle_sim(SimTestbed.up(seed=3))


def _kinds(tb: SimTestbed, prefix: tuple[str, ...] = ("ni_", "lpni_")) -> list[dict[str, Any]]:
    return [e for e in tb.events() if e["kind"].startswith(prefix)
            and not e["kind"].endswith(("_health", "_add", "_del"))]  # the trace's, config


# ---------------------------------------------------------------- statistics
@pytest.mark.requirement("hlth-stt-avg-send-time", "hlth-stt-avg-transaction-time")
def test_send_and_transaction_times_follow_the_virtual_clock(tb: SimTestbed) -> None:
    """Send time = commit -> LND completion (the fabric completes a tx after its 1 ms
    latency); transaction time = PUT -> ACK (2 ms round trip); exact on the virtual clock."""
    tb.fabric.latency = 0.004
    assert tb.node("c1").put(S1[0], count=10, size=64)["completed"] == 10
    peers = {p["nid"]: p for p in tb.node("c1").testbed_stats()["peer NI(s)"]}
    sends = sum(peers[n]["send_time_samples"] for n in S1)
    acks = sum(peers[n]["transaction_time_samples"] for n in S1)
    assert sends >= 10 and acks >= 10
    for n in S1:
        if peers[n]["send_time_samples"]:
            # exact to the ns (the clock no longer starts at 0: float rounding)
            assert abs(peers[n]["send_time_avg_nsec"] - 4_000_000) <= 1
            assert abs(peers[n]["transaction_time_min_nsec"] - 8_000_000) <= 1


@pytest.mark.requirement("hlth-stt-ni-down-events", "hlth-stt-ni-up-events", "hlth-stt-reset")
def test_link_events_count_changes_only_and_stats_reset_clears(tb: SimTestbed) -> None:
    """Each change of the fatal state is one event; a repeated state is not; `lnetctl stats
    reset` clears the testbed statistics with the others."""
    c1 = tb.node("c1")
    for state in ("down", "down", "up", "down", "up", "up"):
        tb.link("c1", "eth1", state)
    assert c1.lnd_link(C1[1], up=False) and not c1.lnd_link(C1[1], up=False)
    (ni,) = c1.testbed_stats(C1[1])["local NI(s)"]
    assert (ni["ni_down_events"], ni["ni_up_events"]) == (3, 2)
    assert c1.put(S1[0], count=3)["completed"] == 3
    assert c1.lnetctl("stats reset").rc == 0
    stats = c1.testbed_stats()
    assert all(v == 0 for ni in stats["local NI(s)"] for k, v in ni.items() if k != "nid")
    assert all(v == 0 for p in stats["peer NI(s)"] for k, v in p.items()
               if k not in ("nid", "primary nid"))


@pytest.mark.parametrize("verbose", [None, 1, 2, 3, 4, 5])
def test_lnetctl_output_has_no_testbed_keys(tb: SimTestbed, verbose: int | None) -> None:
    """The statistics real lnetctl lacks never appear in `net show` / `peer show`."""
    c1 = tb.node("c1")
    c1.put(S1[0], count=2)
    c1.lnd_link(C1[1], up=False)
    flag = "" if verbose is None else f" -v {verbose}"
    for cmd in ("net show", "peer show"):
        out = c1.lnetctl(cmd + flag).out
        assert out and not any(k in out for k in TESTBED_KEYS), out


def test_testbed_stats_errors_are_one_line(tb: SimTestbed) -> None:
    c1 = tb.node("c1")
    for argv, err in ((["testbed_stats", "9.9.9.9@tcp"], "no local NI or peer NI"),
                      (["testbed_stats", "a", "b"], "usage: testbed_stats [NID]"),
                      (["net_ni_down"], "usage: net_ni_down NID"),
                      (["net_ni_down", "bogus"], "Cannot parse NID"),
                      (["net_ni_up", S1[0]], "is not a local NI"),
                      (["net_ni_down", "0@lo"], "is not a local NI")):
        res = c1.lctl(*argv)
        assert res.rc == 1 and err in res.err and res.err.count("\n") == 1, (argv, res)
    eng = LNetEngine()
    with pytest.raises(LNetConfigError) as exc:
        eng.view("testbed", nid="1.2.3.4@tcp")
    assert exc.value.errno == -ENOENT


# ---------------------------------------------------------------- LND hooks
@pytest.mark.requirement("hlth-dbg-sim-ni-down", "hlth-dbg-sim-ni-up")
def test_sim_lnd_link_fails_own_sends_but_stays_reachable(tb: SimTestbed) -> None:
    """After a simulated link down, sends from that NI fail at once with -ENETDOWN (as the
    socklnd's), while messages from s1 still arrive on it (the interface is up; the REPLY
    then fails as a send of that NI); a real link change ends the simulation."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    assert c1.lnd_link(C1[1], up=False)
    assert c1.ping(S1[1], source=C1[1]).rc != 0
    assert s1.ping(C1[1], source=S1[1], timeout=2).rc != 0
    doc = c1.lnetctl_yaml("net show -v 2")["net"]
    (ni,) = [n for net in doc for n in net["local NI(s)"] if n["nid"] == C1[1]]
    assert ni["received_stats"]["get"] >= 1 and ni["status"] == "down"
    tb.link("c1", "eth1", "up")  # a real change wins over the simulation
    tb.link("c1", "eth1", "down")
    tb.link("c1", "eth1", "up")
    assert NID.parse(C1[1]) not in tb.fabric.lnd_down
    assert c1.ping(S1[1], source=C1[1]).rc == 0


class _FakeCarrier:
    def __init__(self) -> None:
        self.up = {"eth1": True}

    def __call__(self, ifname: str) -> bool:
        return self.up[ifname]


@pytest.mark.requirement("hlth-dbg-sim-ni-down", "hlth-dbg-sim-ni-up")
def test_linkwatch_simulation_holds_until_the_real_carrier_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    carrier = _FakeCarrier()
    monkeypatch.setattr(linkwatch, "carrier_up", carrier)
    nid = NID.parse(C1[1])
    seen: list[tuple[bool, str]] = []
    lw = linkwatch.LinkWatch(nis=lambda: {nid: "eth1"},
                             on_change=lambda n, up: seen.append((up, "carrier")),
                             on_simulated=lambda n, up: seen.append((up, "simulated")))
    assert lw.poll() == []
    assert lw.simulate(nid, False) and not lw.simulate(nid, False)
    assert lw.poll() == []  # carrier still up: the simulated down holds
    carrier.up["eth1"] = False
    assert lw.poll() == []  # real loss: already down, nothing new; the override is gone
    carrier.up["eth1"] = True
    assert lw.poll() == [(nid, True)]
    assert lw.simulate(nid, False) and lw.simulate(nid, True)
    assert seen == [(False, "simulated"), (True, "carrier"), (False, "simulated"),
                    (True, "simulated")]
    with pytest.raises(KeyError):
        lw.simulate(NID.parse(S1[0]), False)


# ---------------------------------------------------------------- notices (hlth-lnt-udev)
@pytest.mark.requirement("hlth-lnt-udev")
def test_health_set_publishes_status_changes(tb: SimTestbed) -> None:
    """Manual health changes move the published status both ways, once per change."""
    c1 = tb.node("c1")
    assert c1.lnetctl(f"net set --nid {C1[0]} --health 0").rc == 0
    assert c1.lnetctl(f"peer set --nid {S1[1]} --health 500").rc == 0
    evs = _kinds(tb)
    assert [(e["kind"], e["nid"], e.get("status"), e["healthy"]) for e in evs] == [
        ("ni_status", C1[0], "down", False), ("lpni_status", S1[1], None, False)]
    assert evs[1]["peer"] == S1[0] and evs[1]["health"] == 500
    c1.lnetctl("net set --all --health 1000")
    c1.lnetctl("peer set --all --health 1000")
    back = _kinds(tb)[2:]
    assert [(e["kind"], e["healthy"]) for e in back] == [("ni_status", True),
                                                         ("lpni_status", True)]


@pytest.mark.requirement("hlth-lnt-udev")
def test_response_timeout_blames_the_peer_ni(tb: SimTestbed) -> None:
    """A PUT whose ACK never comes (s1 drops it on RX) raises an lpni_error RESPONSE_TIMEOUT
    on the next hop when the response tracker expires (spec §3.4)."""
    assert tb.node("s1").lctl(f"net_drop_add -s * -d {S1[0]} -r 1 -m put").rc == 0
    tb.node("c1").put(S1[0], count=1, timeout=30)
    tb.run(15)
    errs = [e for e in _kinds(tb) if e["kind"] == "lpni_error"]
    assert errs and errs[0]["hstatus"] == "RESPONSE_TIMEOUT" and errs[0]["nid"] in S1


def test_notice_queue_is_bounded_without_a_driver() -> None:
    eng = LNetEngine()
    for i in range(MAX_PENDING + 10):
        eng.notices.emit("ni_error", nid=str(i))
    out = drain(eng)
    assert len(out) == MAX_PENDING and out[-1][1]["nid"] == str(MAX_PENDING + 9)
    assert drain(eng) == []


def test_event_log_appends_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LNET_TESTBED_RUNDIR", raising=False)
    assert EventLog.from_env("c1") is None
    monkeypatch.setenv("LNET_TESTBED_RUNDIR", str(tmp_path))
    log = EventLog.from_env("c1")
    assert log is not None
    log.write("ni_error", {"nid": C1[0], "hstatus": "LOCAL_ERROR", "health": 900})
    log.write("ni_status", {"nid": C1[0], "status": "up"})
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["node"]) for e in lines] == [("ni_error", "c1"), ("ni_status", "c1")]
    assert all(isinstance(e["t"], float) for e in lines)
    EventLog(tmp_path / "missing" / "events.jsonl", "c1").write("x", {})  # best effort


def test_deleted_ni_leaves_the_published_state(tb: SimTestbed) -> None:
    c1 = tb.node("c1")
    assert c1.lnetctl(f"net set --nid {C1[1]} --health 0").rc == 0
    assert c1.lnetctl("net del --net tcp --if eth1").rc == 0
    eng = tb.runtimes["c1"].engine
    assert [str(ni.nid) for ni in eng.notices.ni_state] == [C1[0]]
    assert [e["nid"] for e in _kinds(tb) if e["kind"] == "ni_status"] == [C1[1]]
