"""The node driver (nodes/driver.py), shared by the node daemon and the simulator (issue 10):
actions carried out through the callbacks each side supplies, the timer re-armed only when the
engine's earliest deadline moves, MD waiters, health notices, LND timeouts."""

from __future__ import annotations

import dataclasses
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
    assert drv.timeouts.set_lnd_timeout(Net.parse("tcp"), 3) == 1  # its own --lnd-timeout wins
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


def test_health_tunables_are_published_once_then_on_change() -> None:
    """``testbed check`` judges health steps by the sensitivity: the driver publishes it (and
    retry_count, transaction_timeout) at its first drain and whenever it changes."""
    side = Side()
    drv = side.driver()
    drv.execute([])
    tun = [(k, f) for k, f in side.notices if k == "tunable"]
    assert tun == [("tunable", {"name": "health_sensitivity", "value": 100}),
                   ("tunable", {"name": "retry_count", "value": 2}),
                   ("tunable", {"name": "transaction_timeout", "value": 150})]
    drv.execute([])
    drv.execute(drv.engine.set_tunable("health_sensitivity", 250))
    drv.execute([])
    tun = [f for k, f in side.notices if k == "tunable"]
    assert tun[3:] == [{"name": "health_sensitivity", "value": 250}]


def test_ni_add_and_del_are_logged() -> None:
    side = Side()
    drv = side.driver()
    drv.ni_added(NI)
    drv.ni_removed(NI)
    drv.ni_removed(NID.parse("0@lo"))  # the loopback NI is nobody's evidence
    assert [(k, f) for k, f in side.notices if k.startswith("ni_")] == [
        ("ni_add", {"nid": str(NI), "interface": "eth0"}), ("ni_del", {"nid": str(NI)})]


def test_recorder_counts_bytes_and_samples_at_the_period_end(tmp_path: Any) -> None:
    """Payload bytes are counted per Transmit and per receive; a change inside a period is
    sampled by the sample timer at the period's end even if nothing else happens."""
    from nodes.lnet.events import MessageReceived
    from nodes.recorder import Recorder
    from testbed.observe import recfile

    side = Side()
    armed: list[float] = []
    drv = side.driver(arm_sample=armed.append)
    drv.recorder = Recorder(drv.engine, tmp_path / "c1.rec", node="c1", period=0.1)
    drv.execute([])  # first call samples at once (t=0)
    side.t = 0.05
    _, actions = drv.engine.ping(side.t, PEER, timeout=5.0)
    tx = dataclasses.replace(actions[0], payload=bytes(300))  # a Transmit with a payload
    drv.execute([tx])
    assert side.sent == [tx] and armed == [0.1]  # inside the period: sampled at its end
    drv.receive(MessageReceived(ni=NI, peer_nid=PEER, hdr=tx.hdr, payload=bytes(300)))
    assert armed == [0.1]  # one timer per period, not one per call
    side.t = 0.1
    drv.on_sample_timer()
    drv.recorder.close()
    rec = recfile.read(tmp_path / "c1.rec")
    ts, sent = rec.series("ni", str(NI), "tx_bytes")
    assert ts == [0.0, 0.1] and sent == [0, 300]
    assert rec.series("ni", str(NI), "rx_bytes")[1][-1] == 300
    assert rec.series("lpni", str(PEER), "tx_bytes")[1][-1] == 300


def test_trace_sink_turns_the_engine_trace_on_and_off() -> None:
    side = Side()
    drv = side.driver()
    traces: list[Any] = []
    drv.set_trace_sink(traces.append)
    assert drv.engine.trace_messages
    drv.execute(drv.engine.ping(side.t, PEER, timeout=5.0)[1])
    assert [t.event for t in traces] == ["send"]
    drv.set_trace_sink(None)
    assert not drv.engine.trace_messages


def test_forwarding_from_bring_up_is_logged_as_routing_enabled() -> None:
    """``modprobe lnet forwarding=enabled`` (a router from the start): the first drain after
    ``lnet configure`` says routing is on, so ``testbed check``'s routing invariant does not
    take the router's first forwarded message for one sent with routing off."""
    from nodes.lnet.tunables import apply_module_param

    side = Side()
    eng = LNetEngine(rng=random.Random(1), incarnation=7)
    apply_module_param(eng.tunables, "forwarding", "enabled")
    drv = NodeDriver(eng, now=lambda: side.t, transmit=side.sent.append,
                     arm_timer=side.armed.append, notify_peer_down=lambda nid: None,
                     notice_sink=lambda k, f: side.notices.append((k, f)))
    drv.run(eng.configure)
    assert ("routing", {"enabled": True, "rte_disabled": False}) in side.notices


def test_the_tail_drains_a_notice_after_quiet_batches_and_a_tunable_set_back() -> None:
    """After a batch the driver drains and syncs only when the health tunables or the
    engine's notices moved: a notice raised after quiet batches is still drained, and a
    tunable published by a direct ``flush_notices`` and then set back is published again."""
    side = Side()
    drv = side.driver()
    drv.execute([])
    drv.execute([])
    drv.execute(drv.engine.ni_set_fatal(NI, True, side.t, "carrier"))
    assert ("ni_link", {"nid": str(NI), "link": "down", "cause": "carrier"}) in side.notices
    drv.engine.set_tunable("health_sensitivity", 250)
    drv.flush_notices()  # (Fabric.flush, after a verb's direct engine call)
    drv.engine.set_tunable("health_sensitivity", 100)
    drv.execute([])
    assert [f["value"] for k, f in side.notices if k == "tunable"
            and f["name"] == "health_sensitivity"] == [100, 250, 100]


def test_a_deferring_driver_leaves_the_deadline_to_its_runtime() -> None:
    """``defer_rearm`` (the simulator's scheduler): after a batch the driver calls it instead
    of asking the deadline; the runtime's ``rearm`` arms the timer once, when it asks."""
    side, deferred = Side(), []
    drv = side.driver(defer_rearm=lambda: deferred.append(1))
    _, actions = drv.engine.ping(side.t, PEER, timeout=5.0)
    drv.execute(actions)
    drv.execute([])
    assert side.armed == [] and len(deferred) == 2
    drv.rearm()
    assert len(side.armed) == 1 and side.armed[0] is not None
