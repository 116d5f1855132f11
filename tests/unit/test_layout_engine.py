"""The engine's state changes in one place per component (issue 29 item 4): a peer's
``lp_state`` bits are written only by ``nodes/lnet/lpstate.py`` ``fire``, through the pure
``transition`` and its one table; an event from a state its rule does not allow raises.

The sources of ``nodes/lnet`` and ``nodes/lnd`` are read with ``ast``: no assignment,
augmented assignment (``|=``, ``&=``, ...), ``setattr`` or ``Peer(state=...)`` reaches a
``state`` attribute of another object anywhere but in ``fire``. (``self.state`` of the
router's ``ln_routing`` and of a socklnd connection's framing machine are their own objects'
fields, and ``Peer`` has no method writing its own.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nodes.lnet import lpstate
from nodes.lnet.lpstate import (
    DATA_PRESENT,
    DISCOVERED,
    DISCOVERING,
    FORCE_PING,
    FORCE_PUSH,
    MULTI_RAIL,
    NIDS_UPTODATE,
    PING_FAILED,
    PING_SENT,
    PUSH_SENT,
    REDISCOVER,
    RTR_DISCOVERED,
    RTR_DISCOVERY,
    LpStateError,
    PeerEvent,
    transition,
)
from nodes.lnet.peer import Peer

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ("nodes/lnet", "nodes/lnd")
WRITER = ("nodes/lnet/lpstate.py", "fire")


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    else:
        return []
    flat: list[ast.expr] = []
    while found:
        t = found.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            found += t.elts
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            flat.append(t)
    return flat


def _state_writes(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, enclosing function) of every write of a ``state`` field of another object."""
    writes: list[tuple[int, str]] = []

    def visit(node: ast.AST, func: str, cls: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        elif isinstance(node, ast.ClassDef):
            cls = node.name
        for t in _targets(node):
            if isinstance(t, ast.Attribute) and t.attr == "state" and not (
                    isinstance(t.value, ast.Name) and t.value.id == "self" and cls != "Peer"):
                writes.append((node.lineno, func))
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else (
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
            if name == "setattr" and len(node.args) > 1 and isinstance(
                    node.args[1], ast.Constant) and node.args[1].value == "state":
                writes.append((node.lineno, func))
            if name == "Peer" and any(k.arg == "state" for k in node.keywords):
                writes.append((node.lineno, func))
        for child in ast.iter_child_nodes(node):
            visit(child, func, cls)

    visit(tree, "<module>", "")
    return writes


def _engine_writes() -> list[str]:
    out = []
    for pkg in ENGINE:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, func in _state_writes(ast.parse(path.read_text(), rel)):
                out.append(f"{rel}:{line} in {func}")
    return out


def test_lp_state_written_only_by_fire() -> None:
    """Issue 29 item 4: every lp_state write goes through ``lpstate.fire``."""
    writes = _engine_writes()
    assert writes == [f"{WRITER[0]}:{_fire_line()} in {WRITER[1]}"], writes


def _fire_line() -> int:
    tree = ast.parse((ROOT / WRITER[0]).read_text())
    fire = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fire")
    return next(n.lineno for n in ast.walk(fire) if _targets(n))


def test_the_scan_sees_every_kind_of_write() -> None:
    """The AST scan itself: each way of writing the field is found."""
    src = ("def f(peer, gw, other):\n"
           "    peer.state |= 1\n"
           "    gw.state &= ~2\n"
           "    other.data, other.state = None, 3\n"
           "    setattr(peer, 'state', 4)\n"
           "    Peer(nid, state=8)\n"
           "class Peer:\n"
           "    def g(self):\n"
           "        self.state = 0\n"
           "class Router:\n"
           "    def h(self):\n"
           "        self.state = 0\n")
    assert [line for line, _ in _state_writes(ast.parse(src))] == [2, 3, 4, 5, 6, 9]


def test_every_event_has_a_rule() -> None:
    assert set(lpstate.TRANSITIONS) == set(PeerEvent)


@pytest.mark.parametrize(("state", "event"), [
    (0, PeerEvent.SEND_PING),                                  # not queued for discovery
    (DISCOVERING | PUSH_SENT, PeerEvent.SEND_PING),            # a push is in flight
    (DISCOVERING | PING_SENT, PeerEvent.SEND_PUSH),            # a ping is in flight
    (DISCOVERING, PeerEvent.PUSH_ACKED),                       # no push sent
    (DISCOVERING, PeerEvent.PING_REPLIED),                     # no ping sent
    (DISCOVERING | PING_SENT, PeerEvent.DISCOVERED),           # still waiting on the ping
    (DISCOVERING | PUSH_SENT, PeerEvent.DATA_MERGED),          # not queued: a push waits
    (DISCOVERING, PeerEvent.COMPLETE_ERROR),                   # not completed yet
    (0, PeerEvent.RTR_DISCOVERED),                             # no router discovery
    (0, PeerEvent.DELETION),                                   # not queued
])
def test_illegal_transition_raises(state: int, event: PeerEvent) -> None:
    with pytest.raises(LpStateError, match=event.name):
        transition(state, event)


def test_fire_refuses_and_keeps_the_bits() -> None:
    peer = Peer.__new__(Peer)
    peer.state = MULTI_RAIL  # building the test object, not the engine
    with pytest.raises(LpStateError):
        lpstate.fire(peer, PeerEvent.PUSH_ACKED)
    assert peer.state == MULTI_RAIL


@pytest.mark.parametrize(("state", "event", "new"), [
    # peer.c lnet_peer_send_ping: FORCE_PING cleared, PING_SENT set
    (DISCOVERING | FORCE_PING, PeerEvent.SEND_PING, DISCOVERING | PING_SENT),
    (DISCOVERING | FORCE_PUSH, PeerEvent.SEND_PUSH, DISCOVERING | PUSH_SENT),
    # lnet_discovery_event_send / _unlink on the ping MD
    (DISCOVERING | PING_SENT, PeerEvent.PING_EVENT_FAILED, DISCOVERING | PING_FAILED),
    # lnet_peer_ping_failed: retried by FORCE_PING
    (DISCOVERING | PING_FAILED, PeerEvent.PING_FAILED, DISCOVERING | FORCE_PING),
    # lnet_peer_data_present
    (DISCOVERING | DATA_PRESENT, PeerEvent.DATA_MERGED, DISCOVERING | NIDS_UPTODATE),
    # lnet_peer_discovered
    (DISCOVERING | REDISCOVER | NIDS_UPTODATE, PeerEvent.DISCOVERED,
     DISCOVERED | NIDS_UPTODATE),
    # lnet_peer_discovery_complete, router.c lnet_router_discovery_complete
    (DISCOVERING | PING_SENT | PUSH_SENT | MULTI_RAIL, PeerEvent.COMPLETE, MULTI_RAIL),
    (RTR_DISCOVERY, PeerEvent.RTR_DISCOVERED, RTR_DISCOVERED),
    # api-ni.c lnet_peer_ni_cmd: the value as given, a u32
    (DISCOVERED, PeerEvent.SET_STATE, 0x5),
])
def test_transition_results(state: int, event: PeerEvent, new: int) -> None:
    value = 2**32 + 5 if event is PeerEvent.SET_STATE else 0
    assert transition(state, event, value) == new
