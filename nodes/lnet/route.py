"""Routes: the route table and route aliveness (spec §1.4, §6.1, §6.3; seed 002 "Multi-Rail
Route Requirements"); route selection over it is ``routesel.py``.

Theory of operation.
* Routes (``lnetctl route add``, spec §6.1): one list per remote net, each new route inserted
  at a random position (seeded rng, ``lnet_add_route_to_rnet``). A route names the NID it was
  added with (``lr_nid``); its gateway is always *the peer that owns that NID now*, so when
  discovery merges the peers of several NIDs of one router (seed 002 "Router Discovery") the
  routes end up on one gateway peer with no bookkeeping (``gateway()``).
* Route selection (spec §2.6): ``routesel.py``, over this table (the gateway peer NI threshold,
  ``threshold``, and aliveness are the table's).
* Route aliveness (``lnet_is_route_alive``, spec §6.3 + seed 002, rtrstate.py): gateway alive,
  routing enabled on it (no RTE_DISABLED in its ping), a usable gateway NI on the route's
  local net (rtr-route-down, rtr-gw-down), and the route's own ``lr_alive`` (asym, rtr-gw-asym).
  With discovery disabled (locally or by the gateway) the gateway's NIDs are not merged, so
  the cached ``lr_alive`` the router pings set is all there is (router.c: "if discovery is
  disabled then rely on the cached aliveness information", E13).
* A send whose only routes wait for their gateway's first discovery raises ``RouteWait``
  (``routesel.py`` parks it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nodes.lnet.actions import Action, Log
from nodes.lnet.dc_state import discovery_disabled
from nodes.lnet.errors import EEXIST, EHOSTUNREACH, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.lpstate import NO_DISCOVERY, ROUTER_ENABLED
from nodes.lnet.ni import LNET_NI_STATUS_UP
from nodes.lnet.nid import LNET_NID_ANY, LO_NET, NID, Net
from nodes.lnet.select import (
    any_usable,
)
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.peer import Peer, PeerNI
    from nodes.lnet.router import Router

LNET_UNDEFINED_HOPS: Final = 0xFFFF_FFFF


class RouteWait(Exception):
    """The only usable routes wait for their gateway's first discovery (002: LNET_DC_WAIT)."""

    def __init__(self, gateways: list[Peer]) -> None:
        super().__init__("waiting for router discovery")
        self.gateways = gateways


@dataclass(eq=False, slots=True)
class Route:
    """``lnet_route``: remote net, local net of the gateway NID, the NID given, hops, prio."""

    net: Net
    lnet: Net
    nid: NID
    hops: int = LNET_UNDEFINED_HOPS
    priority: int = 0
    seq: int = 0
    alive: bool = True          # lr_alive (rtrstate.ROUTE), from the last ping reply
    single_hop: bool = False    # lr_single_hop, learnt from the gateway's ping
    shown_up: bool | None = None  # last state logged ("has gone from up to down")

    @property
    def hops_cmp(self) -> int:
        return 1 if self.hops == LNET_UNDEFINED_HOPS else self.hops


