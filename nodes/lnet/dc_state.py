"""Per-peer discovery state (spec §5.2; peer.c): the discovery phase's transition table,
the request/working queues and the effects that only move bits (each bit write an
``lpstate.fire`` event: the bits and their one transition function are ``lpstate.py``).

Theory of operation. The *phase* of a peer is derived from its ``lp_state`` bits (``phase``:
IDLE = not DISCOVERING, QUEUED = on the request queue, PING_WAIT = PING_SENT, PUSH_WAIT =
PUSH_SENT) and ``TRANSITIONS[(phase, input)] -> (effect, next)`` (STYLE rule 2). Inputs are
the MD events (DISCOVER, REPLY, ACK, SEND_FAIL, UNLINK, PUSH_RX) and, for a queued peer, the
rule the discovery thread picks first (``classify``, spec §5.2 rules 1-7: R_DELETE, R_DATA,
R_PING_FAILED, R_PUSH_FAILED, R_PING, R_PUSH, R_DONE). ``discovery.step`` applies an entry;
a missing key is a local protocol error with a defined outcome (-EPROTO).

The predicates are the real ones: ``lnet_is_discovery_disabled``, ``lnet_peer_needs_push``,
``lnet_peer_needs_ping`` and ``lnet_peer_is_uptodate_locked``. The effects here only change
bits and queues (``STATE_EFFECTS``); the merge of ping/push data is ``dc_merge.py``, sending
pings and pushes and the queue runner are ``discovery.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final

from nodes.lnet.actions import Action, Log
from nodes.lnet.errors import ETIMEDOUT
from nodes.lnet.lpstate import (
    DATA_PRESENT,
    DISCOVERED,
    DISCOVERING,
    FORCE_PING,
    FORCE_PUSH,
    MARK_DELETED,
    MARK_DELETION,
    MULTI_RAIL,
    NIDS_UPTODATE,
    NO_DISCOVERY,
    PING_FAILED,
    PING_SENT,
    PUSH_FAILED,
    PUSH_SENT,
    REDISCOVER,
    PeerEvent,
    fire,
)

if TYPE_CHECKING:
    from nodes.lnet.discovery import Discovery
    from nodes.lnet.peer import Peer

#: ``LNET_REDISCOVER_PEER``: the rule's result says "process this peer again right away"
REDISCOVER_PEER: Final = 1


class Phase(Enum):
    IDLE = "idle"
    QUEUED = "queued"
    PING_WAIT = "ping_wait"
    PUSH_WAIT = "push_wait"


class Input(Enum):
    DISCOVER = "discover"
    REPLY = "reply"
    ACK = "ack"
    SEND_FAIL = "send_fail"
    UNLINK = "unlink"
    PUSH_RX = "push_rx"
    R_DELETE = "r_delete"
    R_DATA = "r_data"
    R_PING_FAILED = "r_ping_failed"
    R_PUSH_FAILED = "r_push_failed"
    R_PING = "r_ping"
    R_PUSH = "r_push"
    R_DONE = "r_done"


_P, _I = Phase, Input
_EVENT_INPUTS: Final = (_I.REPLY, _I.ACK, _I.SEND_FAIL, _I.UNLINK)
_RULES: Final = (_I.R_DELETE, _I.R_DATA, _I.R_PING_FAILED, _I.R_PUSH_FAILED, _I.R_PING, _I.R_PUSH,
          _I.R_DONE)

#: (phase, input) -> (effect, next phase). Effects are the functions in ``_EFFECTS``.
TRANSITIONS: Final[dict[tuple[Phase, Input], tuple[str, Phase]]] = {
    (_P.IDLE, _I.DISCOVER): ("queue", _P.QUEUED),
    (_P.QUEUED, _I.DISCOVER): ("noop", _P.QUEUED),
    (_P.PING_WAIT, _I.DISCOVER): ("noop", _P.PING_WAIT),
    (_P.PUSH_WAIT, _I.DISCOVER): ("noop", _P.PUSH_WAIT),
    # a push may arrive in any phase: its data is stored and the peer (re)queued
    (_P.IDLE, _I.PUSH_RX): ("push_data", _P.QUEUED),
    (_P.QUEUED, _I.PUSH_RX): ("push_data", _P.QUEUED),
    (_P.PING_WAIT, _I.PUSH_RX): ("push_data", _P.PING_WAIT),
    (_P.PUSH_WAIT, _I.PUSH_RX): ("push_data", _P.PUSH_WAIT),
    # events on the ping MD
    (_P.PING_WAIT, _I.REPLY): ("ping_reply", _P.QUEUED),
    (_P.PING_WAIT, _I.SEND_FAIL): ("ping_failed", _P.QUEUED),
    (_P.PING_WAIT, _I.UNLINK): ("ping_failed", _P.QUEUED),
    # events on the push MD
    (_P.PUSH_WAIT, _I.ACK): ("push_acked", _P.QUEUED),
    (_P.PUSH_WAIT, _I.SEND_FAIL): ("push_failed", _P.QUEUED),
    (_P.PUSH_WAIT, _I.UNLINK): ("push_failed", _P.QUEUED),
    # the thread's rules for a queued peer (spec §5.2, first match wins)
    (_P.QUEUED, _I.R_DELETE): ("delete", _P.IDLE),
    (_P.QUEUED, _I.R_DATA): ("data_present", _P.QUEUED),
    (_P.QUEUED, _I.R_PING_FAILED): ("ping_failed_rule", _P.QUEUED),
    (_P.QUEUED, _I.R_PUSH_FAILED): ("push_failed_rule", _P.QUEUED),
    (_P.QUEUED, _I.R_PING): ("send_ping", _P.PING_WAIT),
    (_P.QUEUED, _I.R_PUSH): ("send_push", _P.PUSH_WAIT),
    (_P.QUEUED, _I.R_DONE): ("discovered", _P.IDLE),
}
# late events for an MD discovery no longer waits on (e.g. after a push replaced the data,
# or after completion): ignored, as the real handler ignores events on stale MD handles.
for _ph in (_P.IDLE, _P.QUEUED, _P.PUSH_WAIT, _P.PING_WAIT):
    for _inp in _EVENT_INPUTS:
        TRANSITIONS.setdefault((_ph, _inp), ("stale_event", _ph))


@dataclass(slots=True)
class DiscoveryQueues:
    """``ln_dc_request`` / ``ln_dc_working``; ``wake``: when the queued work is due."""

    request: list[Peer] = field(default_factory=list)
    working: list[Peer] = field(default_factory=list)
    running: bool = False
    wake: float = 0.0            # when the deferred work is due (0: at the next tick)


#: an effect: (engine, peer, now, **event fields) -> (rc, actions)
Effect = Callable[..., tuple[int, list[Action]]]


# ---------------------------------------------------------------------------- predicates
def phase(peer: Peer) -> Phase:
    """The peer's phase, derived from its ``lp_state`` bits."""
    s = peer.state
    if not s & DISCOVERING:
        return Phase.IDLE
    if s & PING_SENT:
        return Phase.PING_WAIT
    if s & PUSH_SENT:
        return Phase.PUSH_WAIT
    return Phase.QUEUED


