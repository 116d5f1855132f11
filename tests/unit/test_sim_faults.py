"""Faults on the sim backend (testbed/sim/netfaults.py, issue 10 point 2): the kinds the
in-memory fabric models, on virtual time, with the socklnd's failures and the Mininet fault
events' kinds and fields."""

from __future__ import annotations

from typing import Any

import pytest
from enginekit import settle_sim

import testbed
from testbed.base import TestbedError
from testbed.observe.check import check_events

C1 = ["10.10.0.1@tcp", "10.11.0.1@tcp"]
S1 = ["10.10.0.2@tcp", "10.11.0.2@tcp"]


@pytest.fixture
def tb() -> Any:
    tb = settle_sim(testbed.up(backend="sim", seed=3))  # default topology: lnd_timeout 3 s
    yield tb
    tb.down()


def _since(tb: Any, mark: int, kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in tb.events()[mark:] if e["kind"] == kind
            and all(e.get(k) == v for k, v in match.items())]


def test_loss_is_tcp_retransmission_delay_not_lnet_loss(tb: Any) -> None:
    """Each lost attempt costs an RTO (200 ms, doubling): every PUT still completes, later."""
    t0 = tb.now
    assert tb.node("c1").put(S1[0], count=40)["completed"] == 40
    clean = tb.now - t0
    f = tb.fault.loss(node="c1", rate=0.2)
    t1 = tb.now
    reply = tb.node("c1").put(S1[0], count=40)
    assert reply["completed"] == 40 and reply["failed"] == 0
    assert tb.now - t1 >= clean + 0.2  # at least one retransmission timeout on the way
    (live,) = tb.fault.list()
    assert live["counters"]["retransmits"] > 0 and live["state"] == "active"
    final = tb.fault.delete(f["id"])
    assert final["counters"]["retransmits"] == live["counters"]["retransmits"]
    (applied,) = _since(tb, 0, "fault_applied")
    assert set(applied) == {"t", "kind", "id", "activation", "fault_kind", "spec", "seed"}
    assert (applied["fault_kind"], applied["activation"], applied["seed"]) == (
        "loss", 0, f["seed"])
    (reverted,) = _since(tb, 0, "fault_reverted")
    assert set(reverted) == {"t", "kind", "id", "activation", "fault_kind", "counters", "seed"}


def test_blackhole_write_is_taken_then_the_conn_closes_at_the_lnd_timeout(tb: Any) -> None:
    """s1 eth1 receives nothing: c1's PUTs to 10.11.0.2 ride the connection discovery made,
    so each write is taken by the socket (tx OK after the latency: on Linux a peer that
    stops answering raises nothing for many seconds, testbed/sim/paths.py) and lost; the
    connection closes after the NI's LND timeout without progress (3 s: lnet_notify dead);
    no ACK comes, so each PUT ends at transaction_timeout (10 s) with -ETIMEDOUT."""
    tb.fault.blackhole(node="s1", iface="eth1", direction="in")
    mark, t0 = len(tb.events()), tb.now
    reply = tb.node("c1").put(S1[1], count=4, size=0, src=C1[1])
    done = _since(tb, mark, "tx_done", node="c1")
    assert [(round(e["t"] - t0, 6), e["rc"], e["hstatus"]) for e in done] == \
        [(0.001, 0, "OK")] * 4
    assert not _since(tb, mark, "recv", node="s1", type="PUT")
    closed = _since(tb, mark, "peer_notify", node="c1", alive=False)
    assert [(round(e["t"] - t0, 6), e["lpni"]) for e in closed] == [(3.001, S1[1])]
    unlinks = _since(tb, mark, "md", node="c1", type="UNLINK")
    assert [(round(e["t"] - t0, 6), e["status"]) for e in unlinks] == [(10.0, -110)] * 4
    assert reply["sent"] == 4 and reply["failed"] == 4  # --source pinned the dead rail


def test_blackhole_connect_fails_at_the_lnd_timeout(tb: Any) -> None:
    """With no connection (c1 closed its own and s1's), the connect's SYN vanishes: the tx
    fails at the NI's LND timeout, -ETIMEDOUT, LOCAL_TIMEOUT (seed 003)."""
    tb.fault.blackhole(node="s1", iface="eth1", direction="in")
    tb.node("c1").put(S1[1], count=1, size=0, src=C1[1])  # the connection stalls and closes
    mark, t0 = len(tb.events()), tb.now
    tb.node("c1").put(S1[1], count=1, size=0, src=C1[1])
    sent = _since(tb, mark, "send", node="c1", type="PUT")
    done = [e for e in _since(tb, mark, "tx_done", node="c1") if e["tx"] == sent[0]["tx"]]
    assert [(round(e["t"] - t0, 6), e["rc"], e["hstatus"]) for e in done] == [
        (3.0, -110, "LOCAL_TIMEOUT")]


