"""Discovery's data coming in: ping replies and pushes received, and their merge into the
peer table (pings and pushes sent: ``dc_send.py``) (spec §5.2 rules 5-6, §5.4;
peer.c ``lnet_discovery_event_reply``, ``lnet_peer_push_event``, ``lnet_peer_data_present``,
``lnet_peer_merge_data``; seed 000 dyn-040/060, cfg-085).

Theory of operation. A REPLY to a discovery ping or a received push stores the peer's ping
buffer (``peer.data``) and sets DATA_PRESENT after the feature bits are checked
(``features``: DISCOVERY/MULTI_RAIL, maybe MARK_DELETION); the thread's rule 2 then runs
``data_present``: find the primary NID in the data, hand the data to another peer if that
one owns it, otherwise merge. ``merge_data`` updates statuses and, unless discovery is
disabled for the peer, adds and deletes NIDs. DLC wins (spec §5.4): a CONFIGURED peer's NIDs
are never deleted (marked DOWN instead), NIDs configured under another peer are never moved
(the discovering peer is flagged BAD_CONFIG, dyn-060), and NIDS_UPTODATE is set in every
case, so a statically configured peer becomes up to date once its data is merged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.addpeer import lock_transfer
from nodes.lnet.dc_state import (
    REDISCOVER_PEER,
    Effect,
    Phase,
    discovery_disabled,
    phase,
    queue,
)
from nodes.lnet.errors import EPERM, EPROTO, WireProtocolError
from nodes.lnet.hdr import (
    Payload,
)
from nodes.lnet.lpstate import (
    CONFIGURED,
    DATA_PRESENT,
    DISCOVERED,
    DISCOVERING,
    LOCK_PRIMARY,
    MULTI_RAIL,
    NO_DISCOVERY,
    PeerEvent,
    fire,
)
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP
from nodes.lnet.ping import (
    LNET_PING_FEAT_DISCOVERY,
    LNET_PING_FEAT_MULTI_RAIL,
    LNET_PING_FEAT_RTE_DISABLED,
    PingInfo,
    ping_info_size,
)
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.discovery import Discovery
    from nodes.lnet.msg import MD
    from nodes.lnet.nid import NID
    from nodes.lnet.peer import Peer, PeerNI


def features(dc: Discovery, peer: Peer, info: PingInfo, *, push: bool) -> None:
    """Feature bits of a reply or push (spec §5.4 first two bullets)."""
    s = peer.state
    if not info.features & LNET_PING_FEAT_DISCOVERY or not dc.tunables.discovery:
        gone = (s & DISCOVERED and not s & DISCOVERING) if push else \
            bool(s & DISCOVERED or s & MULTI_RAIL)
        if not s & CONFIGURED and not s & NO_DISCOVERY and gone:
            fire(peer, PeerEvent.MARK_DELETION)
        fire(peer, PeerEvent.DISCOVERY_OFF)
    else:
        fire(peer, PeerEvent.DISCOVERY_ON)
    if info.features & LNET_PING_FEAT_MULTI_RAIL:
        if not (s & CONFIGURED and not s & MULTI_RAIL) and dc.tunables.discovery \
                and not peer.state & NO_DISCOVERY:
            if not s & MULTI_RAIL:
                peer.clr_non_mr_pref_nids()
            fire(peer, PeerEvent.MULTI_RAIL_ON)
    elif peer.state & MULTI_RAIL and not s & CONFIGURED:
        fire(peer, PeerEvent.MULTI_RAIL_OFF)


def _parse(payload: Payload) -> PingInfo | int:
    """The reply's buffer, or the size to ask for next time when it was truncated."""
    try:
        return PingInfo.unpack(payload)
    except WireProtocolError:
        need = ping_info_size(payload)
        return need if need > len(payload) else -EPROTO


def _ping_reply(dc: Discovery, peer: Peer, now: float, *, payload: Payload = b"",
                source: NID | None = None, md: MD | None = None,
                **kw: object) -> tuple[int, list[Action]]:
    """``lnet_discovery_event_reply`` (spec §5.2 events, §5.4)."""
    fire(peer, PeerEvent.PING_REPLIED)
    peer.ping_mdh = 0
    parsed = _parse(payload)
    if isinstance(parsed, int):
        if parsed > 0:  # truncated: retry at once with a bigger buffer (error 0)
            peer.data_bytes = parsed
            fire(peer, PeerEvent.PING_BAD_REPLY)
            peer.ping_error = 0
        else:
            fire(peer, PeerEvent.PING_BAD_REPLY)
            peer.ping_error = parsed
        queue(dc, peer)
        return 0, [Log(level="warning", text=f"bad ping reply from {source}: {parsed}")]
    info = parsed
    msg = md.msg if md is not None else None
    if msg is not None and msg.txni is not None:
        peer.disc_src_nid = msg.txni.nid
    peer.disc_dst_nid = source
    features(dc, peer, info, push=False)
    peer.data_bytes = max(peer.data_bytes, ping_info_size(payload))
    if info.features & LNET_PING_FEAT_MULTI_RAIL and info.nis \
            and info.nis[0][0] == peer.primary_nid:
        peer.peer_seqno = info.seq
    peer.data = info
    fire(peer, PeerEvent.DATA_STORED)
    queue(dc, peer)
    return 0, []