def discovery_disabled(dc: Discovery, peer: Peer) -> bool:
    """``lnet_is_discovery_disabled``: global off, peer not MR, or NO_DISCOVERY (§5.3)."""
    return (not dc.tunables.discovery or not peer.state & MULTI_RAIL
            or bool(peer.state & NO_DISCOVERY))


def needs_push(dc: Discovery, peer: Peer) -> bool:
    """``lnet_peer_needs_push`` (spec §5.2); a non-MR node never pushes (dyn-010)."""
    s = peer.state
    if not dc.node.multi_rail:
        return False
    if not s & MULTI_RAIL or s & MARK_DELETED or s & PUSH_SENT:
        return False
    if s & FORCE_PUSH:
        return True
    return (not s & NO_DISCOVERY and bool(dc.tunables.discovery)
            and peer.node_seqno < dc.node.ping_seq)


def needs_ping(peer: Peer) -> bool:
    return bool(peer.state & FORCE_PING or not peer.state & NIDS_UPTODATE)


def is_uptodate(dc: Discovery, peer: Peer) -> bool:
    """``lnet_peer_is_uptodate_locked`` (spec §5.2)."""
    if peer.state & (DISCOVERING | FORCE_PING | FORCE_PUSH | REDISCOVER):
        return False
    if needs_push(dc, peer):
        return False
    return bool(peer.state & DISCOVERED and peer.state & NIDS_UPTODATE)


def classify(dc: Discovery, peer: Peer) -> Input:
    """The first matching rule of the discovery thread for a queued peer (spec §5.2)."""
    s = peer.state
    if s & (MARK_DELETION | MARK_DELETED):
        return Input.R_DELETE
    if s & DATA_PRESENT:
        return Input.R_DATA
    if s & PING_FAILED:
        return Input.R_PING_FAILED
    if s & PUSH_FAILED:
        return Input.R_PUSH_FAILED
    if needs_ping(peer):
        return Input.R_PING
    if needs_push(dc, peer):
        return Input.R_PUSH
    return Input.R_DONE

