"""Remote side: ``lnet_peer`` -> ``lnet_peer_net`` -> ``lnet_peer_ni`` (spec §1.3).

Theory of operation: peers are found by any of their NIDs. A peer created by traffic is
non-Multi-Rail with that NID as primary; ``lnetctl peer add`` creates a CONFIGURED|MULTI_RAIL
peer (cfg-070/075) whose NIDs may sit on several nets. A NID belongs to at most one peer
(cfg-080, snd-065: a duplicate is refused with -EEXIST). Peer NIs carry the tx credits and FIFO
queue that spec §1.5 takes before the NI's credits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodes.lnet.counters import IfaceStats
from nodes.lnet.cpt import nid_cpt_hash
from nodes.lnet.errors import EBUSY, EEXIST, EINVAL, ENODEV, ENOENT, ENOTUNIQ, LNetConfigError
from nodes.lnet.lpstate import CONFIGURED, LOCK_PRIMARY, MULTI_RAIL, PeerEvent, fire
from nodes.lnet.nid import NID, Net
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.msg import MD, Msg
    from nodes.lnet.ping import PingInfo


@dataclass(slots=True)
class PeerNIHealthStats:
    """Peer NI ``health stats:`` (spec §4.6)."""

    dropped: int = 0
    timeout: int = 0
    error: int = 0
    network_timeout: int = 0


@dataclass(eq=False, slots=True)
class PeerNI:
    """``lnet_peer_ni``: one NID of a peer, with credits, health and statistics."""

    nid: NID
    peer_net: PeerNet
    healthv: int = LNET_MAX_HEALTH_VALUE
    seq: int = 0
    sel_priority: int = 0xFFFF_FFFF
    tx_credits: int = 0
    max_tx_credits: int = 0
    min_tx_credits: int = 0
    rtr_credits: int = 0
    min_rtr_credits: int = 0
    txqnob: int = 0
    txq: deque[Msg] = field(default_factory=deque)
    pref_nids: list[NID] = field(default_factory=list)
    non_mr_pref: bool = False  # LNET_PEER_NI_NON_MR_PREF: pref_nids is traffic's, not UDSP's
    rtr_pref_nids: list[NID] = field(default_factory=list)  # UDSP --dst X --rte Y (spec §7.2)
    stats: IfaceStats = field(default_factory=IfaceStats)
    hstats: PeerNIHealthStats = field(default_factory=PeerNIHealthStats)
    last_alive: float = 0.0
    ping_count: int = 0
    next_ping: float = 0.0
    recovery_state: int = 0  # recovery.RECOVERY_PENDING | RECOVERY_FAILED
    ping_md: MD | None = None
    # lpni_ns_status: UP/DOWN as the gateway's ping reports it or as traffic shows (spec §6.3)
    ns_status: int = 0x15AAC0DE  # LNET_NI_STATUS_UP

    @property
    def peer(self) -> Peer:
        return self.peer_net.peer


@dataclass(eq=False, slots=True)
class PeerNet:
    """``lnet_peer_net``: the peer's NIs on one net; health is the best of them."""

    net: Net
    peer: Peer
    lpnis: list[PeerNI] = field(default_factory=list)
    seq: int = 0
    sel_priority: int = 0xFFFF_FFFF

    @property
    def healthv(self) -> int:
        best: int | None = None  # max(..., default=0) as a loop (asked per routed message)
        for lpni in self.lpnis:
            if best is None or lpni.healthv > best:
                best = lpni.healthv
        return 0 if best is None else best


