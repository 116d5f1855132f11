"""Peer discovery: ping, push, merge (spec §5; peer.c; seed 000 dyn-005..065, bck-025/030).

Theory of operation. A peer is discovered by a *ping* (a GET of ``max(lp_data_bytes, 272)``
bytes on portal 0 with the ping match bits, to its primary NID) whose REPLY carries the
peer's ping buffer (``ping.py``, spec §5.1), and told about us by a *push* (a PUT with ACK of
our own ping buffer on the same portal/match bits, dyn-005/015). The state lives in the
``lp_state`` bits of the peer (spec §1.3) and in the discovery fields of ``Peer``.

The machine is a transition table (STYLE rule 2): the *phase* of a peer is derived from its
bits (``phase``: IDLE = not DISCOVERING, QUEUED = on the request queue, PING_WAIT =
PING_SENT, PUSH_WAIT = PUSH_SENT) and ``TRANSITIONS[(phase, input)] -> (effect, next)``.
Inputs are the events (DISCOVER, REPLY, ACK, SEND_FAIL, UNLINK, PUSH_RX) and, for a queued
peer, the rule the discovery thread picks first (spec §5.2 rules 1-7: R_DELETE, R_DATA,
R_PING_FAILED, R_PUSH_FAILED, R_PING, R_PUSH, R_DONE). A missing key is a local protocol
error: it is logged and discovery of that peer completes with -EPROTO (defined outcome).

Queues: ``request`` (``ln_dc_request``) and ``working`` (``ln_dc_working``). The real
discovery thread wakes at most every second but is woken by every event; here the request
queue is processed at once on every event or trigger (``run_queue``) and, for triggers that
come without a clock (local NI added/removed, ``set discovery``), on the next engine tick
(``deadline``/``tick``).

Triggers (spec §5.3): the discovery gate of the send path (``gate``: a discovery-eligible
message to a peer that is not up to date waits on ``lp_dc_pendq``; the first message to a
new peer waits one ping round trip even with discovery disabled, §11.8; statically
configured peers are used as configured, see docs/differences.md), ``lnetctl
discover`` (``discover``: blocking, through an MD whose final event is the completion),
a local NI change (``local_ni_changed``: push to MR peers, dyn-045), a received push
(``on_push``), and router discovery (``start``, below). Completion (``complete``) fails the
pending messages with the error, or sends them again from scratch.

A node started non-Multi-Rail (``eng.multi_rail = False``, a "downrev" node, seed 000
"Backwards Compatibility") never initiates discovery, answers pings without the MULTI_RAIL
and DISCOVERY feature bits and drops pushes (dyn-010).

Interface for the router (``router.py``):

* ``start(eng, peer, now, force_ping=True, force_push=True, rtr_net=None) -> list[Action]``
  queues ``peer`` for discovery (setting FORCE_PING/FORCE_PUSH as asked) and runs the queue.
  With ``rtr_net`` (a ``Net``) the ping goes to the peer's NID on that net
  (``lp_disc_net_id``) and the peer carries RTR_DISCOVERY until completion, when
  RTR_DISCOVERED is set; while RTR_DISCOVERY is set the send gate lets messages to it pass.
* On every completion of a peer with ``rtr_refcount > 0``,
  ``eng.router.discovery_complete(peer, rc, now)`` is called if ``eng.router`` has it; its
  actions are added to the completion's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.errors import EHOSTUNREACH, EPERM, EPROTO, ETIMEDOUT, WireProtocolError
from nodes.lnet.hdr import (
    LNET_PING_INFO_MIN_SIZE,
    LNET_PROTO_PING_MATCHBITS,
    LNET_RESERVED_PORTAL,
    MsgType,
)
from nodes.lnet.hstatus import HStatus
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP
from nodes.lnet.ping import (
    LNET_PING_FEAT_DISCOVERY,
    LNET_PING_FEAT_MULTI_RAIL,
    LNET_PING_FEAT_RTE_DISABLED,
    PingInfo,
    ping_info_size,
)

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import MD, Msg
    from nodes.lnet.nid import NID, Net
    from nodes.lnet.peer import Peer

# lp_state bits (spec §1.3; the first ones also live in peer.py)
MULTI_RAIL = 0x1
NO_DISCOVERY = 0x2
ROUTER_ENABLED = 0x4
CONFIGURED = 0x8
DISCOVERED = 0x10
REDISCOVER = 0x20
DISCOVERING = 0x40
DATA_PRESENT = 0x80
NIDS_UPTODATE = 0x100
PING_SENT = 0x200
PUSH_SENT = 0x400
PING_FAILED = 0x800
PUSH_FAILED = 0x1000
FORCE_PING = 0x2000
FORCE_PUSH = 0x4000
RTR_DISCOVERY = 0x10000
RTR_DISCOVERED = 0x20000
MARK_DELETION = 0x40000
MARK_DELETED = 0x80000
LOCK_PRIMARY = 0x100000
#: set on a peer whose discovered NIDs clash with configured peers (dyn-060, see differences)
BAD_CONFIG = 0x200000

#: ``LNET_REDISCOVER_PEER``: the rule's result says "process this peer again right away"
REDISCOVER_PEER = 1
#: owner tags of discovery MDs (``MD.owner[0]``)
OWNER_PING = "dc_ping"
OWNER_PUSH = "dc_push"
OWNER_WAIT = "dc_wait"
_MAX_STEPS = 32  # guard: one peer is never processed more often than this per run


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
_EVENT_INPUTS = (_I.REPLY, _I.ACK, _I.SEND_FAIL, _I.UNLINK)
_RULES = (_I.R_DELETE, _I.R_DATA, _I.R_PING_FAILED, _I.R_PUSH_FAILED, _I.R_PING, _I.R_PUSH,
          _I.R_DONE)

#: (phase, input) -> (effect, next phase). Effects are the functions in ``_EFFECTS``.
TRANSITIONS: dict[tuple[Phase, Input], tuple[str, Phase]] = {
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
    """``ln_dc_request`` / ``ln_dc_working`` and the clockless work flags."""

    request: list[Peer] = field(default_factory=list)
    working: list[Peer] = field(default_factory=list)
    running: bool = False
    push_pending: bool = False   # local ping buffer changed: push to MR peers (dyn-045)
    push_force: bool = False     # ... with FORCE_PUSH (``set discovery 0``)
    wake: float = 0.0            # when the deferred work is due (0: at the next tick)


def _dc(eng: LNetEngine) -> DiscoveryQueues:
    dc = getattr(eng, "dc", None)
    if dc is None:
        dc = DiscoveryQueues()
        eng.dc = dc
    return dc


# ---------------------------------------------------------------------------- predicates
def phase(peer: Peer) -> Phase:
    s = peer.state
    if not s & DISCOVERING:
        return Phase.IDLE
    if s & PING_SENT:
        return Phase.PING_WAIT
    if s & PUSH_SENT:
        return Phase.PUSH_WAIT
    return Phase.QUEUED


def discovery_disabled(eng: LNetEngine, peer: Peer) -> bool:
    """``lnet_is_discovery_disabled``: global off, peer not MR, or NO_DISCOVERY (§5.3)."""
    return (not eng.tunables.discovery or not peer.state & MULTI_RAIL
            or bool(peer.state & NO_DISCOVERY))


def needs_push(eng: LNetEngine, peer: Peer) -> bool:
    """``lnet_peer_needs_push`` (spec §5.2); a non-MR node never pushes (dyn-010)."""
    s = peer.state
    if not getattr(eng, "multi_rail", True):
        return False
    if not s & MULTI_RAIL or s & MARK_DELETED or s & PUSH_SENT:
        return False
    if s & FORCE_PUSH:
        return True
    return (not s & NO_DISCOVERY and bool(eng.tunables.discovery)
            and peer.node_seqno < eng.ping_seq)


def needs_ping(peer: Peer) -> bool:
    return bool(peer.state & FORCE_PING or not peer.state & NIDS_UPTODATE)


def is_uptodate(eng: LNetEngine, peer: Peer) -> bool:
    """``lnet_peer_is_uptodate_locked`` (spec §5.2)."""
    if peer.state & (DISCOVERING | FORCE_PING | FORCE_PUSH | REDISCOVER):
        return False
    if needs_push(eng, peer):
        return False
    return bool(peer.state & DISCOVERED and peer.state & NIDS_UPTODATE)


def classify(eng: LNetEngine, peer: Peer) -> Input:
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
    if needs_push(eng, peer):
        return Input.R_PUSH
    return Input.R_DONE


# ---------------------------------------------------------------------------- the machine
def step(eng: LNetEngine, peer: Peer, inp: Input, now: float,
         **kw: object) -> tuple[int, list[Action]]:
    """Apply one input: the table's effect. Returns (rc, actions); rc as the real rules
    return it (0, a negative errno, or ``REDISCOVER_PEER``)."""
    key = (phase(peer), inp)
    entry = TRANSITIONS.get(key)
    if entry is None:
        # a local protocol error (STYLE rule 2): defined outcome, never an exception
        peer.state &= ~(PING_SENT | PUSH_SENT | DATA_PRESENT)
        return -EPROTO, [Log(level="error", text=f"discovery of {peer.primary_nid}: no "
                                                   f"transition for {key[0].value}/{inp.value}")]
    effect, _next = entry
    return _EFFECTS[effect](eng, peer, now, **kw)


def _queue(eng: LNetEngine, peer: Peer) -> None:
    """``lnet_peer_queue_for_discovery``: DISCOVERING, on the request queue."""
    dc = _dc(eng)
    peer.state |= DISCOVERING
    if peer in dc.working:
        dc.working.remove(peer)
    if peer not in dc.request:
        dc.request.append(peer)


def _to_working(eng: LNetEngine, peer: Peer) -> None:
    dc = _dc(eng)
    if peer in dc.request:
        dc.request.remove(peer)
    if peer not in dc.working:
        dc.working.append(peer)


def run_queue(eng: LNetEngine, now: float) -> list[Action]:
    """The discovery thread's loop over the request queue (``lnet_peer_discovery``)."""
    dc = _dc(eng)
    if dc.running:
        return []  # re-entered from an event raised while sending: the outer loop goes on
    dc.running = True
    actions: list[Action] = []
    steps: dict[int, int] = {}
    try:
        while dc.request:
            peer = dc.request.pop(0)
            n = steps[id(peer)] = steps.get(id(peer), 0) + 1
            if n > _MAX_STEPS:
                actions += complete(eng, peer, -EPROTO, now)
                continue
            if peer not in eng.peers.peers:
                # merged away into another peer (its messages moved there) or deleted
                actions += complete(eng, peer, 0, now)
                continue
            if phase(peer) is not Phase.QUEUED:
                if not peer.state & DISCOVERING:
                    continue
                _to_working(eng, peer)
                continue
            rc, acts = step(eng, peer, classify(eng, peer), now)
            actions += acts
            if rc == REDISCOVER_PEER:
                if peer not in dc.request:
                    dc.request.append(peer)
            elif rc or not peer.state & DISCOVERING:
                actions += complete(eng, peer, rc, now)
    finally:
        dc.running = False
    return actions