def _push_data(dc: Discovery, peer: Peer, now: float, *, info: PingInfo | None = None,
               **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_push_event`` after the checks of ``on_push``: features first (a peer that
    turned discovery off is marked NO_DISCOVERY, maybe for deletion), then, whatever its
    sequence number, the push is new data ("always assume new data": a peer's NI status
    changes in place in its buffer, without a new sequence number, and reaches us by a
    gateway check's forced push, sanity-lnet 236): the peer's seqno is the pushed one, its
    NIDs are no longer up to date, and the data is stored unless unprocessed data is already
    there, which only a newer push replaces (spec §5.4). The peer is queued unless up to date.
    """
    assert info is not None
    features(dc, peer, info, push=True)
    peer.peer_seqno = info.seq
    fire(peer, PeerEvent.NIDS_STALE)
    if not peer.state & DATA_PRESENT:
        peer.data = info
        fire(peer, PeerEvent.DATA_STORED)
    elif isinstance(peer.data, PingInfo) and info.seq > peer.data.seq:
        peer.data = info
    if phase(peer) in (Phase.IDLE, Phase.QUEUED):
        queue(dc, peer)
    dc.queues.wake = 0.0
    return 0, []


def _data_present(dc: Discovery, peer: Peer, now: float,
                  **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_data_present`` (spec §5.4): primary NID, consolidation, merge."""
    info = peer.data if isinstance(peer.data, PingInfo) else None
    peer.data = None
    fire(peer, PeerEvent.DATA_MERGED)
    if peer not in dc.peers.peers or info is None or not info.nis:
        return REDISCOVER_PEER, []
    prim = info.nis[0][0]
    nids = [n for n, _ in info.nis]
    actions: list[Action] = []
    if peer.merge_primary_nid is not None:  # LNetAddPeer's forced merge (addpeer.py)
        merge, peer.merge_primary_nid = peer.merge_primary_nid, None
        actions += set_primary(dc, peer, merge)
    if peer.primary_nid == prim or (peer.primary_nid in nids
                                    and discovery_disabled(dc, peer)):
        actions += merge_data(dc, peer, info, now)
    else:
        owner = dc.peers.find_peer(prim)
        if owner is None or owner is peer:
            actions += set_primary(dc, peer, prim)
            actions += merge_data(dc, peer, info, now)
        else:
            # the data belongs to another peer: hand it over (lnet_peer_set_primary_data)
            if not peer.state & NO_DISCOVERY:
                fire(owner, PeerEvent.DISCOVERY_ON)
            if peer.state & MULTI_RAIL:
                fire(owner, PeerEvent.MULTI_RAIL_ON)
            if peer.disc_src_nid is not None:
                owner.disc_src_nid, owner.disc_dst_nid = peer.disc_src_nid, peer.disc_dst_nid
            queue(dc, owner)
            if owner.state & MULTI_RAIL:
                owner.peer_seqno = max(owner.peer_seqno, info.seq)
            fire(owner, PeerEvent.PRIMARY_DATA)
            actions += merge_data(dc, owner, info, now)
            actions.append(Log(level="info", text=f"discovery: {peer.primary_nid} is "
                                                  f"{owner.primary_nid}, consolidated"))
    return REDISCOVER_PEER, actions


def set_primary(dc: Discovery, peer: Peer, nid: NID) -> list[Action]:
    """``lnet_peer_set_primary_nid`` (spec §1.3): unless the peer's primary is locked it
    becomes ``nid``, which is added to the peer (``lnet_peer_add_nid``); the old primary
    comes back when ``nid`` cannot move (configured under another peer)."""
    old = peer.primary_nid
    if old == nid:
        return []
    if not peer.state & LOCK_PRIMARY:
        peer.primary_nid = nid
    moved, actions = _take_nid(dc, peer, nid)
    if not moved:
        peer.primary_nid = old
    return actions


def lpni_status(dc: Discovery, lpni: PeerNI, status: int, now: float) -> list[Action]:
    """peer.c ``handle_disc_lpni_health``: the NI status the peer's buffer reports. A move
    from UP to DOWN is a remote failure (health one step down, recovery queue); an NI reported
    UP that was never heard from starts at full health."""
    old, lpni.ns_status = lpni.ns_status, status
    if old != status:
        if status == LNET_NI_STATUS_DOWN:
            return dc.recovery.health.remote_failure(lpni, now, "NI_STATUS_DOWN")
    elif status == LNET_NI_STATUS_UP and not lpni.last_alive:
        dc.recovery.health.set_lpni(lpni, LNET_MAX_HEALTH_VALUE, "ok")
    return []


def merge_data(dc: Discovery, peer: Peer, info: PingInfo, now: float) -> list[Action]:
    """``lnet_peer_merge_data`` (spec §5.4): statuses, NIDs added/removed, primary first."""
    actions: list[Action] = []
    if info.features & LNET_PING_FEAT_RTE_DISABLED:
        fire(peer, PeerEvent.ROUTER_OFF)
    else:
        fire(peer, PeerEvent.ROUTER_ON)
    status = dict(info.nis)
    for lpni in peer.lpnis:
        if lpni.nid in status:
            actions += lpni_status(dc, lpni, status[lpni.nid], now)
    if not discovery_disabled(dc, peer):
        actions += _add_nids(dc, peer, info, now)
        for lpni in list(peer.lpnis):
            if lpni.nid in status or lpni.nid.is_lo:
                continue
            if peer.state & CONFIGURED:  # DLC wins: -EPERM, the NID is marked down
                actions += lpni_status(dc, lpni, LNET_NI_STATUS_DOWN, now)
                actions.append(Log(level="info", text=f"cannot delete configured NID "
                                                      f"{lpni.nid} of {peer.primary_nid} "
                                                      f"({-EPERM}): marked down"))
                continue
            if lpni.nid == peer.primary_nid and peer.state & LOCK_PRIMARY:
                # a locked primary is never deleted: -EPERM, marked down (lnet_peer_del_nid)
                actions += lpni_status(dc, lpni, LNET_NI_STATUS_DOWN, now)
                continue
            if lpni.nid == peer.primary_nid and len(peer.lpnis) > 1 \
                    and peer.rtr_refcount == 0:
                continue  # lnet_peer_del_nid refuses (-EBUSY)
            dc.peers.del_lpni(lpni)
        _primary_first(peer, info.nis[0][0])
    if peer.rtr_refcount > 0:  # router.c lnet_router_discovery_ping_reply
        actions += dc.router.checker.discovery_ping_reply(peer, info)
    return actions


def _add_nids(dc: Discovery, peer: Peer, info: PingInfo, now: float) -> list[Action]:
    actions: list[Action] = []
    for nid, st in info.nis:
        lpni = dc.peers.find_lpni(nid)
        if nid.is_lo or (lpni is not None and lpni.peer is peer):
            continue
        moved, acts = _take_nid(dc, peer, nid)
        actions += acts
        new = dc.peers.find_lpni(nid)
        if moved and new is not None:
            actions += lpni_status(dc, new, st, now)
    return actions


def _take_nid(dc: Discovery, peer: Peer, nid: NID) -> tuple[bool, list[Action]]:
    """``lnet_peer_add_nid`` for discovery: ``nid`` joins ``peer``, leaving the unconfigured
    peer that had it (deleted with it when it was that peer's primary, its queued messages,
    waiters and routes moving over; a locked primary's lock too, ``addpeer.lock_transfer``).
    A NID configured under another peer does not move (dyn-060: BAD_CONFIG)."""
    lpni = dc.peers.find_lpni(nid)
    if lpni is not None and lpni.peer is peer:
        return True, []
    if lpni is not None:
        other = lpni.peer
        if other.state & CONFIGURED:
            # dyn-060: discovered NIDs inconsistent with configuration are flagged
            fire(peer, PeerEvent.BAD_CONFIG)
            if nid not in peer.clash_nids:
                peer.clash_nids.append(nid)
            return False, [Log(level="error", text=(
                f"discovered NID {nid} of peer {peer.primary_nid} is configured as a "
                f"NID of peer {other.primary_nid}: not moved (dyn-060)"))]
        was_primary = other.primary_nid == nid
        if was_primary:
            refused = lock_transfer(dc, peer, other, nid)
            if refused is not None:
                return False, refused
        dc.peers.del_lpni(lpni)
        if was_primary or not other.nets:
            peer.dc_pendq += other.dc_pendq
            other.dc_pendq = []
            peer.rtr_refcount += other.rtr_refcount
            peer.dc_waiters += other.dc_waiters
            other.dc_waiters = []
            if other in dc.peers.peers:
                dc.peers.delete_peer(other)
            for q in (dc.queues.request, dc.queues.working):
                if other in q:
                    q.remove(other)
    dc.peers.add_nid(peer, nid, dc.nets.peer_credits(nid.net))
    return True, []


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


MERGE_EFFECTS: dict[str, Effect] = {
    "ping_reply": _ping_reply,
    "push_data": _push_data,
    "data_present": _data_present,
}