def queue(dc: Discovery, peer: Peer) -> None:
    """``lnet_peer_queue_for_discovery``: DISCOVERING, on the request queue."""
    q = dc.queues
    fire(peer, PeerEvent.QUEUE)
    if peer in q.working:
        q.working.remove(peer)
    if peer not in q.request:
        q.request.append(peer)


def to_working(dc: Discovery, peer: Peer) -> None:
    q = dc.queues
    if peer in q.request:
        q.request.remove(peer)
    if peer not in q.working:
        q.working.append(peer)


# ---------------------------------------------------------------------------- effects
def _noop(dc: Discovery, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    return 0, []


def _eff_queue(dc: Discovery, peer: Peer, now: float,
               **kw: object) -> tuple[int, list[Action]]:
    queue(dc, peer)
    return 0, []


def stale(dc: Discovery, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    return 0, [Log(level="info", text=f"discovery of {peer.primary_nid}: stale event ignored")]


def _ping_failed_evt(dc: Discovery, peer: Peer, now: float, *, status: int = -ETIMEDOUT,
                     **kw: object) -> tuple[int, list[Action]]:
    fire(peer, PeerEvent.PING_EVENT_FAILED)
    peer.ping_error, peer.ping_mdh = status or -ETIMEDOUT, 0
    return _requeue_failed(dc, peer, "ping", status)


def _push_failed_evt(dc: Discovery, peer: Peer, now: float, *, status: int = -ETIMEDOUT,
                     **kw: object) -> tuple[int, list[Action]]:
    fire(peer, PeerEvent.PUSH_EVENT_FAILED)
    peer.push_error, peer.push_mdh = status or -ETIMEDOUT, 0
    return _requeue_failed(dc, peer, "push", status)


def _requeue_failed(dc: Discovery, peer: Peer, what: str,
                    status: int) -> tuple[int, list[Action]]:
    """The tail of ``lnet_discovery_event_send|unlink`` for a failed ping or push (``what``):
    the error is kept on the peer and the peer goes back on the request queue, where
    ``lnet_peer_ping_failed|push_failed`` (rules 3 and 4) hand it on."""
    queue(dc, peer)
    return 0, [Log(level="info", text=f"discovery {what} to {peer.primary_nid} failed: {status}")]


def _push_acked(dc: Discovery, peer: Peer, now: float,
                **kw: object) -> tuple[int, list[Action]]:
    """ACK of our push: the peer now holds our buffer of that sequence (``lp_node_seqno``)."""
    fire(peer, PeerEvent.PUSH_ACKED)
    peer.node_seqno = peer.push_seq
    peer.push_mdh = 0
    queue(dc, peer)
    return 0, []


def _ping_failed_rule(dc: Discovery, peer: Peer, now: float,
                      **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_ping_failed``: retry by FORCE_PING; error 0 (truncation) retries now."""
    fire(peer, PeerEvent.PING_FAILED)
    rc, peer.ping_error = peer.ping_error, 0
    return (rc or REDISCOVER_PEER), []


def _push_failed_rule(dc: Discovery, peer: Peer, now: float,
                      **kw: object) -> tuple[int, list[Action]]:
    fire(peer, PeerEvent.PUSH_FAILED)
    rc, peer.push_error = peer.push_error, 0
    return (rc or REDISCOVER_PEER), []


def _discovered(dc: Discovery, peer: Peer, now: float,
                **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_discovered``: rule 7 (spec §5.2)."""
    fire(peer, PeerEvent.DISCOVERED)
    peer.dc_error = 0
    return 0, [Log(level="info", text=f"peer {peer.primary_nid} discovered "
                                      f"(state {peer.state:#x})")]


def _delete(dc: Discovery, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_deletion``: the peer goes; traffic recreates it non-MR (spec §5.4)."""
    if not peer.state & MARK_DELETED and peer in dc.peers.peers:
        dc.peers.delete_peer(peer)
        dc.recovery.forget_deleted_peers()
    fire(peer, PeerEvent.DELETION)
    return 0, [Log(level="info", text=f"peer {peer.primary_nid} deleted by discovery")]

STATE_EFFECTS: Final[dict[str, Effect]] = {
    "noop": _noop,
    "queue": _eff_queue,
    "stale_event": stale,
    "ping_failed": _ping_failed_evt,
    "push_failed": _push_failed_evt,
    "push_acked": _push_acked,
    "ping_failed_rule": _ping_failed_rule,
    "push_failed_rule": _push_failed_rule,
    "discovered": _discovered,
    "delete": _delete,
}