def test_partition_both_ways_and_one_way(tb: Any) -> None:
    f = tb.fault.partition(a=["c1"], b=["s1"])
    assert tb.node("c1").ping(S1[0], timeout=2).rc != 0
    assert tb.node("s1").ping(C1[0], timeout=2).rc != 0
    tb.fault.delete(f["id"])
    tb.fault.partition(a=["c1"], b=["s1"], oneway=True)
    # s1 -> c1 rides connections s1 opens; c1's answers go back over them
    assert tb.node("s1").ping(C1[0]).rc == 0
    dropped = tb.fault.list()[0]["counters"].get("dropped", 0)
    assert dropped == 0


def test_kill_resets_then_refuses_and_restart_is_a_new_incarnation(tb: Any) -> None:
    """kill: s1's engine stops; c1's tx on an established connection is reset (-EIO,
    LOCAL_ERROR), later ones refused (-ECONNREFUSED, REMOTE_DROPPED), as on Mininet after a
    SIGKILL. Reverted (duration): s1 restarts, a new incarnation configured as at bring-up,
    and c1's next connection to it reports the reset (lnet_notify reset)."""
    inc = tb.runtimes["s1"].incarnation
    tb.fault.kill(node="s1", duration=5)
    with pytest.raises(TestbedError, match="node s1: not running"):
        tb.node("s1").lnetctl("net show")
    mark = len(tb.events())
    tb.node("c1").put(S1[0], count=2, size=0, src=C1[0])
    fails = [(e["rc"], e["hstatus"]) for e in _since(tb, mark, "tx_done", node="c1")
             if e["rc"] != 0]
    assert fails[0] == (-5, "LOCAL_ERROR") and (-111, "REMOTE_DROPPED") in fails[1:]
    tb.run(6)
    assert tb.runtimes["s1"].incarnation != inc
    assert _since(tb, mark, "node_restarted", node="s1")
    assert tb.node("s1").yaml("net show")["net"][1]["local NI(s)"][0]["nid"] == S1[0]
    mark = len(tb.events())
    assert tb.node("c1").ping(S1[0]).rc == 0
    assert _since(tb, mark, "peer_notify", node="c1", alive=True, reset=True)


def test_flap_follows_its_schedule_on_virtual_time(tb: Any) -> None:
    t0 = tb.now
    tb.fault.flap(node="c1", iface="eth1", down=2, up=3, count=2)
    tb.run(20)
    links = [(e["kind"], round(e["t"] - t0, 6)) for e in tb.events()
             if e["kind"] in ("link_down", "link_up") and e.get("by") == "fault"]
    assert links == [("link_down", 0.0), ("link_up", 2.0), ("link_down", 5.0),
                     ("link_up", 7.0)]
    assert tb.fault.list()[0]["state"] == "done"


@pytest.mark.parametrize("kind, kw, why", [
    ("delay", {"node": "c1", "delay": 5, "reorder": True}, "reorder is not modelled"),
    ("stop", {"node": "c1"}, "stop: not modelled by the sim backend"),
    ("loss", {"node": "c1", "p": 0.1, "r": 0.5}, "models rate only"),
    ("loss", {"node": "c1", "rate": 0.1, "match": {"port": 80}}, "match on port"),
])
def test_what_the_fabric_cannot_model_is_refused_in_one_line(tb: Any, kind: str,
                                                             kw: dict[str, Any],
                                                             why: str) -> None:
    with pytest.raises(TestbedError, match=why) as info:
        tb.fault.add(kind, **kw)
    assert "\n" not in str(info.value)
    assert tb.fault.list() == []


def test_kill_and_restart_without_duration_are_done_once_applied(tb: Any) -> None:
    """Issue 11 item 10: a restart, and a kill nothing will revert, are events: "done" in
    ``fault list`` once applied (they stayed "active" forever); a kill with a duration is
    active until its restart, then done; a pending one is pending."""
    later = tb.fault.restart(node="c1", start=30)
    assert later["state"] == "pending"
    restart = tb.fault.restart(node="s1")
    kill = tb.fault.kill(node="c1", duration=5)
    assert (restart["state"], kill["state"]) == ("done", "active")
    states = {f["id"]: (f["state"], f["next"]) for f in tb.fault.list()}
    assert states[restart["id"]] == ("done", None)
    tb.run(6)
    assert {f["id"]: f["state"] for f in tb.fault.list()} == {
        later["id"]: "pending", restart["id"]: "done", kill["id"]: "done"}
    tb.run(30)
    gone = tb.fault.kill(node="s1")
    assert {f["id"]: f["state"] for f in tb.fault.list()} == {
        later["id"]: "done", restart["id"]: "done", kill["id"]: "done", gone["id"]: "done"}


def test_restart_of_a_running_node_checks_clean() -> None:
    """``restart`` without a kill first, traffic before and after: the new engine's message
    numbers start again, and ``testbed check`` reads its ``node_restarted`` (no pid: no
    process) as a new incarnation, not as the end of a supervisor's restart of the same
    process (which flagged every reused number "sent again after its completion")."""
    tb = settle_sim(testbed.up(backend="sim", seed=3, trace_messages=True))
    try:
        tb.node("c1").put(S1[0], count=20, size=0)
        tb.restart("c1")
        tb.node("c1").put(S1[0], count=20, size=0)
        tb.run(5)
        result = check_events(tb.fabric.compact_log())
        assert result.invariants["completion"].checked >= 40
        assert result.ok, result.render()
    finally:
        tb.down()