def complete(eng: LNetEngine, peer: Peer, rc: int, now: float) -> list[Action]:
    """``lnet_peer_discovery_complete``: pending messages failed with the error or sent again
    from scratch; blocking waiters woken; the router told (spec §5.2 end, §6.4)."""
    from nodes.lnet import send

    dc = _dc(eng)
    for q in (dc.request, dc.working):
        if peer in q:
            q.remove(peer)
    peer.state &= ~(DISCOVERING | PING_SENT | PUSH_SENT)
    if rc:
        peer.dc_error = rc
        peer.state |= REDISCOVER
    if peer.state & RTR_DISCOVERY:
        peer.state &= ~RTR_DISCOVERY
        peer.state |= RTR_DISCOVERED
    actions: list[Action] = []
    pending, peer.dc_pendq = peer.dc_pendq, []
    waiters, peer.dc_waiters = peer.dc_waiters, []
    router = getattr(eng, "router", None)
    if peer.rtr_refcount > 0 and hasattr(router, "discovery_complete"):
        actions += router.discovery_complete(peer, rc, now) or []  # type: ignore[union-attr]
    for msg in pending:
        if rc:
            hs = HStatus.REMOTE_ERROR if rc == -EHOSTUNREACH else HStatus.LOCAL_ERROR
            actions += send.fail_unsent(eng, msg, now, rc, hs)
        else:
            actions += send.send(eng, msg, now)
    for handle in waiters:
        md = eng.md_by_handle(handle)
        if md is not None:
            actions += eng.md_final(md, "DISCOVERY", rc)
    return actions


