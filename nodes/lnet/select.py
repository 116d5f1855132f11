"""Multi-Rail pathway selection: which local NI and which peer NI carry a message (spec §2).

Theory of operation: local NI first (snd-060). For a Multi-Rail peer with no source given the
best (peer net, local net) pair is chosen, then the best NI on that net, then the best peer NI
on that net for that NI. Non-MR peers are sent to on the exact NID, from their preferred NI.
A given source NID pins the NI (snd-045/070: responses leave from the NID the request came to).
Comparisons are strict lexicographic orders of criteria; ties keep the earlier candidate.

This module owns the choice and nothing else: credits, commit and stamps live in the engine.
The criteria implemented here are health, UDSP priority, credits and round robin; NUMA and the
full UDSP/route cases are filled in by later work on this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from nodes.lnet.errors import EHOSTUNREACH, EINVAL
from nodes.lnet.ni import LNetNet, LNetNI
from nodes.lnet.nid import NID
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


def best_ni(net: LNetNet) -> LNetNI | None:
    """``lnet_get_best_ni`` (spec §2.4): not fatal, health, priority, credits, then RR seq."""
    return _best(net.nis, lambda ni: (int(ni.fatal_error), -ni.healthv, ni.sel_priority,
                                      -ni.tx_credits, ni.seq))


def best_lpni(pnet: PeerNet, ni: LNetNI) -> PeerNI | None:
    """``lnet_select_peer_ni`` (spec §2.5): health, priority, preferred, credits, RR seq."""
    return _best(pnet.lpnis, lambda p: (-p.healthv, p.sel_priority,
                                        0 if ni.nid in p.pref_nids else 1,
                                        -p.tx_credits, p.seq))


def best_local_pair(peer: Peer, nets: dict[object, LNetNet]) -> tuple[PeerNet, LNetNet] | None:
    """``lnet_find_best_ni_on_local_net`` (spec §2.3) over the peer's nets that are local."""
    pairs = [(pn, nets[pn.net]) for pn in peer.nets if pn.net in nets and nets[pn.net].nis]
    return _best(pairs, lambda pr: (-pr[0].healthv, pr[0].sel_priority, -pr[1].healthv,
                                    pr[1].sel_priority, pr[0].seq, pr[1].seq))


def select_pathway(*, lpni: PeerNI, src: LNetNI | None, nets: dict[object, LNetNet],
                   nmr: bool, local_nis: Sequence[LNetNI]) -> tuple[LNetNI, PeerNI]:
    """Choose (local NI, peer NI) for a message to ``lpni``'s NID (spec §2.2 dispatch table)."""
    peer = lpni.peer
    if src is not None:
        # SRC_SPEC: the NI is given; the peer NI is the exact destination (spec §2.2).
        if src.net.net != lpni.nid.net:
            raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid} from {src.nid}")
        if nmr and not lpni.pref_nids:
            lpni.pref_nids.append(src.nid)
        return src, lpni
    if nmr:
        # SRC_ANY + NMR: exact NID, from the peer net's preferred NI if it has one.
        net = nets.get(lpni.nid.net)
        if net is None or not net.nis:
            raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid}")
        ni = next((n for n in net.nis if n.nid in lpni.pref_nids), None) or best_ni(net)
        assert ni is not None
        return ni, lpni
    pair = best_local_pair(peer, nets)
    if pair is None:
        raise SelectError(-EHOSTUNREACH, f"peer {peer.primary_nid} has no available nets")
    pnet, net = pair
    ni = best_ni(net)
    chosen = best_lpni(pnet, ni) if ni is not None else None
    if ni is None or chosen is None:
        raise SelectError(-EHOSTUNREACH, f"no route to {lpni.nid}")
    return ni, chosen


def find_local_ni(nid: NID, local_nis: Sequence[LNetNI]) -> LNetNI:
    """A source NID must be one of ours (spec §2.8: -EINVAL otherwise)."""
    for ni in local_nis:
        if ni.nid == nid:
            return ni
    raise SelectError(-EINVAL, f"source NID {nid} is not a local NID")