@dataclass(eq=False, slots=True)
class Peer:
    """``lnet_peer``: a remote node known by one or more NIDs."""

    primary_nid: NID
    state: int = 0
    nets: list[PeerNet] = field(default_factory=list)
    send_seq: int = 0
    rtr_refcount: int = 0  # routes using this peer as gateway (router.py)
    alive: bool = True     # lp_alive: gateway aliveness from router discovery (spec §6.4)
    rtrq: deque[Msg] = field(default_factory=deque)  # lp_rtrq: waiting for router credits
    # discovery (nodes/lnet/discovery.py, spec §5.2): lp_disc_src/dst_nid, lp_disc_net_id,
    # lp_data (a PingInfo), lp_data_bytes, lp_peer_seqno, lp_node_seqno, lp_dc_error,
    # lp_dc_pendq, the ping/push MD handles, blocking waiters and dyn-060 clashes
    disc_src_nid: NID | None = None
    disc_dst_nid: NID | None = None
    disc_net: Net | None = None
    data: PingInfo | None = None
    data_bytes: int = 0
    peer_seqno: int = 0
    node_seqno: int = 0
    push_seq: int = 0
    dc_error: int = 0
    ping_error: int = 0
    push_error: int = 0
    ping_mdh: int = 0
    push_mdh: int = 0
    dc_pendq: list[Msg] = field(default_factory=list)
    dc_waiters: list[int] = field(default_factory=list)
    clash_nids: list[NID] = field(default_factory=list)
    # lp_prim_lock_ts (the earliest locked primary wins a merge, peer.c lnet_peer_add_nid; an
    # order, not a time) and lp_merge_primary_nid (LNetAddPeer's forced merge, addpeer.py)
    prim_lock_ts: int = 0
    merge_primary_nid: NID | None = None
    #: lp_cpt: the peer table it lives in, its first NID's ``lnet_nid_cpt_hash`` over the
    #: node's CPTs at creation (``lnet_peer_alloc``), kept when the primary NID changes
    cpt: int = 0

    @property
    def multi_rail(self) -> bool:
        return bool(self.state & MULTI_RAIL)

    @property
    def lpnis(self) -> list[PeerNI]:
        return [lpni for pnet in self.nets for lpni in pnet.lpnis]

    @property
    def nnis(self) -> int:
        return sum(len(pnet.lpnis) for pnet in self.nets)

    def peer_net(self, net: Net) -> PeerNet | None:
        for p in self.nets:  # (a loop: ``next()`` over a generator built one per call)
            if p.net is net or p.net == net:
                return p
        return None

    def clr_non_mr_pref_nids(self) -> None:
        """``lnet_peer_clr_non_mr_pref_nids``: the peer turned Multi-Rail, so the local NI
        its traffic stuck to while it was not is forgotten (UDSP preferences stay)."""
        for lpni in self.lpnis:
            if lpni.non_mr_pref:
                lpni.pref_nids.clear()
                lpni.non_mr_pref = False


