"""The engine's components at their seams: the timer structure and the driver's re-arm
signal (``timers.py``, ``LNetEngine.deadline_changed``), the message lifecycle table
(``msg.py``) and the injectable decisions (``decisions.py``, issue 17's test hooks)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import pytest
from enginekit import PORTAL, C, S, mr2_fabric

import nodes.lnet
from nodes.lnet.actions import Action
from nodes.lnet.decisions import Decisions
from nodes.lnet.hdr import LNetHdr, MsgType
from nodes.lnet.msg import TRANSITIONS, LNetLifecycleError, Msg, MsgInput, MsgPhase
from nodes.lnet.timers import MD_RESPONSE, MONITOR, Timers
from testbed.sim.fabric import Fabric


def _put(fab: Fabric, **kw: object) -> int:
    eng = fab.engines["c1"]
    return fab.call("c1", eng.put, fab.now, S[0], payload=bytes(64), portal=PORTAL,
                    **kw)  # type: ignore[return-value]


# ---------------------------------------------------------------------------- timers
def test_timers_keep_one_deadline_per_key_and_expire_in_order() -> None:
    t = Timers()
    t.arm((MD_RESPONSE, 7), 5.0, (7, 0))
    t.arm((MD_RESPONSE, 3), 5.0, (3, 0))
    t.arm((MONITOR, 0), 2.0)
    t.arm((MONITOR, 0), 9.0)  # re-armed: the old time is gone
    assert t.next_deadline() == 5.0 and not t.changed
    t.arm((MD_RESPONSE, 9), 6.0, (9, 0))
    assert not t.changed  # later than the earliest: the driver's timer is still right
    t.arm((MD_RESPONSE, 1), 1.0, (1, 0))
    assert t.changed and t.next_deadline() == 1.0
    t.cancel((MD_RESPONSE, 1))
    assert t.changed and t.next_deadline() == 5.0
    assert t.due(6.0, frozenset({MD_RESPONSE})) == [(MD_RESPONSE, 3), (MD_RESPONSE, 7),
                                                    (MD_RESPONSE, 9)]
    assert t.next_deadline() == 9.0 and t.deadline((MONITOR, 0)) == 9.0


def test_deadline_changed_only_when_the_earliest_deadline_moves() -> None:
    """A driver re-arms its timer only when ``deadline_changed``: a second PUT behind an
    outstanding one leaves the earliest deadline (the first PUT's tracker) alone."""
    fab = mr2_fabric()
    c1 = fab.engines["c1"]
    fab.hold = True  # nothing is delivered: both PUTs stay outstanding

    def put() -> list[Action]:  # the engine call alone: the fabric's driver reads the flag
        return c1.put(fab.now, S[0], payload=bytes(64), portal=PORTAL)[1]

    actions = put()
    assert c1.deadline_changed
    first = c1.next_deadline()
    assert first is not None and not c1.deadline_changed
    fab.apply("c1", actions)
    fab.now += 0.5
    actions = put()
    assert not c1.deadline_changed and c1.next_deadline() == first
    fab.apply("c1", actions)
    c1.net_set_health(C[0], 500, fab.now)  # the NI state log and the monitor tick: earlier
    assert c1.deadline_changed and c1.next_deadline() == 0.0


# ---------------------------------------------------------------------------- lifecycle
def test_lifecycle_table_refuses_what_lnet_msg_cannot_do() -> None:
    hdr = LNetHdr(dest_nid=S[0], src_nid=C[0], dest_pid=12345, src_pid=12345,
                  type=MsgType.PUT, payload_length=0)
    msg = Msg(1, MsgType.PUT, hdr, b"")
    for inp in (MsgInput.COMMIT, MsgInput.TRANSMIT, MsgInput.FINALIZE):
        msg.fire(inp)
    assert msg.phase is MsgPhase.DONE
    with pytest.raises(LNetLifecycleError):
        msg.fire(MsgInput.TRANSMIT)  # a finalized message is never sent again
    assert (MsgPhase.NEW, MsgInput.TRANSMIT) not in TRANSITIONS  # credits first
    assert all((p, MsgInput.FINALIZE) in TRANSITIONS for p in MsgPhase if p is not
               MsgPhase.DONE)


def test_every_message_ends_finalized_and_off_the_active_list() -> None:
    fab = mr2_fabric()
    c1 = fab.engines["c1"]
    for _ in range(20):
        _put(fab)
    fab.run_until(fab.now + 2)
    assert not c1.sender.txs and c1.counters.values["msgs_alloc"] == 0


# ---------------------------------------------------------------------------- decisions
def test_a_wrong_selection_decision_is_injected_per_engine() -> None:
    """issue 17's seam: c1 always picks its first pair; s1 keeps the real selector."""
    def first_pair(**kw: Any) -> tuple[Any, Any]:
        lpni = kw["lpni"]
        src = kw["src"]
        ni = src or kw["nets"][lpni.nid.net].nis[0]
        return ni, lpni

    fab = mr2_fabric()
    c1 = fab.engines["c1"]
    c1.sender.decisions = replace(c1.sender.decisions, select_pathway=first_pair)
    for _ in range(10):
        _put(fab)
    fab.run_until(fab.now + 2)
    assert [ni.stats.sent.put for ni in c1.local_nis()] == [10, 0]
    assert sum(ni.stats.sent.ack for ni in fab.engines["s1"].local_nis()) == 10


def test_wrong_health_and_resend_decisions_are_injected() -> None:
    """No decrement and never resend: a failed PUT leaves health at 1000 and ends failed."""
    fab = mr2_fabric()
    c1 = fab.engines["c1"]
    wrong = Decisions(health_step=lambda value, sensitivity, up: value,
                      resend=lambda msg, decision: False)
    c1.health.decisions = c1.sender.decisions = wrong
    fab.set_link(S[0], False)
    fab.set_link(S[1], False)
    h = _put(fab)
    fab.run_until(fab.now + 5)
    final = [e for e in fab.events["c1"] if e.handle == h and e.unlinked]
    assert len(final) == 1 and final[0].status != 0
    assert c1.counters.values["resend_count"] == 0
    assert all(lp.healthv == 1000 for lp in c1.peers.find_peer(S[0]).lpnis)  # type: ignore


# ---------------------------------------------------------------------------- the walk
def _entries(fn: Any) -> list[str]:
    """Modules of nodes/lnet entered (called from another module) while ``fn`` runs;
    property reads, comprehensions, a value's ``__hash__``/``__eq__`` (a dict lookup by
    NID) and constructors (a header, a message: the dataclass ``__init__`` those have
    written out, for mypyc, was generated code before) are not stops (issue 12's "walk of
    one PUT")."""
    root = os.path.dirname(nodes.lnet.__file__) + os.sep

    def stop(frame: Any) -> bool:
        slf = frame.f_locals.get("self")
        prop = slf is not None and isinstance(getattr(type(slf), frame.f_code.co_name, None),
                                              property)
        name = frame.f_code.co_name
        return not prop and not name.startswith("<") and name not in ("__hash__", "__eq__",
                                                                       "__init__")

    out: list[str] = []

    def prof(frame: Any, event: str, arg: object) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(root) or not stop(frame):
            return
        caller = frame.f_back
        while caller is not None and not stop(caller):
            caller = caller.f_back
        mod = frame.f_code.co_filename[len(root):]
        if caller is None or caller.f_code.co_filename[len(root):] != mod:
            out.append(mod)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return out


@pytest.mark.skipif(nodes.lnet.NATIVE, reason="a walk of Python frames: the compiled engine "
                    "has none (the pure-Python unit run, LNET_TESTBED_PURE_PYTHON=1, walks it)")
def test_one_puts_walk_enters_no_module_twice() -> None:
    """issue 12 acceptance: ``put`` -> Transmit enters each module of the engine once."""
    fab = mr2_fabric()
    _put(fab)
    fab.run_until(fab.now + 1)
    c1 = fab.engines["c1"]
    walk = _entries(lambda: c1.put(fab.now, S[0], payload=bytes(64), portal=PORTAL))
    assert walk[:3] == ["engine.py", "requests.py", "mds.py"] and "select.py" in walk
    assert len(walk) == len(set(walk)), walk
