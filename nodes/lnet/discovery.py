"""Peer discovery: the queue, the triggers and the send gate (spec §5.2-5.3; peer.c,
lib-move.c ``lnet_initiate_peer_discovery``; seed 000 dyn-005..065, cfg-085, bck-025/030).

Theory of operation. A peer is discovered by a *ping* (a GET of ``max(lp_data_bytes, 272)``
bytes on portal 0 with the ping match bits, to its primary NID) whose REPLY carries the
peer's ping buffer (``ping.py``, spec §5.1), and told about us by a *push* (a PUT with ACK of
our own ping buffer on the same portal/match bits, dyn-005/015). The per-peer state machine
(``lp_state`` bits, transition table, queues) is ``dc_state.py``; the processing of replies
and pushes and the merge into the peer table is ``dc_merge.py``; this module applies the
table (``step``), runs the discovery thread's loop (``run_queue``), sends pings and pushes,
completes discovery (``complete``) and holds the entry points.

Discovery is on by default, as in real LNet (``lnet_peer_discovery_disabled=0``); ``lnetctl
set discovery 0`` (module parameter ``lnet_peer_discovery_disabled=1``) turns it off the
real way. The real discovery thread is woken by every event; here the request queue is
processed at once on every trigger (``run_queue``) and, for work that comes without a clock
(MD events, local NI added/removed, ``set discovery``), at the next engine tick, which is due
at once (``deadline``/``tick``).

Triggers (spec §5.3):

* the send gate (``gate``, spec §2.2 step 5): a discovery-eligible message (not a response,
  not a GET/PUT on the reserved portal) to a peer that is not up to date waits on the peer's
  ``lp_dc_pendq`` while the peer is discovered. This holds for statically configured peers
  too: a CONFIGURED peer is not NIDS_UPTODATE until its data has been merged (DLC wins,
  spec §5.4). With discovery disabled the first message still waits for one ping round
  (``lnet_discover_peer_locked`` runs one round, spec §11.8); the peer then stays non-MR;
* ``lnetctl discover [--force]`` (``discover``: blocking, through an MD whose final event is
  the completion);
* a local NI added or removed (``local_ni_changed``: the MR peers whose ``lp_node_seqno`` is
  behind our ping buffer are queued for a push at once, ``lnet_push_update_to_peers``,
  dyn-045); ``set discovery 0`` force-pushes to every MR peer;
* a received push (``on_push``), and router discovery (``start``, below).

Completion fails the pending messages with the error, or sends them again from scratch.

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

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.dc_merge import MERGE_EFFECTS
from nodes.lnet.dc_state import (  # noqa: F401  (re-exported: the bits and the machine)
    BAD_CONFIG,
    CONFIGURED,
    DATA_PRESENT,
    DISCOVERED,
    DISCOVERING,
    FORCE_PING,
    FORCE_PUSH,
    LOCK_PRIMARY,
    MARK_DELETED,
    MARK_DELETION,
    MULTI_RAIL,
    NIDS_UPTODATE,
    NO_DISCOVERY,
    OWNER_PING,
    OWNER_PUSH,
    PING_FAILED,
    PING_SENT,
    PUSH_FAILED,
    PUSH_SENT,
    REDISCOVER,
    REDISCOVER_PEER,
    ROUTER_ENABLED,
    RTR_DISCOVERED,
    RTR_DISCOVERY,
    STATE_EFFECTS,
    TRANSITIONS,
    DiscoveryQueues,
    Effect,
    Input,
    Phase,
    classify,
    discovery_disabled,
    is_uptodate,
    needs_ping,
    needs_push,
    phase,
    queue,
    queues,
    stale,
    to_working,
)
from nodes.lnet.errors import EHOSTUNREACH, EPROTO, WireProtocolError
from nodes.lnet.hdr import (
    LNET_PING_INFO_MIN_SIZE,
    LNET_PROTO_PING_MATCHBITS,
    LNET_RESERVED_PORTAL,
    MsgType,
)
from nodes.lnet.hstatus import HStatus
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP
from nodes.lnet.ping import LNET_PING_FEAT_MULTI_RAIL, PingInfo

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import MD, Msg
    from nodes.lnet.nid import NID, Net
    from nodes.lnet.peer import Peer

_MAX_STEPS = 32  # guard: one peer is never processed more often than this per run


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


def run_queue(eng: LNetEngine, now: float) -> list[Action]:
    """The discovery thread's loop over the request queue (``lnet_peer_discovery``)."""
    dc = queues(eng)
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
                to_working(eng, peer)
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

    dc = queues(eng)
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