# ---------------------------------------------------------------------------- effects
def _noop(eng: LNetEngine, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    return 0, []


def _eff_queue(eng: LNetEngine, peer: Peer, now: float,
               **kw: object) -> tuple[int, list[Action]]:
    _queue(eng, peer)
    return 0, []


def _stale(eng: LNetEngine, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    return 0, [Log(level="info", text=f"discovery of {peer.primary_nid}: stale event ignored")]


def _send_ping(eng: LNetEngine, peer: Peer, now: float,
               **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_send_ping``: GET of max(lp_data_bytes, 272) to the primary NID (§5.2 r5),
    or to the peer's NID on ``lp_disc_net_id`` for router discovery."""
    peer.state &= ~FORCE_PING
    peer.state |= PING_SENT
    _to_working(eng, peer)
    dst = peer.primary_nid
    if peer.disc_net is not None:
        dst = next((p.nid for p in peer.lpnis if p.nid.net == peer.disc_net), dst)
    length = max(peer.data_bytes, LNET_PING_INFO_MIN_SIZE)
    handle, acts = eng.get(now, dst, length=length, portal=LNET_RESERVED_PORTAL,
                           match_bits=LNET_PROTO_PING_MATCHBITS,
                           owner=(OWNER_PING, peer.primary_nid))
    if peer.state & PING_SENT:
        peer.ping_mdh = handle
    return 0, acts


def _send_push(eng: LNetEngine, peer: Peer, now: float,
               **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_send_push``: PUT with ACK of our ping buffer to ``lp_disc_dst_nid`` (the
    NID that answered the ping) or the primary, from ``lp_disc_src_nid`` (§5.2 r6, dyn-035)."""
    peer.state &= ~FORCE_PUSH
    peer.state |= PUSH_SENT
    _to_working(eng, peer)
    peer.push_seq = eng.ping_seq
    dst = peer.disc_dst_nid or peer.primary_nid
    src = peer.disc_src_nid if peer.disc_src_nid and eng.ni_by_nid(peer.disc_src_nid) else None
    handle, acts = eng.put(now, dst, payload=eng.ping_info().pack(),
                           portal=LNET_RESERVED_PORTAL, match_bits=LNET_PROTO_PING_MATCHBITS,
                           ack=True, src=src, owner=(OWNER_PUSH, peer.primary_nid))
    if peer.state & PUSH_SENT:
        peer.push_mdh = handle
    return 0, acts


def _ping_failed_evt(eng: LNetEngine, peer: Peer, now: float, *, status: int = -ETIMEDOUT,
                     **kw: object) -> tuple[int, list[Action]]:
    peer.state &= ~PING_SENT
    peer.state |= PING_FAILED
    peer.ping_error = status or -ETIMEDOUT
    peer.ping_mdh = 0
    _queue(eng, peer)
    return 0, [Log(level="info", text=f"discovery ping to {peer.primary_nid} failed: {status}")]


def _push_failed_evt(eng: LNetEngine, peer: Peer, now: float, *, status: int = -ETIMEDOUT,
                     **kw: object) -> tuple[int, list[Action]]:
    peer.state &= ~PUSH_SENT
    peer.state |= PUSH_FAILED
    peer.push_error = status or -ETIMEDOUT
    peer.push_mdh = 0
    _queue(eng, peer)
    return 0, [Log(level="info", text=f"discovery push to {peer.primary_nid} failed: {status}")]


def _push_acked(eng: LNetEngine, peer: Peer, now: float,
                **kw: object) -> tuple[int, list[Action]]:
    """ACK of our push: the peer now holds our buffer of that sequence (``lp_node_seqno``)."""
    peer.state &= ~PUSH_SENT
    peer.node_seqno = peer.push_seq
    peer.push_mdh = 0
    _queue(eng, peer)
    return 0, []


def _ping_failed_rule(eng: LNetEngine, peer: Peer, now: float,
                      **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_ping_failed``: retry by FORCE_PING; error 0 (truncation) retries now."""
    peer.state &= ~PING_FAILED
    peer.state |= FORCE_PING
    rc, peer.ping_error = peer.ping_error, 0
    return (rc or REDISCOVER_PEER), []


def _push_failed_rule(eng: LNetEngine, peer: Peer, now: float,
                      **kw: object) -> tuple[int, list[Action]]:
    peer.state &= ~PUSH_FAILED
    rc, peer.push_error = peer.push_error, 0
    return (rc or REDISCOVER_PEER), []


def _discovered(eng: LNetEngine, peer: Peer, now: float,
                **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_discovered``: rule 7 (spec §5.2)."""
    peer.state |= DISCOVERED
    peer.state &= ~(DISCOVERING | REDISCOVER)
    peer.dc_error = 0
    return 0, [Log(level="info", text=f"peer {peer.primary_nid} discovered "
                                      f"(state {peer.state:#x})")]


def _delete(eng: LNetEngine, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_deletion``: the peer goes; traffic recreates it non-MR (spec §5.4)."""
    if not peer.state & MARK_DELETED and peer in eng.peers.peers:
        eng.peers.delete_peer(peer)
        eng.lpni_recoveryq[:] = [p for p in eng.lpni_recoveryq
                                 if eng.peers.find_lpni(p.nid) is p]
    peer.state |= MARK_DELETED
    peer.state &= ~(DISCOVERING | FORCE_PING | FORCE_PUSH | MARK_DELETION)
    return 0, [Log(level="info", text=f"peer {peer.primary_nid} deleted by discovery")]


def _features(eng: LNetEngine, peer: Peer, info: PingInfo, *, push: bool) -> None:
    """Feature bits of a reply or push (spec §5.4 first two bullets)."""
    s = peer.state
    if not info.features & LNET_PING_FEAT_DISCOVERY or not eng.tunables.discovery:
        gone = (s & DISCOVERED and not s & DISCOVERING) if push else \
            bool(s & DISCOVERED or s & MULTI_RAIL)
        if not s & CONFIGURED and not s & NO_DISCOVERY and gone:
            peer.state |= MARK_DELETION
        peer.state |= NO_DISCOVERY
    else:
        peer.state &= ~NO_DISCOVERY
    if info.features & LNET_PING_FEAT_MULTI_RAIL:
        if not (s & CONFIGURED and not s & MULTI_RAIL) and eng.tunables.discovery \
                and not peer.state & NO_DISCOVERY:
            peer.state |= MULTI_RAIL
    elif peer.state & MULTI_RAIL and not s & CONFIGURED:
        peer.state &= ~MULTI_RAIL


def _parse(payload: bytes) -> PingInfo | int:
    """The reply's buffer, or the size to ask for next time when it was truncated."""
    try:
        return PingInfo.unpack(payload)
    except WireProtocolError:
        need = ping_info_size(payload)
        return need if need > len(payload) else -EPROTO


def _ping_reply(eng: LNetEngine, peer: Peer, now: float, *, payload: bytes = b"",
                source: NID | None = None, md: MD | None = None,
                **kw: object) -> tuple[int, list[Action]]:
    """``lnet_discovery_event_reply`` (spec §5.2 events, §5.4)."""
    peer.state &= ~PING_SENT
    peer.ping_mdh = 0
    parsed = _parse(payload)
    if isinstance(parsed, int):
        if parsed > 0:  # truncated: retry at once with a bigger buffer (error 0)
            peer.data_bytes = parsed
            peer.state |= PING_FAILED
            peer.ping_error = 0
        else:
            peer.state |= PING_FAILED
            peer.ping_error = parsed
        _queue(eng, peer)
        return 0, [Log(level="warning", text=f"bad ping reply from {source}: {parsed}")]
    info = parsed
    msg = md.msg if md is not None else None
    if msg is not None and msg.txni is not None:
        peer.disc_src_nid = msg.txni.nid
    peer.disc_dst_nid = source
    _features(eng, peer, info, push=False)
    peer.data_bytes = max(peer.data_bytes, ping_info_size(payload))
    if info.features & LNET_PING_FEAT_MULTI_RAIL and info.nis \
            and info.nis[0][0] == peer.primary_nid:
        peer.peer_seqno = info.seq
    peer.data = info
    peer.state |= DATA_PRESENT
    _queue(eng, peer)
    return 0, []


def _push_data(eng: LNetEngine, peer: Peer, now: float, *, info: PingInfo | None = None,
               **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_push_event`` after the checks of ``on_push``: features first (a peer that
    turned discovery off is marked NO_DISCOVERY, maybe for deletion), then stale data is
    dropped, new data stored and the peer queued (spec §5.4)."""
    assert info is not None
    _features(eng, peer, info, push=True)
    marked = bool(peer.state & MARK_DELETION)
    if info.nis and peer.primary_nid == info.nis[0][0] and info.seq < peer.peer_seqno:
        return 0, [Log(level="info", text=f"stale push from {peer.primary_nid}")]
    if info.seq > peer.peer_seqno:
        peer.peer_seqno = info.seq
        peer.state &= ~NIDS_UPTODATE
    elif peer.state & NIDS_UPTODATE and not marked:
        return 0, []
    peer.data = info
    peer.state |= DATA_PRESENT
    if phase(peer) in (Phase.IDLE, Phase.QUEUED):
        _queue(eng, peer)
    _dc(eng).wake = 0.0
    return 0, []


def _data_present(eng: LNetEngine, peer: Peer, now: float,
                  **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_data_present`` (spec §5.4): primary NID, consolidation, merge."""
    info, peer.data = peer.data, None
    peer.state &= ~DATA_PRESENT
    peer.state |= NIDS_UPTODATE
    if peer not in eng.peers.peers or info is None or not info.nis:
        return REDISCOVER_PEER, []
    prim = info.nis[0][0]
    nids = [n for n, _ in info.nis]
    actions: list[Action] = []
    if peer.primary_nid == prim or (peer.primary_nid in nids
                                    and discovery_disabled(eng, peer)):
        actions += merge_data(eng, peer, info)
    else:
        owner = eng.peers.find_peer(prim)
        if owner is None or owner is peer:
            if not peer.state & LOCK_PRIMARY:
                set_primary(eng, peer, prim)
            actions += merge_data(eng, peer, info)
        else:
            # the data belongs to another peer: hand it over (lnet_peer_set_primary_data)
            if not peer.state & NO_DISCOVERY:
                owner.state &= ~NO_DISCOVERY
            if peer.state & MULTI_RAIL:
                owner.state |= MULTI_RAIL
            if peer.disc_src_nid is not None:
                owner.disc_src_nid, owner.disc_dst_nid = peer.disc_src_nid, peer.disc_dst_nid
            _queue(eng, owner)
            if owner.state & MULTI_RAIL:
                owner.peer_seqno = max(owner.peer_seqno, info.seq)
            owner.state &= ~(PING_FAILED | FORCE_PING | DATA_PRESENT)
            owner.state |= NIDS_UPTODATE
            actions += merge_data(eng, owner, info)
            actions.append(Log(level="info", text=f"discovery: {peer.primary_nid} is "
                                                  f"{owner.primary_nid}, consolidated"))
    return REDISCOVER_PEER, actions


def set_primary(eng: LNetEngine, peer: Peer, nid: NID) -> None:
    """``lnet_peer_set_primary_nid``: the peer's primary becomes ``nid`` (spec §1.3)."""
    peer.primary_nid = nid


def merge_data(eng: LNetEngine, peer: Peer, info: PingInfo) -> list[Action]:
    """``lnet_peer_merge_data`` (spec §5.4): statuses, NIDs added/removed, primary first."""
    actions: list[Action] = []
    if info.features & LNET_PING_FEAT_RTE_DISABLED:
        peer.state &= ~ROUTER_ENABLED
    else:
        peer.state |= ROUTER_ENABLED
    status = dict(info.nis)
    for lpni in peer.lpnis:
        if lpni.nid in status:
            lpni.ns_status = status[lpni.nid]
    if not discovery_disabled(eng, peer):
        actions += _add_nids(eng, peer, info)
        for lpni in list(peer.lpnis):
            if lpni.nid in status or lpni.nid.is_lo:
                continue
            if peer.state & CONFIGURED:  # DLC wins: -EPERM, the NID is marked down
                lpni.ns_status = LNET_NI_STATUS_DOWN
                actions.append(Log(level="info", text=f"cannot delete configured NID "
                                                      f"{lpni.nid} of {peer.primary_nid} "
                                                      f"({-EPERM}): marked down"))
                continue
            if lpni.nid == peer.primary_nid and len(peer.lpnis) > 1 \
                    and peer.rtr_refcount == 0:
                continue  # lnet_peer_del_nid refuses (-EBUSY)
            eng.peers._del_lpni(lpni)
        _primary_first(peer, info.nis[0][0])
    router = getattr(eng, "router", None)
    if peer.rtr_refcount > 0 and hasattr(router, "discovery_ping_reply"):
        actions += router.discovery_ping_reply(peer, info) or []  # type: ignore[union-attr]
    return actions


def _add_nids(eng: LNetEngine, peer: Peer, info: PingInfo) -> list[Action]:
    actions: list[Action] = []
    for nid, st in info.nis:
        if nid.is_lo:
            continue
        lpni = eng.peers.find_lpni(nid)
        if lpni is not None and lpni.peer is peer:
            continue
        if lpni is not None:
            other = lpni.peer
            if other.state & CONFIGURED:
                # dyn-060: discovered NIDs inconsistent with configuration are flagged
                peer.state |= BAD_CONFIG
                if nid not in peer.clash_nids:
                    peer.clash_nids.append(nid)
                actions.append(Log(level="error", text=(
                    f"discovered NID {nid} of peer {peer.primary_nid} is configured as a "
                    f"NID of peer {other.primary_nid}: not moved (dyn-060)")))
                continue
            was_primary = other.primary_nid == nid
            eng.peers._del_lpni(lpni)
            if was_primary or not other.nets:
                peer.dc_pendq += other.dc_pendq
                other.dc_pendq = []
                peer.rtr_refcount += other.rtr_refcount
                peer.dc_waiters += other.dc_waiters
                other.dc_waiters = []
                if other in eng.peers.peers:
                    eng.peers.delete_peer(other)
                for q in (_dc(eng).request, _dc(eng).working):
                    if other in q:
                        q.remove(other)
        lnet = eng.nets.get(nid.net)
        new = eng.peers._add_nid(peer, nid, lnet.tunables.peer_credits if lnet else 0)
        new.ns_status = st
    return actions


def _primary_first(peer: Peer, prim: NID) -> None:
    pnet = peer.peer_net(prim.net)
    if pnet is None:
        return
    peer.nets.remove(pnet)
    peer.nets.insert(0, pnet)
    lpni = next((p for p in pnet.lpnis if p.nid == prim), None)
    if lpni is not None:
        pnet.lpnis.remove(lpni)
        pnet.lpnis.insert(0, lpni)


_EFFECTS = {
    "noop": _noop,
    "queue": _eff_queue,
    "stale_event": _stale,
    "send_ping": _send_ping,
    "send_push": _send_push,
    "ping_failed": _ping_failed_evt,
    "push_failed": _push_failed_evt,
    "push_acked": _push_acked,
    "ping_reply": _ping_reply,
    "push_data": _push_data,
    "ping_failed_rule": _ping_failed_rule,
    "push_failed_rule": _push_failed_rule,
    "data_present": _data_present,
    "discovered": _discovered,
    "delete": _delete,
}


# ---------------------------------------------------------------------------- entry points
def start(eng: LNetEngine, peer: Peer, now: float, *, force_ping: bool = False,
          force_push: bool = False, rtr_net: Net | None = None) -> list[Action]:
    """Queue ``peer`` for discovery and run the queue (router discovery: see module doc)."""
    if force_ping:
        peer.state |= FORCE_PING
    if force_push:
        peer.state |= FORCE_PUSH
    if rtr_net is not None:
        peer.disc_net = rtr_net
        peer.state |= RTR_DISCOVERY
    peer.dc_error = 0
    _, actions = step(eng, peer, Input.DISCOVER, now)
    return actions + run_queue(eng, now)


def eligible(msg: Msg) -> bool:
    """``lnet_msg_discovery``: not a response, not a GET/PUT on the reserved portal."""
    if msg.is_response or msg.recovery:
        return False
    return not (msg.hdr.ptl_index == LNET_RESERVED_PORTAL
                and msg.type in (MsgType.GET, MsgType.PUT))


def gate(eng: LNetEngine, msg: Msg, now: float) -> list[Action] | None:
    """``lnet_initiate_peer_discovery`` (spec §2.2 step 5): None lets the send go on;
    otherwise the message waits on the peer's ``lp_dc_pendq`` and these are the actions."""
    if not getattr(eng, "dc_enabled", True) or not eligible(msg) \
            or not getattr(eng, "multi_rail", True):
        return None  # a downrev node never initiates discovery (dyn-055, bck-025)
    assert msg.final_dst is not None
    lpni = eng.peers.find_lpni(msg.final_dst)
    if lpni is None:
        lnet = eng.nets.get(msg.final_dst.net)
        lpni = eng.peers.traffic_add(msg.final_dst, lnet.tunables.peer_credits if lnet else 0)
    peer = lpni.peer
    if peer.state & RTR_DISCOVERY or is_uptodate(eng, peer):
        return None
    if peer.state & CONFIGURED and not peer.state & DISCOVERING:
        return None  # static peers are used as configured (docs/differences.md)
    actions = start(eng, peer, now)
    lpni = eng.peers.find_lpni(msg.final_dst)
    if lpni is None or is_uptodate(eng, lpni.peer):
        return actions + _send_now(eng, msg, now)
    lpni.peer.dc_pendq.append(msg)
    return actions


def _send_now(eng: LNetEngine, msg: Msg, now: float) -> list[Action]:
    from nodes.lnet import send

    return send.send(eng, msg, now)


def discover(eng: LNetEngine, nid: NID, now: float, *,
             force: bool = False) -> tuple[int, list[Action]]:
    """``lnetctl discover [--force] NID`` (spec §5.3, §9.3): blocking; the returned MD's final
    event (kind ``DISCOVERY``) carries the result. Clears NIDS_UPTODATE (and forces a ping
    and a push with ``force``); with discovery disabled it still runs one round."""
    md = eng._bind_md(now, threshold=1)
    lpni = eng.peers.find_lpni(nid)
    if lpni is None:
        lnet = eng.nets.get(nid.net)
        lpni = eng.peers.traffic_add(nid, lnet.tunables.peer_credits if lnet else 0)
    peer = lpni.peer
    peer.state &= ~NIDS_UPTODATE
    peer.dc_waiters.append(md.handle)
    actions = start(eng, peer, now, force_ping=force, force_push=force)
    return md.handle, actions


def on_md_event(eng: LNetEngine, md: MD, kind: str, status: int,
                **kw: object) -> list[Action]:
    """``lnet_discovery_event_handler``: REPLY/ACK/SEND error/UNLINK of a ping or push MD."""
    assert md.owner is not None
    tag, nid = md.owner
    peer = next((p for p in eng.peers.peers if md.handle in (p.ping_mdh, p.push_mdh)), None)
    if peer is None:
        peer = eng.peers.find_peer(nid)
    if peer is None:
        return []
    is_ping = tag == OWNER_PING
    if kind == "SEND" and status == 0:
        return []  # the request left; wait for the REPLY/ACK
    if kind == "SEND":
        inp = Input.SEND_FAIL
    elif kind == "UNLINK" or status:
        inp = Input.UNLINK
    else:
        inp = Input.REPLY if kind == "REPLY" else Input.ACK
    if (is_ping and not peer.state & PING_SENT) or (not is_ping and not peer.state & PUSH_SENT):
        return _stale(eng, peer, 0.0)[1]
    # events carry no clock: the effects below need none; the queue runs at the next tick,
    # which is due at once (``deadline`` returns 0), so discovery goes on without delay
    _, actions = step(eng, peer, inp, 0.0, status=status, md=md,
                      payload=kw.get("payload", b""), source=kw.get("source"))
    _dc(eng).wake = 0.0
    return actions


def on_push(eng: LNetEngine, src: NID, payload: bytes, now: float) -> tuple[bool, list[Action]]:
    """A PUT on portal 0 with the ping match bits: the push target (``lnet_peer_push_event``).

    Returns (accepted, actions); a non-MR node has no push target: the push is dropped and no
    ACK is sent (dyn-010).
    """
    if not getattr(eng, "multi_rail", True):
        return False, []
    peer = eng.peers.find_peer(src)
    if peer is None:
        return True, [Log(level="info", text=f"push from unknown {src}: ignored")]
    try:
        info = PingInfo.unpack(payload)
    except WireProtocolError as e:
        return True, [Log(level="warning", text=f"bad push from {src}: {e}")]
    if not info.features & LNET_PING_FEAT_MULTI_RAIL:
        return True, [Log(level="info", text=f"push from non-MR peer {src}: dropped")]
    _, actions = step(eng, peer, Input.PUSH_RX, now, info=info)
    return True, actions + run_queue(eng, now)


def local_ni_changed(eng: LNetEngine, *, force: bool = False) -> None:
    """The ping buffer changed (local NI added/removed) or discovery was disabled: push to MR
    peers (``lnet_push_update_to_peers``, dyn-045) at the next tick."""
    if not getattr(eng, "dc_enabled", True):
        return
    dc = _dc(eng)
    dc.push_pending = True
    dc.push_force = dc.push_force or force
    dc.wake = 0.0


def deadline(eng: LNetEngine) -> float | None:
    dc = _dc(eng)
    return dc.wake if dc.push_pending or dc.request else None


def tick(eng: LNetEngine, now: float) -> list[Action]:
    """Deferred work: pushes after a local change, then the request queue."""
    dc = _dc(eng)
    if dc.push_pending and getattr(eng, "multi_rail", True) and eng.configured:
        force = dc.push_force
        for peer in list(eng.peers.peers):
            if not peer.state & DISCOVERED:
                continue  # only peers we exchanged buffers with (docs/differences.md)
            if force and peer.state & MULTI_RAIL:
                peer.state |= FORCE_PUSH
            if needs_push(eng, peer):
                _queue(eng, peer)
    dc.push_pending = dc.push_force = False
    return run_queue(eng, now)


def set_discovery(eng: LNetEngine, old: int, new: int) -> None:
    """``lnetctl set discovery 0|1``: disabling force-pushes our buffer (without the
    DISCOVERY bit) to every MR peer; enabling does not push (spec §5.4 last bullet)."""
    if old and not new:
        local_ni_changed(eng, force=True)


def peer_status_str(status: int) -> str:
    return {LNET_NI_STATUS_UP: "up", LNET_NI_STATUS_DOWN: "down"}.get(status, "NA")