class RouteTable:
    """Part of ``Router``: the route table and the routed path (state lives in Router)."""

    def __init__(self, r: Router) -> None:
        self.r = r
        self.routes: dict[Net, list[Route]] = {}

    # ------------------------------------------------------------------ queries
    def gateway(self, route: Route) -> Peer | None:
        return self.r.peers.find_peer(route.nid)

    def all_routes(self) -> list[Route]:
        return [r for rs in self.routes.values() for r in rs]

    def gateways(self) -> list[Peer]:
        out: list[Peer] = []
        for r in self.all_routes():
            gw = self.gateway(r)
            if gw is not None and gw not in out:
                out.append(gw)
        return out

    def is_discovered(self, gw: Peer) -> bool:
        """LNET_PEER_RTR_DISCOVERED, kept by NID so it survives a peer merge (002)."""
        return any(p.nid in self.r.checker.discovered for p in gw.lpnis)

    def refresh_refcounts(self) -> None:
        """``lp_rtr_refcount``: routes using each peer as gateway (after add/del/merge)."""
        counts = Counter(id(g) for r in self.all_routes() if (g := self.gateway(r)) is not None)
        for peer in self.r.peers.peers:  # (one pass each: linear in routes and peers)
            peer.rtr_refcount = counts[id(peer)]
        live = {pn for p in self.r.peers.peers for pn in p.nets}
        for pn in [pn for pn in self.r.checker.next_ping if pn not in live]:
            del self.r.checker.next_ping[pn]  # peer nets of peers merged away (002 consolidation)
        self.r.checker.gw_dirty = True  # (called after every change of the route table)

    def threshold(self) -> int:
        """Seed 002 behind the deprecated knob: with ``router_sensitivity`` below 100 a gateway
        peer NI under MAX_HEALTH * router_sensitivity % is not used; at the default 100 the
        percentage has no effect, as in today's LNet (router.c, LU-18444): 0."""
        pct = self.r.tunables.router_sensitivity
        return 0 if pct >= 100 else LNET_MAX_HEALTH_VALUE * pct // 100

    def lpni_usable(self, lpni: PeerNI) -> bool:
        """rtr-mr-no-unhealthy: UP and healthy enough to put a message on the wire."""
        return lpni.ns_status == LNET_NI_STATUS_UP and lpni.healthv >= self.threshold()

    def route_alive(self, route: Route) -> bool:
        """``lnet_is_route_alive`` (spec §6.3) with seed 002's health threshold."""
        gw = self.gateway(route)
        if gw is None or not gw.alive:
            return False
        if not self.r.tunables.discovery or gw.state & NO_DISCOVERY:
            # discovery disabled here or on the gateway: the cached aliveness the checker's
            # ping replies and lnet_notify keep (router.c lnet_is_route_alive); a gateway
            # not discovered yet still waits for its first ping (seed 002, differences.md)
            return route.alive
        if not gw.state & ROUTER_ENABLED:
            return False
        if discovery_disabled(self.r.discovery, gw):
            return route.alive  # the cached lr_alive (E13)
        llpn = gw.peer_net(route.lnet)
        if llpn is None or not any_usable(llpn.lpnis, self.threshold()):
            return False  # rtr-gw-down: every local representation below the threshold
        if self.r.tunables.avoid_asym_router_failure and (route.hops == 1 or
                                                            route.single_hop):
            rlpn = gw.peer_net(route.net)
            if rlpn is None or not any(p.ns_status == LNET_NI_STATUS_UP for p in rlpn.lpnis):
                return False  # rtr-route-down: no viable peer NI on the remote net
        return route.alive

    # ------------------------------------------------------------------ DLC: routes
    def add(self, net: Net, gateway: NID, hops: int | None, priority: int,
            now: float) -> list[Action]:
        """``lnet_add_route`` with the kernel's checks (spec §6.1); raises LNetConfigError."""
        eng = self.r
        eng.require_up()
        if gateway.is_lo or net == LO_NET or gateway.nid4 == LNET_NID_ANY:
            raise LNetConfigError(-EINVAL, "add route: invalid gateway or net")
        if gateway.net == net:
            raise LNetConfigError(-EINVAL, f"add route: gateway {gateway} is on the target "
                                           f"net {net}")
        if hops is not None and not 1 <= hops <= 255:
            raise LNetConfigError(-EINVAL, f"invalid hop count {hops}, must be 1..255")
        if priority < 0:
            raise LNetConfigError(-EINVAL, f"invalid priority {priority}")
        if net in eng.nets:
            raise LNetConfigError(-EEXIST, f"add route: net {net} is a local net")
        if gateway.net not in eng.nets:
            raise LNetConfigError(-EHOSTUNREACH, f"add route: gateway {gateway} is not on a "
                                                 "local net")
        lpni = eng.peers.find_lpni(gateway)
        if lpni is None:
            lpni = eng.peers.traffic_add(gateway, eng.local.peer_credits(gateway.net))
        gw = lpni.peer
        existing = self.routes.setdefault(net, [])
        if any(self.gateway(r) is gw for r in existing):
            raise LNetConfigError(-EEXIST, f"route to {net} through {gw.primary_nid} exists")
        route = Route(net, gateway.net, gateway, LNET_UNDEFINED_HOPS if hops is None else hops,
                      priority)
        route.alive = not eng.tunables.check_routers_before_use
        if eng.tunables.check_routers_before_use:
            gw.alive = False
        existing.insert(eng.rng.randint(0, len(existing)), route)  # random position (§1.4)
        self.refresh_refcounts()
        for pnet in gw.nets:  # force an immediate router check (lpn_next_ping = now)
            self.r.checker.next_ping[pnet] = now
        self.r.checker.gw_dirty = True
        logs: list[Action] = []
        if eng.tunables.avoid_asym_router_failure and hops is None:
            logs.append(Log(level="warning", text="Use hops = 1 for a single-hop route when "
                            "avoid_asym_router_failure feature is enabled"))
        return logs

    def delete(self, net: Net | None, gateway: NID | None) -> None:
        """``lnet_del_route``: routes to ``net`` (all nets if None) via ``gateway``'s peer."""
        self.r.require_up()
        gw = self.r.peers.find_peer(gateway) if gateway is not None else None
        if gateway is not None and gw is None:
            raise LNetConfigError(-ENOENT, f"no route through {gateway}")
        found = False
        for rnet in list(self.routes):
            if net is not None and rnet != net:
                continue
            keep = [r for r in self.routes[rnet] if gw is not None and self.gateway(r) is not gw]
            found = found or len(keep) != len(self.routes[rnet])
            if keep:
                self.routes[rnet] = keep
            else:
                del self.routes[rnet]
        if not found:
            raise LNetConfigError(-ENOENT, "cannot delete route: No such file or directory")
        self.refresh_refcounts()

    # ------------------------------------------------------------------ views (spec §9.3)
    def route_show(self, net: str | None = None, gateway: str | None = None,
                   hop: int | None = None, priority: int | None = None,
                   verbose: int = 0) -> dict[str, Any]:
        out = []
        want_net = Net.parse(net) if net else None
        want_gw = NID.parse(gateway) if gateway else None
        gw_peer = self.r.peers.find_peer(want_gw) if want_gw else None
        for rnet, routes in self.routes.items():
            if want_net is not None and rnet != want_net:
                continue
            for r in routes:
                hops = -1 if r.hops == LNET_UNDEFINED_HOPS else r.hops
                if want_gw is not None and r.nid != want_gw and (
                        gw_peer is None or self.gateway(r) is not gw_peer):
                    continue
                if (hop is not None and hops != hop) or (priority is not None
                                                         and r.priority != priority):
                    continue
                item: dict[str, Any] = {"net": str(r.net), "gateway": str(r.nid)}
                if verbose:
                    item.update({"hop": hops, "priority": r.priority,
                                 "state": "up" if self.route_alive(r) else "down",
                                 "type": "single-hop" if r.single_hop else "multi-hop"})
                out.append(item)
        return {"route": out}

