"""A peer's ``lp_state`` bits (spec §1.3, §5.2; peer.c, router.c) and their one transition
function: the only writer of ``Peer.state`` in the engine.

Theory of operation. Real LNet sets and clears ``lp_state`` bits in some sixty places of
peer.c, router.c and api-ni.c, each under ``lp_lock``. Here every one of those writes is a
named event (``PeerEvent``, each named after the kernel function that makes it) and
``TRANSITIONS[event]`` says, in one table (STYLE rule 2, like ``nodes/lnd/framing.py`` and
``msg.py``), from which states the event is allowed (``requires``: every one of those bits set;
``forbids``: none of those set) and what the new state is (``clear`` then ``set``).
``transition(state, event)`` is pure; ``fire(peer, event)`` stores its result. An event whose
guard the state does not meet is an engine bug (``LpStateError``), never wire input: the
discovery machine (``dc_state.TRANSITIONS``) decides which event comes, and a late MD event is
dropped there, before it reaches the bits. The guards are what discovery's phase (derived from
the same bits, ``dc_state.phase``) promises where each event is fired, no more: whatever bits
``lnetctl peer set --state`` left, a (phase, input) the discovery table has never raises.

The one event that does not fit a mask is ``SET_STATE`` (``lnetctl peer set --state``:
api-ni.c ``lnet_peer_ni_cmd`` stores the user's value as given): ``fire(peer, SET_STATE,
value)`` replaces the bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from nodes.lnet.peer import Peer

# lp_state bits (spec §1.3; lnet/include/lnet/lib-types.h)
MULTI_RAIL: Final = 0x1
NO_DISCOVERY: Final = 0x2
ROUTER_ENABLED: Final = 0x4
CONFIGURED: Final = 0x8
DISCOVERED: Final = 0x10
REDISCOVER: Final = 0x20
DISCOVERING: Final = 0x40
DATA_PRESENT: Final = 0x80
NIDS_UPTODATE: Final = 0x100
PING_SENT: Final = 0x200
PUSH_SENT: Final = 0x400
PING_FAILED: Final = 0x800
PUSH_FAILED: Final = 0x1000
FORCE_PING: Final = 0x2000
FORCE_PUSH: Final = 0x4000
RTR_DISCOVERY: Final = 0x10000
RTR_DISCOVERED: Final = 0x20000
MARK_DELETION: Final = 0x40000
MARK_DELETED: Final = 0x80000
LOCK_PRIMARY: Final = 0x100000
#: set on a peer whose discovered NIDs clash with configured peers (dyn-060, see differences)
BAD_CONFIG: Final = 0x200000

_U32: Final = 2**32


class PeerEvent(Enum):
    """One kind of ``lp_state`` write; the value names where real LNet makes it."""

    # configuration (peer.c lnet_peer_attach_peer_ni, lnet_peer_add_nid; api-ni.c)
    CONFIGURE = "lnet_peer_attach_peer_ni: CONFIGURED"
    LOCK_PRIMARY = "lnet_peer_attach_peer_ni / lnet_peer_add_nid: LOCK_PRIMARY"
    MULTI_RAIL_ON = "lnet_peer_attach_peer_ni / lnet_discovery_event_reply: MULTI_RAIL"
    MULTI_RAIL_OFF = "lnet_discovery_event_reply: not MULTI_RAIL"
    BAD_CONFIG = "lnet_peer_add_nid: BAD_CONFIG"
    SET_STATE = "lnet_peer_ni_cmd: lp_state as given"
    # features of a reply or push (lnet_discovery_event_reply, lnet_peer_push_event)
    DISCOVERY_OFF = "lnet_discovery_event_reply: NO_DISCOVERY"
    DISCOVERY_ON = "lnet_discovery_event_reply: not NO_DISCOVERY"
    MARK_DELETION = "lnet_discovery_event_reply: MARK_DELETION"
    ROUTER_ON = "lnet_peer_merge_data / lnet_router_discovery_ping_reply: ROUTER_ENABLED"
    ROUTER_OFF = "lnet_peer_merge_data / lnet_router_discovery_ping_reply: not ROUTER_ENABLED"
    # triggers
    QUEUE = "lnet_peer_queue_for_discovery"
    NIDS_STALE = "lnet_discover / lnet_peer_push_event: not NIDS_UPTODATE"
    FORCE_PING = "lnet_discover(force) / lnet_check_routers: FORCE_PING"
    FORCE_PUSH = "lnet_push_update_to_peers / lnet_discover(force): FORCE_PUSH"
    FORCE_MERGE = "lnet_peer_force_merge"
    RTR_DISCOVERY = "lnet_check_routers: RTR_DISCOVERY"
    # the discovery thread (lnet_peer_discovery) and its MD events
    SEND_PING = "lnet_peer_send_ping"
    SEND_PUSH = "lnet_peer_send_push"
    PING_REPLIED = "lnet_discovery_event_reply: not PING_SENT"
    PING_BAD_REPLY = "lnet_discovery_event_reply: PING_FAILED"
    PING_EVENT_FAILED = "lnet_discovery_event_send / _unlink (ping)"
    PUSH_EVENT_FAILED = "lnet_discovery_event_send / _unlink (push)"
    PUSH_ACKED = "lnet_discovery_event_ack"
    DATA_STORED = "lnet_discovery_event_reply / lnet_peer_push_event: DATA_PRESENT"
    DATA_MERGED = "lnet_peer_data_present"
    PRIMARY_DATA = "lnet_peer_set_primary_data"
    PING_FAILED = "lnet_peer_ping_failed"
    PUSH_FAILED = "lnet_peer_push_failed"
    DISCOVERED = "lnet_peer_discovered"
    DELETION = "lnet_peer_deletion"
    PROTOCOL_ERROR = "no discovery transition (-EPROTO)"
    COMPLETE = "lnet_peer_discovery_complete"
    COMPLETE_ERROR = "lnet_peer_discovery_complete(dc_error): REDISCOVER"
    RTR_DISCOVERED = "lnet_router_discovery_complete"


@dataclass(frozen=True, slots=True)
class Rule:
    """Allowed from a state with every ``requires`` bit and no ``forbids`` bit; the new
    state is ``(state & ~clear) | set``."""

    set: int = 0
    clear: int = 0
    requires: int = 0
    forbids: int = 0


class LpStateError(Exception):
    """An ``lp_state`` event from a state its rule does not allow (an engine bug)."""


E = PeerEvent
_WAITING: Final = PING_SENT | PUSH_SENT

#: event -> the states it is allowed from and the state it makes (the only ``lp_state`` table)
TRANSITIONS: Final[dict[PeerEvent, Rule]] = {
    E.CONFIGURE: Rule(set=CONFIGURED),
    E.LOCK_PRIMARY: Rule(set=LOCK_PRIMARY),
    E.MULTI_RAIL_ON: Rule(set=MULTI_RAIL),
    E.MULTI_RAIL_OFF: Rule(clear=MULTI_RAIL),
    E.BAD_CONFIG: Rule(set=BAD_CONFIG),
    E.SET_STATE: Rule(clear=_U32 - 1),
    E.DISCOVERY_OFF: Rule(set=NO_DISCOVERY),
    E.DISCOVERY_ON: Rule(clear=NO_DISCOVERY),
    E.MARK_DELETION: Rule(set=MARK_DELETION),
    E.ROUTER_ON: Rule(set=ROUTER_ENABLED),
    E.ROUTER_OFF: Rule(clear=ROUTER_ENABLED),
    E.QUEUE: Rule(set=DISCOVERING),
    E.NIDS_STALE: Rule(clear=NIDS_UPTODATE),
    E.FORCE_PING: Rule(set=FORCE_PING),
    E.FORCE_PUSH: Rule(set=FORCE_PUSH),
    E.FORCE_MERGE: Rule(set=FORCE_PING, clear=NIDS_UPTODATE),
    E.RTR_DISCOVERY: Rule(set=RTR_DISCOVERY),
    # a ping or push leaves only from a queued peer that waits on neither
    E.SEND_PING: Rule(set=PING_SENT, clear=FORCE_PING, requires=DISCOVERING, forbids=_WAITING),
    E.SEND_PUSH: Rule(set=PUSH_SENT, clear=FORCE_PUSH, requires=DISCOVERING, forbids=_WAITING),
    E.PING_REPLIED: Rule(clear=PING_SENT, requires=PING_SENT),
    E.PING_BAD_REPLY: Rule(set=PING_FAILED, forbids=PING_SENT),
    E.PING_EVENT_FAILED: Rule(set=PING_FAILED, clear=PING_SENT, requires=PING_SENT),
    E.PUSH_EVENT_FAILED: Rule(set=PUSH_FAILED, clear=PUSH_SENT, requires=PUSH_SENT),
    E.PUSH_ACKED: Rule(clear=PUSH_SENT, requires=PUSH_SENT),
    E.DATA_STORED: Rule(set=DATA_PRESENT),
    E.PRIMARY_DATA: Rule(set=NIDS_UPTODATE, clear=PING_FAILED | FORCE_PING | DATA_PRESENT),
    # the thread's rules run on a queued peer only (discovery's phase QUEUED: DISCOVERING,
    # waiting on no ping or push; which rule comes is dc_state.classify's choice)
    E.DATA_MERGED: Rule(set=NIDS_UPTODATE, clear=DATA_PRESENT, requires=DISCOVERING,
                        forbids=_WAITING),
    E.PING_FAILED: Rule(set=FORCE_PING, clear=PING_FAILED, requires=DISCOVERING,
                        forbids=_WAITING),
    E.PUSH_FAILED: Rule(clear=PUSH_FAILED, requires=DISCOVERING, forbids=_WAITING),
    E.DISCOVERED: Rule(set=DISCOVERED, clear=DISCOVERING | REDISCOVER, requires=DISCOVERING,
                       forbids=_WAITING),
    E.DELETION: Rule(set=MARK_DELETED,
                     clear=DISCOVERING | FORCE_PING | FORCE_PUSH | MARK_DELETION,
                     requires=DISCOVERING),
    E.PROTOCOL_ERROR: Rule(clear=PING_SENT | PUSH_SENT | DATA_PRESENT),
    E.COMPLETE: Rule(clear=DISCOVERING | PING_SENT | PUSH_SENT),
    E.COMPLETE_ERROR: Rule(set=REDISCOVER, forbids=DISCOVERING),
    E.RTR_DISCOVERED: Rule(set=RTR_DISCOVERED, clear=RTR_DISCOVERY, requires=RTR_DISCOVERY),
}


def transition(state: int, event: PeerEvent, value: int = 0) -> int:
    """The state ``event`` makes of ``state`` (pure). ``value`` is ``SET_STATE``'s new bits
    (taken modulo 2**32, as the kernel's u32 ``lp_state``), ignored by every other event.

    Raises:
        LpStateError: ``state`` is not one ``event`` is allowed from.
    """
    rule = TRANSITIONS[event]
    if state & rule.requires != rule.requires or state & rule.forbids:
        raise LpStateError(f"lp_state {state:#x}: {event.name} ({event.value}) needs "
                           f"{rule.requires:#x} set and {rule.forbids:#x} clear")
    return (state & ~rule.clear) | rule.set | (value % _U32 if event is E.SET_STATE else 0)


def fire(peer: Peer, event: PeerEvent, value: int = 0) -> None:
    """Apply ``event`` to ``peer``'s ``lp_state``: the one place it is written."""
    peer.state = transition(peer.state, event, value)