class PeerTable:
    """All peers of a node, looked up by NID; the DLC rules of ``peer add/del`` (spec §1.3)."""

    def __init__(self) -> None:
        self.peers: list[Peer] = []
        self.by_nid: dict[NID, PeerNI] = {}
        #: moves whenever a NID joins or leaves a peer (``by_nid``, a peer's ``nets``): the
        #: router checker's cached deadline depends on both (rtrcheck.py)
        self.version = 0
        self.lock_seq = 0  # ktime_get_ns() for lp_prim_lock_ts: only the order matters
        # UDSP application on creation (spec §7.3), wired by the engine
        self.on_new_lpn: Callable[[PeerNet], None] | None = None
        self.on_new_lpni: Callable[[PeerNI], None] | None = None
        #: LNET_CPT_NUMBER: one peer table per CPT (``ln_peer_tables``), set with the CPT
        #: table (libcfs's module parameters, before any NI, so before any peer)
        self.ncpts = 1

    def walk(self) -> list[Peer]:
        """Every peer as the kernel walks its peer tables (``cfs_percpt_for_each`` over
        ``ln_peer_tables``, each ``pt_peer_list`` in the order its peers were added:
        ``lnet_peer_ni_show_start``'s ``peer show`` list, ``lnet_get_peer_list``,
        ``lnet_push_update_to_peers``): CPT by CPT. ``peers`` itself is that order when the
        node has one CPT."""
        if self.ncpts <= 1:
            return self.peers
        return sorted(self.peers, key=_peer_cpt)

    def _new_peer(self, nid: NID) -> Peer:
        """``lnet_peer_alloc(nid)``: a peer in the table of ``nid``'s CPT, at its tail."""
        peer = Peer(nid, cpt=nid_cpt_hash(nid, self.ncpts))
        self.peers.append(peer)
        return peer

    def find_lpni(self, nid: NID) -> PeerNI | None:
        return self.by_nid.get(nid)

    def find_peer(self, nid: NID) -> Peer | None:
        lpni = self.by_nid.get(nid)
        return lpni.peer if lpni else None

    def md_holder(self, handle: int, owner: NID, newest: int) -> Peer | None:
        """The peer whose discovery ping or push MD is ``handle``, else the one ``owner``
        names. The owner's peer is asked first and the list scanned only when another may
        hold it: not for a handle above ``newest``, the largest one a peer was ever given
        (an event raised while the GET is sent). A scan per event made a console pinging
        16,384 peers quadratic (issue 27 item 1)."""
        peer = self.find_peer(owner)
        if (peer is None or handle not in (peer.ping_mdh, peer.push_mdh)) and handle <= newest:
            peer = next((p for p in self.peers if handle in (p.ping_mdh, p.push_mdh)),
                        None) or peer
        return peer

    def holds(self, peer: Peer) -> bool:
        """``peer`` is in the table: by its primary NID's index entry, the list scanned only
        for a peer that index does not name (merged away or deleted). A scan for every
        discovery step made a console posting 16,384 RPCs quadratic (issue 27 item 1)."""
        lpni = self.by_nid.get(peer.primary_nid)
        return (lpni is not None and lpni.peer is peer) or peer in self.peers

    def add_nid(self, peer: Peer, nid: NID, peer_credits: int) -> PeerNI:
        """Add ``nid`` to ``peer`` (a new peer net if needed; UDSP rules applied, §7.3)."""
        pnet = peer.peer_net(nid.net)
        if pnet is None:
            pnet = PeerNet(nid.net, peer)
            peer.nets.append(pnet)
            if self.on_new_lpn is not None:
                self.on_new_lpn(pnet)
        lpni = PeerNI(nid, pnet, tx_credits=peer_credits, max_tx_credits=peer_credits,
                      min_tx_credits=peer_credits, rtr_credits=peer_credits,
                      min_rtr_credits=peer_credits)
        pnet.lpnis.append(lpni)
        self.by_nid[nid] = lpni
        self.version += 1
        if self.on_new_lpni is not None:
            self.on_new_lpni(lpni)
        return lpni

    def traffic_add(self, nid: NID, peer_credits: int) -> PeerNI:
        """``lnet_peer_ni_traffic_add``: a new non-MR peer whose primary is ``nid``."""
        return self.add_nid(self._new_peer(nid), nid, peer_credits)

    def user_add(self, prim: NID, nids: list[NID], non_mr: bool, lock_prim: bool,
                 credits_for: dict[Net, int]) -> Peer:
        """``lnet_user_add_peer_ni``: add a configured peer or NIDs to it (cfg-070/075/080)."""
        for nid in [prim, *nids]:
            if nid.is_lo:
                raise LNetConfigError(-EINVAL, f"invalid peer NID {nid}")
        peer = self.find_peer(prim)
        if peer is not None and peer.primary_nid != prim:
            raise LNetConfigError(-EEXIST, f"{prim} is not the primary NID of its peer")
        if peer is not None and not peer.state & CONFIGURED and peer.nnis > 0:
            if peer.rtr_refcount > 0 and not peer.state & LOCK_PRIMARY:
                # lnet_peer_add recreates an unconfigured peer as configured by deleting it
                # first; lnet_peer_ni_del_locked refuses a gateway's peer NI (E19, sanity 105)
                raise LNetConfigError(-EBUSY, f"Peer NI {prim} is a gateway. Can not delete "
                                              "it")
            # a traffic-created peer becomes configured (DLC wins)
            fire(peer, PeerEvent.CONFIGURE)
        if peer is None:
            peer = self._new_peer(prim)
            fire(peer, PeerEvent.CONFIGURE)
            self.add_nid(peer, prim, credits_for.get(prim.net, 0))
        if not non_mr:
            if not peer.multi_rail:
                peer.clr_non_mr_pref_nids()  # lnet_peer_attach_peer_ni with MULTI_RAIL
            fire(peer, PeerEvent.MULTI_RAIL_ON)
        if lock_prim:
            self.lock_primary(peer)
        for nid in nids:
            owner = self.find_peer(nid)
            if owner is peer:
                continue
            if owner is not None:
                raise LNetConfigError(-EEXIST, f"NID {nid} already belongs to peer "
                                               f"{owner.primary_nid}")
            if not peer.multi_rail and peer.peer_net(nid.net) is not None:
                raise LNetConfigError(-ENOTUNIQ, f"non-MR peer {prim} may have one NID per net")
            self.add_nid(peer, nid, credits_for.get(nid.net, 0))
        return peer

    def lock_primary(self, peer: Peer) -> None:
        """``lnet_peer_attach_peer_ni`` with LNET_PEER_LOCK_PRIMARY: the bit and its time."""
        self.lock_seq += 1
        fire(peer, PeerEvent.LOCK_PRIMARY)
        peer.prim_lock_ts = self.lock_seq

    def user_del(self, prim: NID, nids: list[NID], force: bool) -> None:
        """``peer del``: the primary (or no --nid) deletes the whole peer (spec §1.3).

        As ``lnet_del_peer_ni``: any peer may go, configured or discovered; a NID that is not
        the peer's primary is -ENODEV; a gateway of a route is -EBUSY."""
        peer = self.find_peer(prim)
        if peer is None:
            raise LNetConfigError(-ENOENT, f"peer {prim} not found")
        if peer.primary_nid != prim:
            raise LNetConfigError(-ENODEV, f"{prim} is not the primary NID of peer "
                                           f"{peer.primary_nid}")
        if peer.rtr_refcount > 0:
            raise LNetConfigError(-EBUSY, f"{prim} is a router. Can not be deleted")
        if not nids or prim in nids:
            if peer.state & LOCK_PRIMARY and not force:
                nids = [lpni.nid for lpni in peer.lpnis if lpni.nid != prim]
            else:
                self.delete_peer(peer)
                return
        for nid in nids:
            lpni = self.by_nid.get(nid)
            if lpni is None or lpni.peer is not peer:
                raise LNetConfigError(-ENOENT, f"NID {nid} is not a NID of peer {prim}")
            self.del_lpni(lpni)

    def del_lpni(self, lpni: PeerNI) -> None:
        """Remove one peer NI (its peer net too when it was the last one)."""
        pnet = lpni.peer_net
        pnet.lpnis.remove(lpni)
        del self.by_nid[lpni.nid]
        self.version += 1
        if not pnet.lpnis:
            pnet.peer.nets.remove(pnet)

    def delete_peer(self, peer: Peer) -> None:
        for lpni in list(peer.lpnis):
            self.del_lpni(lpni)
        self.peers.remove(peer)

    def net_cleanup(self, net: Net, local: Callable[[Net], bool]) -> list[Peer]:
        """peer.c ``lnet_peer_table_cleanup_locked`` once local ``net`` is gone (``local``
        says which nets still are): a peer NI on it whose peer keeps one on another local net
        stays, as a remote peer NI, and a primary NID on it moves to that survivor unless the
        primary is locked (LU-20403); otherwise a non-primary peer NI goes and a primary one
        takes its whole peer. Returns the peers deleted."""
        gone: list[Peer] = []
        for peer in list(self.peers):
            on_net = [lpni for lpni in peer.lpnis if lpni.nid.net == net]
            if not on_net:
                continue
            keep = next((lpni for lpni in peer.lpnis
                         if lpni.nid.net != net and local(lpni.nid.net)), None)
            if keep is not None:
                if peer.primary_nid.net == net and not peer.state & LOCK_PRIMARY:
                    peer.primary_nid = keep.nid
                    self.version += 1
                continue
            if any(lpni.nid == peer.primary_nid for lpni in on_net):
                self.delete_peer(peer)
                gone.append(peer)
                continue
            for lpni in on_net:
                self.del_lpni(lpni)
        return gone

    def clear(self) -> None:
        """``unconfigure``: every peer goes."""
        self.peers.clear()
        self.by_nid.clear()
        self.version += 1


def _peer_cpt(peer: Peer) -> int:
    return peer.cpt
