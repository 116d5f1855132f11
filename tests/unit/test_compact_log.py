"""The fabric keeps a message's send, recv, tx_done and md records compact (tuples,
``testbed/sim/sched.py``): ``event_log``/``events()`` must give the dicts the fabric wrote
before, in order, and ``testbed check`` over the compact log must say what it says over the
dicts (explore checks the compact log: ``Replay.check``). A routed Multi-Rail cluster under
traffic with a link flap and a router restart (every kind of record), and the same log with
a forged second completion (a violation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.explore.replay import Replay
from testbed.observe.check import check_events
from testbed.sim import SimTestbed
from testbed.sim.sched import as_event

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "mr-routers.yaml"


def _run() -> tuple[SimTestbed, Replay]:
    tb = SimTestbed.up(TOPOLOGY, trace_messages=True)
    r = Replay(tb)
    r.stream("c1", "put", tb.plan.node("s1").nids[0], every=0.05, count=100, size=4096)
    r.stream("s1", "get", tb.plan.node("c1").nids[1], every=0.07, count=60, size=1024)
    r.advance(1.0)
    tb.link("r1", "eth2", "down")
    r.advance(2.0)
    tb.restart("r2")
    tb.link("r1", "eth2", "up")
    r.advance(4.0)
    return tb, r


def test_compact_records_become_the_dicts_in_order() -> None:
    tb, _ = _run()
    try:
        compact = list(tb.fabric.compact_log())
        kinds = {rec[0] for rec in compact if type(rec) is tuple}
        assert kinds == {"send", "recv", "tx_done", "md"}
        check = check_events(compact).render()
        events = tb.events()
        assert len(events) == len(compact)
        for rec, ev in zip(compact, events, strict=True):
            want: Any = as_event(rec) if type(rec) is tuple else rec
            assert ev == want and list(ev) == list(want)
        assert list(events[0])[:3] == ["t", "kind", "node"]
        sends = [e for e in events if e["kind"] == "send"]
        assert sends and list(sends[0]) == ["t", "kind", "node", "tx", "type", "ni", "lpni",
                                            "src", "dst", "nob"]
        # turned into dicts in place: the fabric's list holds them now, nothing compact
        assert all(type(e) is dict for e in tb.fabric.compact_log())
        assert check_events(events).render() == check
    finally:
        tb.down()


def test_check_reads_a_violation_in_the_compact_log_as_in_the_dicts() -> None:
    tb, r = _run()
    try:
        log = list(tb.fabric.compact_log())
        # a forged completion twice over: the completion invariant must fail either way
        done = next(e for e in log if type(e) is dict and e.get("event") == "complete")
        log.append(dict(done, t=tb.now))
        bad = check_events(log)
        assert not bad.ok
        assert bad.render() == check_events(
            [as_event(e) if type(e) is tuple else e for e in log]).render()
        # explore's check (the compact log) says what the dicts say
        assert r.check().render() == check_events(
            [as_event(e) if type(e) is tuple else e for e in tb.fabric.compact_log()]).render()
    finally:
        tb.down()
