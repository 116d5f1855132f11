"""Multi-Rail pathway selection: which local NI and which peer NI carry a message (spec §2).

Theory of operation: local NI first (snd-060). For a Multi-Rail peer with no source given the
best (peer net, local net) pair is chosen (spec §2.3), then the best NI on that net (spec §2.4:
not fatal, health, UDSP priority, NUMA distance, credits, round robin; snd-005..030), then the
best peer NI on that net for that NI (spec §2.5: health, priority, preferred, credits, round
robin; snd-035/040). Non-MR peers (and recovery pings) are sent to the exact NID, from the
peer net's preferred NI if it has one (spec §2.2 NMR cases). A given source NID pins the NI
(snd-045: responses leave from the NID the request came to, to the request's source); as in
today's LNet a resend of such a message keeps that source (spec §3.3, see docs/differences.md
on snd-070). Comparisons are strict lexicographic orders of criteria; ties keep the earlier
candidate (spec §12 ``better``).

NUMA is emulated (snd-010..025): each NI may carry a NUMA node (``LNetNI.dev_cpt``, -1 =
unbound) and a send may name the NUMA node of its memory (``md_cpt``); the distance is
``|md_cpt - dev_cpt|`` (0 when either is unknown), and distances below ``numa_range`` count as
``numa_range`` (spec §2.4 step 5).

This module owns the choice and nothing else: credits, commit and stamps live in ``send.py``.
UDSP fills in the ``sel_priority`` fields of nets, NIs, peer nets and peer NIs (issue 4);
the routed path (spec §2.6) lives in ``router.py`` (``Sender.select`` asks it first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from nodes.lnet.errors import EHOSTUNREACH
from nodes.lnet.ni import LNET_NI_STATUS_UP, LNetNet, LNetNI
from nodes.lnet.nid import Net
from nodes.lnet.peer import Peer, PeerNet, PeerNI

T = TypeVar("T")


class SelectError(Exception):
    """No path: carries the negative errno that ``lnet_select_pathway`` returns (spec §2.8)."""

    def __init__(self, errno: int, descr: str) -> None:
        super().__init__(descr)
        self.errno = errno
        self.descr = descr


def _best(items: Iterable[T], key: Callable[[T], tuple[int, ...]]) -> T | None:
    """First item with the smallest key: ties keep the earlier one (spec §12 ``better``)."""
    best: T | None = None
    best_key: tuple[int, ...] | None = None
    for item in items:
        k = key(item)
        if best_key is None or k < best_key:
            best, best_key = item, k
    return best


def numa_distance(md_cpt: int | None, dev_cpt: int) -> int:
    """Emulated ``cfs_cpt_distance``: |a-b|, 0 if the memory or the device has no NUMA node."""
    if md_cpt is None or md_cpt < 0 or dev_cpt < 0:
        return 0
    return abs(md_cpt - dev_cpt)


def ni_key(ni: LNetNI, md_cpt: int | None, numa_range: int) -> tuple[int, ...]:
    """The ordered criteria of ``lnet_get_best_ni`` (spec §2.4, §12 best_ni keys).

    1 not fatal, 2 higher health, 3 lower UDSP priority, 4 (GPU priority: n/a), 5 shorter NUMA
    distance (below ``numa_range`` rounded up to it), 6 more tx credits, 7 lower seq (RR).
    """
    dist = numa_range if md_cpt is None and numa_range >= 0 else max(
        numa_distance(md_cpt, ni.dev_cpt), numa_range)
    return (int(ni.fatal_error), -ni.healthv, ni.sel_priority, dist, -ni.tx_credits, ni.seq)


def best_ni(net: LNetNet, md_cpt: int | None = None, numa_range: int = 0) -> LNetNI | None:
    """``lnet_get_best_ni`` over the NIs of one local net (spec §2.4; snd-005/020/025/030).
    (``_best`` over ``ni_key``, its loop and comparison written out: this runs for most
    messages, and comparing the criteria one by one builds no tuples)"""
    nis = net.nis
    if len(nis) == 1:  # one candidate: the order's first, whatever its key (no key built)
        return nis[0]
    best: LNetNI | None = None
    for ni in nis:
        if best is None or _ni_before(ni, best, md_cpt, numa_range):
            best = ni
    return best


def _ni_before(a: LNetNI, b: LNetNI, md_cpt: int | None, numa_range: int) -> bool:
    """``ni_key(a, ...) < ni_key(b, ...)``, criterion by criterion."""
    if a.fatal_error != b.fatal_error:
        return b.fatal_error
    if a.healthv != b.healthv:
        return a.healthv > b.healthv
    if a.sel_priority != b.sel_priority:
        return a.sel_priority < b.sel_priority
    if md_cpt is not None or numa_range < 0:  # (else both distances are numa_range)
        da = max(numa_distance(md_cpt, a.dev_cpt), numa_range)
        db = max(numa_distance(md_cpt, b.dev_cpt), numa_range)
        if da != db:
            return da < db
    if a.tx_credits != b.tx_credits:
        return a.tx_credits > b.tx_credits
    return a.seq < b.seq


def lpni_key(p: PeerNI, ni: LNetNI) -> tuple[int, ...]:
    """``lnet_select_peer_ni`` criteria (spec §2.5): health, priority, preferred, credits, seq."""
    return (-p.healthv, p.sel_priority, 0 if ni.nid in p.pref_nids else 1, -p.tx_credits, p.seq)


def best_lpni(pnet: PeerNet, ni: LNetNI) -> PeerNI | None:
    """The best peer NI on ``pnet`` to send to from ``ni`` (spec §2.5; snd-035/040).
    (``_best`` over ``lpni_key``, written out as ``best_ni``)"""
    lpnis = pnet.lpnis
    if len(lpnis) == 1:  # one candidate (as ``best_ni``)
        return lpnis[0]
    best: PeerNI | None = None
    best_pref = False
    nid = ni.nid
    for p in lpnis:
        pref = nid in p.pref_nids
        if best is None or _lpni_before(p, pref, best, best_pref):
            best, best_pref = p, pref
    return best


def _lpni_before(a: PeerNI, a_pref: bool, b: PeerNI, b_pref: bool) -> bool:
    """``lpni_key(a, ni) < lpni_key(b, ni)`` given whether each prefers ``ni``."""
    if a.healthv != b.healthv:
        return a.healthv > b.healthv
    if a.sel_priority != b.sel_priority:
        return a.sel_priority < b.sel_priority
    if a_pref != b_pref:
        return a_pref
    if a.tx_credits != b.tx_credits:
        return a.tx_credits > b.tx_credits
    return a.seq < b.seq


def pair_key(pair: tuple[PeerNet, LNetNet]) -> tuple[int, ...]:
    """``lnet_find_best_ni_on_local_net``'s criteria (spec §2.3): peer net health and UDSP
    priority, local net health and priority, then round robin over both."""
    pn, ln = pair
    return (-pn.healthv, pn.sel_priority, -ln.healthv, ln.sel_priority, pn.seq, ln.seq)


def best_local_pair(peer: Peer, nets: dict[Net, LNetNet]) -> tuple[PeerNet, LNetNet] | None:
    """``lnet_find_best_ni_on_local_net`` (spec §2.3) over the peer's nets that are local.
    A peer with one such net (every message of a single-rail pair) has that pair, no key
    built: the keys only order two candidates or more."""
    first: tuple[PeerNet, LNetNet] | None = None
    pairs: list[tuple[PeerNet, LNetNet]] | None = None
    for pn in peer.nets:
        ln = nets.get(pn.net)
        if ln is None or not ln.nis or not pn.lpnis:
            continue
        if first is None:
            first = (pn, ln)
        elif pairs is None:
            pairs = [first, (pn, ln)]
        else:
            pairs.append((pn, ln))
    return first if pairs is None else _best(pairs, pair_key)


def _existing_pref_ni(lpni: PeerNI, nets: dict[Net, LNetNet]) -> LNetNI | None:
    """``lnet_find_existing_preferred_best_ni``: the non-MR preferred NI of this peer net."""
    net = nets.get(lpni.nid.net)
    if net is None:
        return None
    for entry in lpni.peer_net.lpnis:
        if entry.pref_nids:
            return next((ni for ni in net.nis if ni.nid == entry.pref_nids[0]), None)
    return None


def set_non_mr_pref(lpni: PeerNI, ni: LNetNI, is_response: bool) -> None:
    """``lnet_set_non_mr_pref_nid``: a non-MR peer keeps talking to the same local NI."""
    if not lpni.peer.multi_rail and not is_response and not lpni.pref_nids:
        lpni.pref_nids.append(ni.nid)
        lpni.non_mr_pref = True


def select_pathway(*, lpni: PeerNI, src: LNetNI | None, nets: dict[Net, LNetNet],
                   nmr: bool, md_cpt: int | None = None, numa_range: int = 0,
                   reserved: bool = False,
                   is_response: bool = False) -> tuple[LNetNI, PeerNI]:
    """Choose (local NI, peer NI) for a message to ``lpni``'s NID (spec §2.2 dispatch table).

    Args:
        lpni: the destination peer NI (found or traffic-created by the caller).
        src: the given source NI (SRC_SPEC), or None (SRC_ANY).
        nmr: treat the destination as non-Multi-Rail (non-MR peer or recovery ping).
        md_cpt: NUMA node of the message memory, None if unknown.
        reserved: message on the reserved portal 0 (ignores the non-MR preferred NI).
    Raises:
        SelectError: -EHOSTUNREACH when no local net reaches the peer (spec §2.8).
    """
    peer = lpni.peer
    if src is not None:
        # SRC_SPEC: the NI is given; the peer NI is the exact destination (spec §2.2).
        if src.net.net != lpni.nid.net:
            raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid} from {src.nid}")
        if nmr:
            set_non_mr_pref(lpni, src, is_response)
        return src, lpni
    net = nets.get(lpni.nid.net)
    if nmr:
        # SRC_ANY + LOCAL + NMR: exact NID, from the peer net's preferred NI or the best NI.
        if net is None or not net.nis:
            raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid}")
        ni = None if reserved else _existing_pref_ni(lpni, nets)
        ni = ni or best_ni(net, md_cpt, numa_range)
        assert ni is not None
        set_non_mr_pref(lpni, ni, is_response)
        return ni, lpni
    if is_response:
        # response to a local MR peer without a source: best NI on the dst's net (spec §2.3)
        if net is None or not net.nis:
            raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid}")
        ni = best_ni(net, md_cpt, numa_range)
        assert ni is not None
        return ni, lpni
    pair = best_local_pair(peer, nets)
    if pair is None:
        raise SelectError(-EHOSTUNREACH, f"peer {peer.primary_nid} has no available nets")
    pnet, lnet = pair
    ni = best_ni(lnet, md_cpt, numa_range)
    chosen = best_lpni(pnet, ni) if ni is not None else None
    if ni is None or chosen is None:
        raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid}")
    return ni, chosen


def any_usable(lpnis: list[PeerNI], threshold: int) -> bool:
    """Whether a peer NI is up with health at ``threshold`` or more (a gateway NI the router
    may use: ``RouteTable.lpni_usable``, rtr-mr-no-unhealthy)."""
    return any(p.ns_status == LNET_NI_STATUS_UP and p.healthv >= threshold for p in lpnis)


def lpni_before(a: PeerNI, b: PeerNI) -> bool:
    """Whether ``a``'s key (-healthv, sel_priority, -tx_credits, seq) is below ``b``'s: the
    order among a gateway's NIs (``lnet_find_best_lpni``) and a routed peer's."""
    if a.healthv != b.healthv:
        return a.healthv > b.healthv
    if a.sel_priority != b.sel_priority:
        return a.sel_priority < b.sel_priority
    if a.tx_credits != b.tx_credits:
        return a.tx_credits > b.tx_credits
    return a.seq < b.seq


def first_best_lpni(lpnis: list[PeerNI]) -> PeerNI:
    """The first of ``lpnis`` (not empty) with the smallest key of ``lpni_before``."""
    best = lpnis[0]
    for p in lpnis:
        if lpni_before(p, best):
            best = p
    return best
