"""Route selection (spec §2.2 step 6, §2.6; lib-move.c ``lnet_handle_find_routed_path``,
``lnet_find_route_locked``; seed 002 "Route Selection", "Multi-Rail Route Requirements").

Theory of operation. A destination is remote (``is_remote``, REMOTE_DST) when no local net
reaches it; ``find_routed_path`` then picks the route and the gateway peer NI over the
route table (``route.py``): alive routes only; the gateway's primary NID in the
destination's preferred-router list (UDSP ``--rte``) wins, then lower priority, fewer hops
(undefined = 1), then the Multi-Rail choice among the gateway's NIs on the source net (health,
fewer queued bytes, more credits) and finally the lower ``lr_seq`` (round robin). Today's LNet
ignores ``router_sensitivity`` (LU-18444); seed 002's rule stays behind that knob (issue 14
item 1, docs/differences.md): set below its default 100, a gateway peer NI below ``MAX_HEALTH *
router_sensitivity / 100`` is not used (rtr-mr-sensitivity, rtr-mr-no-unhealthy).

A send whose only routes wait for their gateway's first discovery is parked (``RouteWait``,
``park``) and redone when it completes (002 "discovery on first use").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action
from nodes.lnet.errors import EHOSTUNREACH
from nodes.lnet.ni import LNET_NI_STATUS_UP
from nodes.lnet.nid import Net
from nodes.lnet.route import Route, RouteWait
from nodes.lnet.select import SelectError, best_ni, first_best_lpni, lpni_before, set_non_mr_pref

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import Peer, PeerNet, PeerNI
    from nodes.lnet.router import Router


class RouteSelector:
    """Part of ``Router`` (``Router.path``): the routed path of a send; no state of its own."""

    def __init__(self, r: Router) -> None:
        self.r = r

    def is_remote(self, lpni: PeerNI, src: LNetNI | None, msg: Msg) -> bool:
        """REMOTE_DST classification (spec §2.2 step 6)."""
        nets = self.r.nets
        if src is not None:
            return src.net.net != lpni.nid.net
        # a forwarded PUT/GET to an MR peer is SRC_ANY + MR_DST like a fresh one: a peer
        # net local to this router is preferred to the route (lnet_handle_any_mr_dsta)
        if msg.recovery or msg.is_response or not lpni.peer.multi_rail \
                or (msg.fwd is not None and lpni.nid.net in nets):
            return lpni.nid.net not in nets
        return not any(pn.net in nets and nets[pn.net].nis and pn.lpnis
                       for pn in lpni.peer.nets)

    def find_routed_path(self, msg: Msg, lpni: PeerNI,
                         src: LNetNI | None) -> tuple[LNetNI, PeerNI]:
        """``lnet_handle_find_routed_path`` (spec §2.6); raises SelectError or RouteWait."""
        eng = self.r
        rtr = msg.rtr_nid_param
        if rtr is not None and msg.is_response:
            # back through the previous hop's gateway: its best NI on that net (the one the
            # request came from may be down; lnet_handle_find_routed_path + find_best_lpni)
            gw_lpni = eng.peers.find_lpni(rtr)
            if gw_lpni is not None and gw_lpni.peer.rtr_refcount > 0:
                gw_lpni = self.gw_lpni(gw_lpni.peer, gw_lpni.nid.net) or gw_lpni
            if gw_lpni is not None and gw_lpni.peer.rtr_refcount > 0 and (
                    src is None or src.net.net == gw_lpni.nid.net):
                ni = src or best_ni(eng.nets[gw_lpni.nid.net], msg.md_cpt,
                                    eng.tunables.numa_range)
                if ni is not None:
                    msg.rt_dst = lpni.nid
                    return ni, gw_lpni
        dst = lpni
        if src is None and msg.fwd is None and lpni.peer.multi_rail \
                and not msg.is_response:
            dst = self.best_remote_lpni(lpni)
        nmr = not lpni.peer.multi_rail or msg.recovery  # NMR_DST
        if src is None and nmr:  # lnet_handle_any_router_nmr_dst: the NI used before
            src = self.pref_ni(lpni)
        routes = self.r.table.routes.get(dst.nid.net)
        if not routes:
            raise SelectError(-EHOSTUNREACH, f"no route to {dst.nid}: Route table may be "
                                             "misconfigured")
        src_net = src.net.net if src is not None else None
        choice, last_seq = self.find_route(routes, src_net, dst)
        if choice is None:
            waiting = [g for r in routes if (g := self.r.table.gateway(r)) is not None
                       and not self.r.table.is_discovered(g) and g.alive
                       and (src_net is None or g.peer_net(src_net) is not None)]
            if waiting and not msg.recovery:
                raise RouteWait(waiting)
            raise SelectError(-EHOSTUNREACH, f"no route to {dst.nid} from "
                                             f"{src.nid if src else 'any'}")
        route, gw_lpni = choice
        route.seq = last_seq + 1  # after every live route's (the chosen one is live)
        ni = src or best_ni(eng.nets[gw_lpni.nid.net], msg.md_cpt, eng.tunables.numa_range)
        assert ni is not None
        if nmr:  # the non-MR destination keeps this source (lnet_set_non_mr_pref_nid)
            set_non_mr_pref(lpni, ni, msg.is_response)
        msg.rt_dst = dst.nid
        dst.peer.send_seq += 1  # the final destination's stamps move too (spec §2.7)
        dst.peer_net.seq = dst.seq = dst.peer.send_seq
        return ni, gw_lpni

    def pref_ni(self, lpni: PeerNI) -> LNetNI | None:
        """``lnet_find_existing_preferred_best_ni`` for a routed destination: the local NI
        (on whichever net) a peer NI of its peer net prefers."""
        for entry in lpni.peer_net.lpnis:
            if entry.pref_nids:
                return self.r.local.ni_by_nid(entry.pref_nids[0])
        return None

    def best_remote_lpni(self, lpni: PeerNI) -> PeerNI:
        """SRC_ANY request to an MR peer: its net that has routes, then its best NI there.
        (Both ``min``s by key written out as loops: a routed message runs this.)"""
        routes = self.r.table.routes
        best: PeerNet | None = None
        b_health = b_prio = b_seq = 0
        for pn in lpni.peer.nets:  # min by (-healthv, sel_priority, seq): the first wins ties
            if pn.net in routes and pn.lpnis:
                health, prio, seq = pn.healthv, pn.sel_priority, pn.seq
                if best is None or health > b_health or (health == b_health and (
                        prio < b_prio or (prio == b_prio and seq < b_seq))):
                    best, b_health, b_prio, b_seq = pn, health, prio, seq
        if best is None:
            return lpni
        return first_best_lpni(best.lpnis)

    def gw_lpni(self, gw: Peer, net: Net) -> PeerNI | None:
        """The gateway's best usable NI on ``net`` (``lnet_find_best_lpni``, seed 002)."""
        pnet = gw.peer_net(net)
        if pnet is None:
            return None
        thr = self.r.table.threshold()
        best: PeerNI | None = None
        for p in pnet.lpnis:  # ``lpni_usable``, then the first of the smallest key
            if p.ns_status == LNET_NI_STATUS_UP and p.healthv >= thr and (
                    best is None or lpni_before(p, best)):
                best = p
        return best

    def find_route(self, routes: list[Route], src_net: Net | None,
                   dst: PeerNI) -> tuple[tuple[Route, PeerNI] | None, int]:
        """``lnet_find_route_locked`` (spec §2.6 step 3, 002 "Route Selection"); with the
        choice, the highest ``seq`` of the live routes (the chosen one's next), -1 if none."""
        best: tuple[Route, PeerNI] | None = None
        best_key: tuple[int, int, int, int, int, int, int] | None = None
        last_seq = -1
        nets = self.r.nets
        for route in routes:
            if not self.r.table.route_alive(route):
                continue
            if route.seq > last_seq:
                last_seq = route.seq
            gw = self.r.table.gateway(route)
            assert gw is not None
            net = src_net if src_net is not None else route.lnet
            if net not in nets:
                continue
            gw_lpni = self.gw_lpni(gw, net)
            if gw_lpni is None:
                continue
            pref = 0 if gw.primary_nid in dst.rtr_pref_nids or any(
                p.nid in dst.rtr_pref_nids for p in gw.lpnis) else 1
            key = (pref, route.priority, route.hops_cmp, -gw_lpni.healthv, gw_lpni.txqnob,
                   -gw_lpni.tx_credits, route.seq)
            if best_key is None or key <= best_key:  # equal: the later route wins
                best, best_key = (route, gw_lpni), key
        return best, last_seq

    def park(self, msg: Msg, wait: RouteWait, now: float) -> list[Action]:
        """Queue ``msg`` until a gateway's discovery completes (002: discovery on first use).

        Keyed by the gateway's primary NID, so a send parked on a peer that discovery then
        merges into another one is redone when the merged gateway completes (002)."""
        gw = wait.gateways[0]
        self.r.checker.pending.setdefault(gw.primary_nid, []).append(msg)
        actions: list[Action] = []
        for g in wait.gateways:
            actions += self.r.checker.start_discovery(g, None, now)
        return actions
