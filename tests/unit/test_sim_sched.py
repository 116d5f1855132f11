"""The simulator's scheduler (testbed/sim/sched.py): a node's deadline is asked once per
virtual instant, not after every batch of its actions (a delivery due now runs before any
timer, so asking earlier cannot change what runs next; issue 10's message rate)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from enginekit import PORTAL, S, mr2_fabric

from nodes.lnet.actions import Action, MDEvent
from testbed.explore.replay import Livelock, Replay
from testbed.sim.fabric import Fabric


class _Asked:
    """An upper layer with no MDs and no timers of its own (``NodeDriver.upper``): its
    driver asks its deadline with the engine's, so each ask is one ``rearm``."""

    handles: tuple[int, ...] = ()

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock, self.at = clock, list[float]()

    def on_md_event(self, ev: MDEvent, now: float) -> list[Action]:
        return []

    def next_deadline(self) -> float | None:
        self.at.append(self.clock())
        return None

    def handle_timer(self, now: float) -> list[Action]:
        return []


def test_a_node_that_takes_many_messages_in_one_instant_is_asked_its_deadline_once() -> None:
    fab = mr2_fabric()
    upper = fab.drivers["s1"].upper = _Asked(lambda: fab.now)
    asked = upper.at
    c, mark = fab.engines["c1"], len(fab.event_log)
    for _ in range(16):
        fab.apply("c1", c.put(fab.now, S[0], payload=b"x", portal=PORTAL)[1])
    fab.run_until(fab.now + 1)
    log = fab.event_log[mark:]
    puts = [e["t"] for e in log if e["kind"] == "recv" and e["node"] == "s1"
            and e["type"] == "PUT"]
    assert len(puts) == 16 and len(set(puts)) == 1  # all sixteen in one instant
    assert asked.count(puts[0]) == 1  # (after each batch, it was 16)
    acks = [e for e in log if e["kind"] == "md" and e["node"] == "c1" and e["type"] == "ACK"]
    assert len(acks) == 16 and all(e["status"] == 0 for e in acks)


def _run(eager: bool) -> list[dict[str, object]]:
    """PUTs over both rails, one of s1's links down mid-burst (resends, health, recovery
    pings on the monitor's timer), up again, more PUTs: timers and deliveries interleaved."""
    fab = mr2_fabric()
    if eager:  # as the daemon does: ask the deadline after every batch
        for drv in fab.drivers.values():
            drv._defer_rearm = None
    c, mark = fab.engines["c1"], len(fab.event_log)
    for i in range(24):
        fab.apply("c1", c.put(fab.now, S[0], payload=b"x", portal=PORTAL)[1])
        if i == 8:
            fab.set_link(S[1], False)
        fab.run_until(fab.now + 0.0005)
    fab.run_until(fab.now + 20)
    fab.set_link(S[1], True)
    for _ in range(8):
        fab.apply("c1", c.put(fab.now, S[0], payload=b"x", portal=PORTAL)[1])
    fab.run_until(fab.now + 20)
    return fab.event_log[mark:]


def test_asking_the_deadline_once_per_instant_changes_nothing_in_the_event_log() -> None:
    deferred = _run(eager=False)
    assert any(e["kind"] == "link_down" for e in deferred) and len(deferred) > 100
    assert deferred == _run(eager=True)


def test_a_guarded_run_stops_at_its_end_its_condition_or_a_livelock() -> None:
    """``Scheduler.run_guarded`` (explore's replay loop): time moves to ``t_end``, or stops
    when ``done()`` says so, and a fabric whose work keeps firing at one instant is reported
    (False) after ``same_limit`` steps there instead of hanging."""
    fab, ticks = Fabric(), list[float]()

    def tick() -> None:
        ticks.append(fab.now)
        fab.at(fab.now + 1.0, tick)

    fab.at(0.5, tick)
    assert fab.run_guarded(3.0, None, 50) and (fab.now, ticks) == (3.0, [0.5, 1.5, 2.5])
    assert fab.run_guarded(10.0, lambda: len(ticks) == 5, 50) and fab.now == 4.5
    stuck = Fabric()

    def again() -> None:
        stuck.at(stuck.now, again)

    stuck.at(1.0, again)
    assert not stuck.run_guarded(5.0, None, 50) and stuck.now == 1.0


def test_a_replay_whose_fabric_livelocks_raises_instead_of_hanging() -> None:
    fab = Fabric()

    def again() -> None:
        fab.at(fab.now, again)

    fab.at(2.0, again)
    tb = SimpleNamespace(fabric=fab, runtimes={}, lock=threading.Lock(), now=0.0)
    with pytest.raises(Livelock, match=r"stuck at t=2\.000000: 50000 steps"):
        Replay(tb).advance(5.0)