def _send_ping(eng: LNetEngine, peer: Peer, now: float,
               **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_send_ping``: GET of max(lp_data_bytes, 272) to the primary NID (§5.2 r5),
    or to the peer's NID on ``lp_disc_net_id`` for router discovery."""
    peer.state &= ~FORCE_PING
    peer.state |= PING_SENT
    to_working(eng, peer)
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
    to_working(eng, peer)
    peer.push_seq = eng.ping_seq
    dst = peer.disc_dst_nid or peer.primary_nid
    src = peer.disc_src_nid if peer.disc_src_nid and eng.ni_by_nid(peer.disc_src_nid) else None
    handle, acts = eng.put(now, dst, payload=eng.ping_info().pack(),
                           portal=LNET_RESERVED_PORTAL, match_bits=LNET_PROTO_PING_MATCHBITS,
                           ack=True, src=src, owner=(OWNER_PUSH, peer.primary_nid))
    if peer.state & PUSH_SENT:
        peer.push_mdh = handle
    return 0, acts


_EFFECTS: dict[str, Effect] = {
    **STATE_EFFECTS,
    **MERGE_EFFECTS,
    "send_ping": _send_ping,
    "send_push": _send_push,
}


# ---------------------------------------------------------------------------- entry points
def start(eng: LNetEngine, peer: Peer, now: float, *, force_ping: bool = False,
          force_push: bool = False, rtr_net: Net | None = None,
          run: bool = True) -> list[Action]:
    """Queue ``peer`` for discovery and (with ``run``) run the queue (router discovery: see
    module doc)."""
    if force_ping:
        peer.state |= FORCE_PING
    if force_push:
        peer.state |= FORCE_PUSH
    if rtr_net is not None:
        peer.disc_net = rtr_net
        peer.state |= RTR_DISCOVERY
    peer.dc_error = 0
    _, actions = step(eng, peer, Input.DISCOVER, now)
    return actions + run_queue(eng, now) if run else actions


def eligible(msg: Msg) -> bool:
    """``lnet_msg_discovery``: not a response, not a GET/PUT on the reserved portal."""
    if msg.is_response or msg.recovery:
        return False
    return not (msg.hdr.ptl_index == LNET_RESERVED_PORTAL
                and msg.type in (MsgType.GET, MsgType.PUT))


def gate(eng: LNetEngine, msg: Msg, now: float) -> list[Action] | None:
    """``lnet_initiate_peer_discovery`` (spec §2.2 step 5): None lets the send go on;
    otherwise the message waits on the peer's ``lp_dc_pendq`` and these are the actions."""
    if not eligible(msg) or not getattr(eng, "multi_rail", True):
        return None  # a downrev node never initiates discovery (dyn-055, bck-025)
    assert msg.final_dst is not None
    lpni = eng.peers.find_lpni(msg.final_dst)
    if lpni is None:
        lnet = eng.nets.get(msg.final_dst.net)
        lpni = eng.peers.traffic_add(msg.final_dst, lnet.tunables.peer_credits if lnet else 0)
    peer = lpni.peer
    if peer.state & RTR_DISCOVERY or is_uptodate(eng, peer):
        return None
    # lnet_discover_peer_locked(block=false) only queues the peer and wakes the thread; the
    # message is on lp_dc_pendq before the thread runs, so a synchronous failure fails it
    actions = start(eng, peer, now, run=False)
    peer.dc_pendq.append(msg)
    return actions + run_queue(eng, now)


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
        return stale(eng, peer, 0.0)[1]
    # events carry no clock: the effects below need none; the queue runs at the next tick,
    # which is due at once (``deadline`` returns 0), so discovery goes on without delay
    _, actions = step(eng, peer, inp, 0.0, status=status, md=md,
                      payload=kw.get("payload", b""), source=kw.get("source"))
    queues(eng).wake = 0.0
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
    """``lnet_push_update_to_peers(force)``: the ping buffer changed (local NI added or
    removed: seq+1) or discovery was disabled (``force``). Every MR peer that needs our new
    buffer (``needs_push``: its ``lp_node_seqno`` is behind, or FORCE_PUSH) is queued for
    discovery now, whether it was configured or discovered (dyn-045); the queue runs at the
    next tick. A downrev node never pushes (dyn-010)."""
    if not getattr(eng, "multi_rail", True) or not eng.configured:
        return
    for peer in list(eng.peers.peers):
        if force and peer.state & MULTI_RAIL:
            peer.state |= FORCE_PUSH
        if needs_push(eng, peer):
            queue(eng, peer)
    queues(eng).wake = 0.0


def deadline(eng: LNetEngine) -> float | None:
    dc = queues(eng)
    return dc.wake if dc.request else None


def tick(eng: LNetEngine, now: float) -> list[Action]:
    """Deferred work: the request queue (the discovery thread's wake-up)."""
    return run_queue(eng, now)


def set_discovery(eng: LNetEngine, old: int, new: int) -> None:
    """``lnetctl set discovery 0|1``: disabling force-pushes our buffer (without the
    DISCOVERY bit) to every MR peer; enabling does not push (spec §5.4 last bullet)."""
    if old and not new:
        local_ni_changed(eng, force=True)


def peer_status_str(status: int) -> str:
    return {LNET_NI_STATUS_UP: "up", LNET_NI_STATUS_DOWN: "down"}.get(status, "NA")
