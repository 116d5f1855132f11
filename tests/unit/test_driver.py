"""The node driver (nodes/driver.py), shared by the node daemon and the simulator (issue 10):
actions carried out through the callbacks each side supplies, the timer re-armed only when the
engine's earliest deadline moves, MD waiters, health notices, LND timeouts."""

from __future__ import annotations

import random
from typing import Any

from nodes.driver import NodeDriver
from nodes.lnet.actions import Log, MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net

NI = NID.parse("10.10.0.1@tcp")
PEER = NID.parse("10.10.0.2@tcp")


class Side:
    """What one side supplies: a clock, a wire, a timer, sinks; records every call."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sent: list[Transmit] = []
        self.armed: list[float | None] = []
        self.notices: list[tuple[str, dict[str, Any]]] = []
        self.logs: list[Log] = []
        self.mds: list[MDEvent] = []
        self.timeouts: list[tuple[NID, float]] = []

    def driver(self, **kw: Any) -> NodeDriver:
        eng = LNetEngine(rng=random.Random(1), incarnation=7)
        eng.configure()
        eng.net_add(Net.parse("tcp"), "eth0", NI)
        return NodeDriver(eng, now=lambda: self.t, transmit=self.sent.append,
                          arm_timer=self.armed.append, notify_peer_down=lambda nid: None,
                          log=self.logs.append, md_sink=self.mds.append,
                          notice_sink=lambda k, f: self.notices.append((k, f)),
                          set_lnd_timeout=lambda nid, s: self.timeouts.append((nid, s)), **kw)


def test_timer_is_armed_only_when_the_deadline_moves() -> None:
    side = Side()
    drv = side.driver()
    drv.execute([])
    assert side.armed == [0.0]  # the NI's state change waits to be logged (dbg-110): at once
    drv.on_timer()
    assert side.armed == [0.0, None]  # logged; nothing else is due
    _, actions = drv.engine.ping(side.t, PEER, timeout=5.0)
    drv.execute(actions)
    assert len(side.armed) == 3 and side.armed[2] is not None  # the ping's deadline
    for _ in range(5):
        drv.execute([])  # nothing moved the deadline: no re-arm
    assert len(side.armed) == 3
    side.t = side.armed[2]
    drv.on_timer()  # a timer that fired is re-armed
    assert len(side.armed) == 4


def test_ping_goes_out_through_transmit_and_its_md_events_reach_the_waiter() -> None:
    side = Side()
    drv = side.driver()
    seen: list[MDEvent] = []
    handle, actions = drv.engine.ping(side.t, PEER, timeout=1.0)
    drv.watch(handle, seen.append)
    drv.execute(actions)
    assert len(side.sent) == 1 and side.sent[0].lpni == PEER  # the wire got the GET
    side.t = 2.0
    drv.on_timer()  # nobody answered: the ping times out, its MD is unlinked
    assert seen and seen[-1].unlinked and seen[-1].handle == handle
    assert handle not in drv.waiters  # unlinked: the waiter is dropped
    assert side.mds[-1] == seen[-1]  # every MD event also reaches the sink


def test_notices_are_drained_to_the_sink_and_lnd_timeouts_follow_lnet() -> None:
    side = Side()
    drv = side.driver()
    drv.execute(drv.engine.ni_set_fatal(NI, True, side.t, "carrier"))
    assert ("ni_link", {"nid": str(NI), "link": "down", "cause": "carrier"}) in side.notices
    drv.engine.set_tunable("retry_count", 1)
    drv.engine.set_tunable("transaction_timeout", 21)
    drv.execute([])  # lnd_timeout = max((21 - 1) / (1 + 1), 1) = 10
    assert side.timeouts == [(NI, 10.0)] and drv.engine.ni_by_nid(NI).lnd_timeout == 10
    assert drv.set_lnd_timeout(Net.parse("tcp"), 3) == 1  # its own --lnd-timeout wins
    drv.engine.set_tunable("transaction_timeout", 41)
    drv.execute([])
    assert side.timeouts[-1] == (NI, 3.0) and drv.engine.ni_by_nid(NI).lnd_timeout == 3


def test_without_a_notice_sink_nothing_is_drained() -> None:
    """Unit harnesses (a bare Fabric) leave notices in the engine's bounded queue."""
    side = Side()
    drv = side.driver()
    drv.notice_sink = None
    drv.execute(drv.engine.ni_set_fatal(NI, True, side.t, "carrier"))
    assert side.notices == [] and drv.engine.notices.pending
