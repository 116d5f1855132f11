"""dbg-110 (seed 000): every local NI state change is logged at error level, once, whatever
caused it: NI added, NI removed, status down/up by ``net set --health`` (spec §3.6), by a
recovery ping (spec §3.5), by a send's health (spec §3.1) and link changes (nodes/lnet/nistate.py).
"""

from __future__ import annotations

from enginekit import TCP, C, make_node

from nodes.lnet.actions import Action, Log
from nodes.lnet.engine import LNetEngine


def _errors(actions: list[Action]) -> list[str]:
    assert all(a.level == "error" for a in actions if isinstance(a, Log)
               and a.text.startswith("local NI ")), actions
    return [a.text for a in actions if isinstance(a, Log) and a.level == "error"]


def _run(eng: LNetEngine, until: float) -> list[str]:
    """Run the engine's timers up to ``until``; the error lines they returned."""
    lines: list[str] = []
    while (t := eng.next_deadline()) is not None and t <= until:
        lines += _errors(eng.handle_timer(max(t, eng.mt_last, 0.0)))
    return lines


def test_ni_added_and_removed_are_logged_once() -> None:
    eng = make_node(1, C)
    assert eng.next_deadline() == 0.0  # logged at once, by the next tick
    assert _run(eng, 0.0) == [f"local NI {C[0]} added on eth0: status up",
                              f"local NI {C[1]} added on eth1: status up"]
    assert eng.next_deadline() is None and _run(eng, 10.0) == []
    eng.net_del(TCP, "eth1")
    assert _run(eng, 0.0) == [f"local NI {C[1]} removed from eth1"]
    assert eng.next_deadline() is None


def test_manual_health_and_recovery_ping_status_changes() -> None:
    """``net set --health 0`` takes the NI down (spec §3.6); local recovery pings bring it
    back to 1000 and up (spec §3.5): one error line each, naming the cause."""
    eng = make_node(1, C)
    # a bare engine has no LND to carry its pings to itself: seed 004's pings answered inside
    # the engine, behind the testbed-only knob (recovery.py)
    eng.set_tunable("testbed_seed_recovery_interval", 2)
    _run(eng, 0.0)
    eng.net_set_health(C[0], 0, 0.0)
    assert _run(eng, 0.0) == [f"local NI {C[0]} status down: health 0 after lnetctl net set "
                              "--health"]
    eng.net_set_health(C[0], 500, 0.0)  # no status change: no line
    lines = _run(eng, 60.0)
    assert lines == [f"local NI {C[0]} status up: health 1000 after recovery ping"]
    assert eng.local_nis()[0].status_str == "up"


def test_link_change_logs_link_and_status() -> None:
    """The link line (``lnet_set_link_fatal_state``) and, when clearing it brings a healthy
    NI's status back up, no duplicate from the sweep."""
    eng = make_node(1, C)
    _run(eng, 0.0)
    down = _errors(eng.ni_set_fatal(C[1], True, 1.0))
    assert down == [f"local NI {C[1]} link down: fatal state set"]
    assert _errors(eng.ni_set_fatal(C[1], False, 2.0)) == [
        f"local NI {C[1]} link up: fatal state cleared"]
    assert _run(eng, 5.0) == []
