"""``LNetAddPeer``: the peers Lustre's configuration creates (peer.c ``LNetAddPeer``,
``lnet_peer_add``, ``lnet_peer_force_merge``; the primary-lock rules of ``lnet_peer_add_nid``).

Theory of operation. Lustre hands LNet the NIDs of one server (a UUID's NID list, obdclass
lustre_peer.c ``class_add_uuid``, which ``lctl add_uuid`` reaches) and ``add_peer`` makes
them one peer: the first usable NID becomes a Multi-Rail peer (with discovery on) whose
primary is locked while the module parameter ``lock_prim_nid`` is 1 (its default); it is
queued for discovery. Each further NID with discovery on is added as a peer of its own and
discovered, unless it is the primary: a NID that already owns an unconfigured, unlocked peer
(one traffic or ``lnetctl discover`` created) is stamped with the primary (``merge_primary_nid``)
and rediscovered with a forced ping, so that discovery's ``data_present`` makes the primary its
primary and the two peers merge (``dc_merge.py``). With discovery off NIDs off the local nets
are skipped and each NID is a peer of its own. ``0@lo`` is always skipped.

``lock_transfer`` is the rule both paths meet when a NID moves from one peer to another:
when the NID is the locked primary of a peer with other NIDs, both peers are flagged
BAD_CONFIG and nothing moves; when the receiving peer is unlocked or was locked later, it
takes the earlier lock and that primary.

The peers are queued for discovery (``Discovery.start`` without running) and the queue runs
once at the end, as the discovery thread runs after ``LNetAddPeer`` drops the API mutex.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.dc_state import (
    is_uptodate,
)
from nodes.lnet.errors import EALREADY, EBUSY, EEXIST, EPERM
from nodes.lnet.lpstate import (
    CONFIGURED,
    LOCK_PRIMARY,
    MARK_DELETED,
    MULTI_RAIL,
    PeerEvent,
    fire,
)

if TYPE_CHECKING:
    from nodes.lnet.discovery import Discovery
    from nodes.lnet.nid import NID
    from nodes.lnet.peer import Peer


def add_peer(dc: Discovery, nids: list[NID], now: float) -> list[Action]:
    """``LNetAddPeer(nids)``: see the module doc. Errors are only logged, as the kernel's
    ``CDEBUG`` lines; nothing is returned to the caller (``class_add_uuid`` returns 0)."""
    if not nids:
        return []
    discovery = bool(dc.tunables.discovery)
    lock = LOCK_PRIMARY if dc.tunables.lock_prim_nid else 0
    pnid: NID | None = None
    actions: list[Action] = []
    for nid in nids:
        if nid.is_lo:
            continue
        if not discovery and nid.net not in dc.nets.nets:
            continue  # "Skip NID on missing network"
        if pnid is None:
            pnid = nid
            rc = _peer_add(dc, nid, lock | (MULTI_RAIL if discovery else 0))
            if rc == -EALREADY:
                pnid = dc.peers.find_peer(nid).primary_nid  # type: ignore[union-attr]
            elif rc and rc != -EEXIST:
                pnid = None
            elif discovery:
                _discover(dc, nid, now)
        elif not discovery:
            rc = _peer_add(dc, nid, lock)
        elif nid != pnid:
            rc = _peer_add(dc, nid, MULTI_RAIL)
            if rc == 0:
                if lock:
                    _force_merge(dc, nid, pnid)
                _discover(dc, nid, now)
            elif rc == -EEXIST and lock and _force_merge(dc, nid, pnid):
                _discover(dc, nid, now)
        else:
            rc = 0
        if rc and rc not in (-EEXIST, -EALREADY):
            actions.append(Log(level="info", text=f"Fail to add peer NID {nid}, rc = {rc}"))
    return actions + dc.run_queue(now)


def _peer_add(dc: Discovery, nid: NID, flags: int) -> int:
    """peer.c ``lnet_peer_add``: a new peer with primary ``nid``, or the errno that keeps the
    existing one (a configured or locked peer; an unlocked one with that primary)."""
    lpni = dc.peers.find_lpni(nid)
    if lpni is not None:
        lp = lpni.peer
        if lp.state & CONFIGURED:
            if lp.primary_nid != nid:
                return -EEXIST
            return -EPERM if (lp.state ^ flags) & MULTI_RAIL else 0
        if lp.state & LOCK_PRIMARY:
            return -EEXIST if lp.primary_nid == nid else -EALREADY
        if not flags & (LOCK_PRIMARY | CONFIGURED) and lp.primary_nid == nid:
            return -EEXIST
        if lp.rtr_refcount > 0:
            return -EBUSY  # lnet_peer_ni_del_locked refuses a gateway's peer NI
        dc.peers.delete_peer(lp)  # lnet_peer_del: recreated below with the new flags
        dc.recovery.forget_deleted_peers()
    peer = dc.peers.traffic_add(nid, dc.nets.peer_credits(nid.net)).peer
    if flags & CONFIGURED:
        fire(peer, PeerEvent.CONFIGURE)
    if flags & MULTI_RAIL:
        fire(peer, PeerEvent.MULTI_RAIL_ON)
    if flags & LOCK_PRIMARY:
        dc.peers.lock_primary(peer)
    return 0


def _force_merge(dc: Discovery, nid: NID, primary: NID) -> bool:
    """``lnet_peer_force_merge``: ``nid``'s unconfigured, unlocked peer is stamped with
    ``primary`` and made to ping again even when it is up to date."""
    peer = dc.peers.find_peer(nid)
    if peer is None or peer.state & (CONFIGURED | LOCK_PRIMARY):
        return False
    peer.merge_primary_nid = primary
    fire(peer, PeerEvent.FORCE_MERGE)
    return True


def _discover(dc: Discovery, nid: NID, now: float) -> None:
    """``lnet_discover_peer_nid`` (non-blocking ``lnet_discover_peer_locked``): the peer is
    queued unless it is up to date or being deleted; the thread runs later."""
    peer = dc.peers.find_peer(nid)
    if peer is None:
        return
    peer.dc_error = 0
    if is_uptodate(dc, peer) or peer.state & MARK_DELETED:
        return
    dc.start(peer, now, run=False)


def lock_transfer(dc: Discovery, peer: Peer, other: Peer, nid: NID) -> list[Action] | None:
    """``lnet_peer_add_nid`` moving ``nid``, the primary NID of ``other``, to ``peer``: None
    when it may move (``peer`` takes ``other``'s earlier primary lock, and ``nid`` as its
    primary, when ``other`` is locked); the error lines when ``other`` is locked with more
    NIDs (both flagged BAD_CONFIG, nothing moves)."""
    if not other.state & LOCK_PRIMARY:
        return None
    if other.nnis > 1:
        fire(other, PeerEvent.BAD_CONFIG)
        fire(peer, PeerEvent.BAD_CONFIG)
        return [Log(level="error", text=f"Peer {peer.primary_nid} NID {nid} is already "
                                        f"locked with peer {other.primary_nid}")]
    if not peer.state & LOCK_PRIMARY or other.prim_lock_ts < peer.prim_lock_ts:
        peer.prim_lock_ts = other.prim_lock_ts
        peer.primary_nid = nid
        fire(peer, PeerEvent.LOCK_PRIMARY)
    return None
