"""Seed 003's DESIRED statistics, LND link hooks and health events, through the real daemon.

Real LNet keeps none of these (docs/differences.md): the testbed shows them with the
testbed-only ``lctl testbed_stats`` (``lnetctl`` output stays what real lnetctl prints), the
LND hooks are the testbed-only ``lctl net_ni_down|net_ni_up NID`` (``NodeHandle.lnd_link``),
and the health events that real LNet meant to send as udev events go to the testbed event log
(``events.jsonl``, ``testbed events --follow``, ``tb.events()``). Each test breaks something,
so each gets its own default two-rail testbed (topologies/default.yaml). Runs on
``--lnet-backend=sim`` too, except the check that the Linux interface stayed up.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, local_nis, ok
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

BURST = 20


def _ni_stats(node: Any, nid: str) -> dict[str, int]:
    (ni,) = node.testbed_stats(nid)["local NI(s)"]
    return ni


def _lpni_stats(node: Any) -> dict[str, dict[str, int]]:
    return {p["nid"]: p for p in node.testbed_stats()["peer NI(s)"]}


def _operstate(tb: Any, node: str, iface: str) -> str | None:
    """The Linux operstate of ``iface`` in the node's namespace (``ip -o link``: /sys would
    show the root namespace); None on the sim backend."""
    if hasattr(tb, "fabric"):
        return None
    res = tb.node(node).exec(["ip", "-o", "link", "show", "dev", iface])
    assert res.rc == 0, res
    words = str(res.out).split()
    return words[words.index("state") + 1].lower()


def _pinned_ping(node: Any) -> int:
    return int(node.ping(S1_NIDS[1], source=C1_NIDS[1], timeout=3).rc)


def _events(tb: Any, kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in tb.events() if e["kind"] == kind
            and all(e.get(k) == v for k, v in match.items())]


@pytest.mark.requirement("hlth-dbg-sim-ni-down", "hlth-dbg-sim-ni-up",
                         "hlth-stt-ni-down-events", "hlth-stt-ni-up-events",
                         "hlth-tst-lutf-hooks")
def test_simulated_and_real_link_events_are_counted(topology: Any) -> None:
    """The LND hook reports a link down on c1's eth1 NI exactly as the link watcher does on
    carrier loss (ksocknal_handle_link_state_change -> lnet_set_link_fatal_state): the NI
    goes down with fatal_error 1, sends pinned to it fail while a burst completes over eth0,
    and the Linux interface stays up. The up hook brings it back. Each event is counted
    per local NI, and so are the real carrier events the link watcher sees afterwards."""
    c1 = topology.node("c1")
    assert _pinned_ping(c1) == 0
    assert c1.lnd_link(C1_NIDS[1], up=False) is True
    ni = local_nis(c1)[C1_NIDS[1]]
    assert ni["status"] == "down" and ni["health stats"]["fatal_error"] == 1, ni
    assert _ni_stats(c1, C1_NIDS[1])["ni_down_events"] == 1
    assert _ni_stats(c1, C1_NIDS[0])["ni_down_events"] == 0
    assert _operstate(topology, "c1", "eth1") in (None, "up")  # the interface is untouched
    assert _pinned_ping(c1) != 0
    before = local_nis(c1)[C1_NIDS[1]]["statistics"]["send_count"]
    burst = c1.put(S1_NIDS[0], count=BURST, size=1024)
    assert burst["completed"] == BURST, burst
    assert local_nis(c1)[C1_NIDS[1]]["statistics"]["send_count"] == before
    assert c1.lnd_link(C1_NIDS[1], up=False) is False  # already down: no second event
    assert c1.lnd_link(C1_NIDS[1], up=True) is True
    ni = local_nis(c1)[C1_NIDS[1]]
    assert ni["status"] == "up" and ni["health stats"]["fatal_error"] == 0, ni
    wait_for(lambda: _pinned_ping(c1), timeout=20, expected=0)
    assert {k: v for k, v in _ni_stats(c1, C1_NIDS[1]).items() if "events" in k} == {
        "ni_down_events": 1, "ni_up_events": 1}
    assert [e["link"] for e in _events(topology, "ni_link", node="c1", nid=C1_NIDS[1],
                                       cause="simulated")] == ["down", "up"]
    # real carrier changes are local interface events too (the link watcher's)
    topology.link("c1", "eth1", "down")
    wait_for(lambda: _ni_stats(c1, C1_NIDS[1])["ni_down_events"], timeout=10, expected=2)
    topology.link("c1", "eth1", "up")
    wait_for(lambda: _ni_stats(c1, C1_NIDS[1])["ni_up_events"], timeout=10, expected=2)
    assert [e["cause"] for e in _events(topology, "ni_link", node="c1", nid=C1_NIDS[1])] == [
        "simulated", "simulated", "carrier", "carrier"]


@pytest.mark.requirement("hlth-stt-avg-send-time", "hlth-stt-avg-transaction-time",
                         "hlth-stt-reset")
def test_send_and_transaction_times_per_peer_ni(topology: Any) -> None:
    """Per peer NI, the average time to send a message (commit -> the LND's successful
    completion) and to complete a transaction (PUT -> ACK). With s1 holding each ACK for 1 s
    (LNet's own delay rule, `lctl net_delay_add -m ack -l 1`, spec §8.3), c1's transaction
    times are at least 1 s while its send times stay far below; `lnetctl stats reset`
    clears both."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    ok(c1, "lnetctl", "stats reset")
    assert all(p["send_time_samples"] == 0 and p["transaction_time_samples"] == 0
               for p in _lpni_stats(c1).values())
    burst = c1.put(S1_NIDS[0], count=BURST, size=1024)
    assert burst["completed"] == BURST, burst
    peers = _lpni_stats(c1)
    assert sum(peers[n]["send_time_samples"] for n in S1_NIDS) >= BURST
    assert sum(peers[n]["transaction_time_samples"] for n in S1_NIDS) >= BURST
    for nid in S1_NIDS:
        p = peers[nid]
        for kind in ("send_time", "transaction_time"):
            if p[f"{kind}_samples"]:
                assert (0 < p[f"{kind}_min_nsec"] <= p[f"{kind}_avg_nsec"]
                        <= p[f"{kind}_max_nsec"]), p
    ok(s1, "lctl", "net_delay_add -s * -d * -r 1 -l 1 -m ack")
    ok(c1, "lnetctl", "stats reset")
    burst = c1.put(S1_NIDS[0], count=BURST, size=1024)
    ok(s1, "lctl", "net_delay_del -a")
    assert burst["completed"] == BURST, burst
    peers = {n: p for n, p in _lpni_stats(c1).items() if n in S1_NIDS}
    assert sum(p["transaction_time_samples"] for p in peers.values()) >= BURST
    for nid, p in peers.items():
        if p["transaction_time_samples"]:
            assert p["transaction_time_min_nsec"] >= 1_000_000_000, (nid, p)
        if p["send_time_samples"]:
            assert p["send_time_avg_nsec"] < 500_000_000, (nid, p)


@pytest.mark.requirement("hlth-lnt-udev")
def test_ni_errors_and_status_changes_reach_the_event_log(topology: Any) -> None:
    """Errors detected on a local NI and a peer NI, and their status changes, are published
    to user space (seed 003: "use UDEV events"; here the testbed event log). A simulated
    NETWORK_TIMEOUT on every PUT to s1's eth1 NID (`net_drop_add -e network_timeout`, spec
    §8.2) blames both c1's NI and that peer NI (spec §3.2): one `ni_error` / `lpni_error` per
    failure with the health after the decrement, and `ni_status` / `lpni_status` when they
    stop being fully healthy; restoring health publishes the way back."""
    c1 = topology.node("c1")
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -m put -e network_timeout")
    c1.put(S1_NIDS[1], count=5, size=1024)
    ok(c1, "lctl", "net_drop_del -a")
    errs = _events(topology, "lpni_error", node="c1", nid=S1_NIDS[1])
    assert errs and all(e["hstatus"] == "NETWORK_TIMEOUT" and e["peer"] == S1_NIDS[0]
                        for e in errs), errs
    assert errs[0]["health"] == 1000 - 100  # topologies/default.yaml health_sensitivity
    ni_errs = _events(topology, "ni_error", node="c1", hstatus="NETWORK_TIMEOUT")
    assert len(ni_errs) == len(errs) and {e["nid"] for e in ni_errs} <= set(C1_NIDS), ni_errs
    wait_for(lambda: _events(topology, "lpni_status", node="c1", nid=S1_NIDS[1],
                             healthy=False), timeout=10)
    blamed = ni_errs[-1]["nid"]
    assert _events(topology, "ni_status", node="c1", nid=blamed, healthy=False)
    ok(c1, "lnetctl", "net set --all --health 1000")
    ok(c1, "lnetctl", "peer set --all --health 1000")
    back = wait_for(lambda: _events(topology, "lpni_status", node="c1", nid=S1_NIDS[1],
                                    healthy=True), timeout=10)
    assert back[-1]["health"] == 1000
    assert _events(topology, "ni_status", node="c1", nid=blamed, healthy=True, status="up")
