"""The router checker: gateway pings, their replies, router NI status (spec §6.2, §6.4; seed
001 router requirement 2, seed 002 "Router Ping", "Router Discovery").

Theory of operation. A gateway is pinged on one of its local nets every
``alive_router_check_interval`` (and at once after a route add). When the discovery module
offers ``start(..., rtr_net=)`` it does the ping (and merges the gateway's NIDs, spec §5.4)
and calls ``discovery_ping_reply`` + ``discovery_complete``; otherwise the checker's own ping
(the pre-LU-11299 pinger) is used and ``consolidate`` merges. The reply's NI list and
statuses drive the machines of ``rtrstate.py``: each gateway peer NI (ping_ni_up/down), the
gateway (ping_reply / ping_reply_rte_disabled / ping_failed) and each route through it
(asym: ping_remote_up/down, rtr-gw-asym). State the checker keeps per gateway is keyed by NID
(``discovered``, ``pending``), so routes and parked sends follow a gateway that discovery
merges with another peer (002 consolidation).

On a router, an NI that receives nothing for router_ping_timeout +
alive_router_check_interval, or whose link is fatal, is reported DOWN in the ping buffer
(rtr-router-ni-down), so users of the router see the route down (avoid_asym_router_failure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.lpstate import ROUTER_ENABLED, PeerEvent, fire
from nodes.lnet.msg import MsgInput
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP
from nodes.lnet.nid import NID, Net
from nodes.lnet.ping import LNET_PING_FEAT_MULTI_RAIL, LNET_PING_FEAT_RTE_DISABLED, PingInfo
from nodes.lnet.rtrstate import ALIVE, DEAD, DISABLED, DOWN, UNKNOWN, UP, step

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import Peer, PeerNet, PeerNI
    from nodes.lnet.route import Route
    from nodes.lnet.router import Router


class RouterChecker:
    """Part of ``Router``: router pings, replies, completion, NI status."""

    def __init__(self, r: Router) -> None:
        self.r = r
        self.pending: dict[NID, list[Msg]] = {}  # sends parked on a gateway's discovery
        self.in_discovery: set[NID] = set()  # LNET_PEER_RTR_DISCOVERY (by NID)
        self.discovered: set[NID] = set()  # LNET_PEER_RTR_DISCOVERED (by NID)
        self.next_ping: dict[PeerNet, float] = {}  # lpn_next_ping
        self.ni_last_alive: dict[LNetNI, float] = {}
        # ``gateway_pings`` kept by ``deadline`` and what it was computed from
        self.gw_due: float | None = None
        self.gw_dirty = True  # set on every change of the route table and ``next_ping``
        self.gw_peers_v = self.gw_nets_v = self.gw_interval = -1

    # ------------------------------------------------------------------ machines
    def gw_state(self, gw: Peer) -> str:
        """The gateway machine's state (rtrstate.GATEWAY) from lp_alive and the features."""
        if not self.r.table.is_discovered(gw):
            return UNKNOWN
        if not gw.alive:
            return DEAD
        return ALIVE if gw.state & ROUTER_ENABLED else DISABLED

    def gw_event(self, gw: Peer, event: str) -> str | None:
        """Feed ``event`` to ``gw``'s machine and apply the next state; returns the effect."""
        effect, nxt = step("gateway", self.gw_state(gw), event)
        if nxt == DEAD:
            gw.alive = False
        elif nxt == ALIVE:
            gw.alive = True
            if event == "ping_reply":
                fire(gw, PeerEvent.ROUTER_ON)
        elif nxt == DISABLED:
            gw.alive = True
            if event == "ping_reply_rte_disabled":
                fire(gw, PeerEvent.ROUTER_OFF)
        return effect

    @staticmethod
    def lpni_event(lpni: PeerNI, event: str) -> str | None:
        effect, nxt = step("lpni", UP if lpni.ns_status == LNET_NI_STATUS_UP else DOWN, event)
        lpni.ns_status = LNET_NI_STATUS_UP if nxt == UP else LNET_NI_STATUS_DOWN
        return effect

    @staticmethod
    def route_event(route: Route, event: str) -> None:
        _effect, nxt = step("route", UP if route.alive else DOWN, event)
        route.alive = nxt == UP

    # ------------------------------------------------------------------ timing
    def deadline(self) -> float | None:
        """Next time the checker has work: a gateway ping, a state change, an NI timeout.

        (Asked after every batch of a routed node's actions: the gateways' pings are kept
        between changes of what they depend on, the rest is one pass with no lists built.)"""
        r = self.r
        interval = r.tunables.alive_router_check_interval
        if self.in_discovery or interval <= 0:
            best = self.gateway_pings(interval)  # (depends on more: never kept)
        else:
            peers_v, nets_v = r.peers.version, r.local.version
            if self.gw_dirty or peers_v != self.gw_peers_v or nets_v != self.gw_nets_v \
                    or interval != self.gw_interval:
                self.gw_due = self.gateway_pings(interval)
                self.gw_peers_v, self.gw_nets_v, self.gw_interval = peers_v, nets_v, interval
                self.gw_dirty = False
            best = self.gw_due
        state_at = r.state_deadline()
        if state_at is not None and (best is None or state_at < best):
            best = state_at
        if r.alive.query_wanted:
            for t in r.alive.query_deadlines():
                if best is None or t < best:
                    best = t
        if r.enabled:
            limit = self.ni_timeout()
            nis = r.local.local_nis()
            if limit > 0:
                for ni, t in self.ni_last_alive.items():
                    if ni.status == LNET_NI_STATUS_UP and ni in nis and (
                            best is None or t + limit < best):
                        best = t + limit
            for ni in nis:
                if ni.fatal_error and ni.status == LNET_NI_STATUS_UP and (
                        best is None or r.last_now + 1.0 < best):
                    best = r.last_now + 1.0
        if best is None:
            return None
        return max(best, r.last_now)

    def gateway_pings(self, interval: int) -> float | None:
        """The earliest of every gateway's pings (``table.gateways()`` without its list: a
        gateway met twice gives the same times again, which cannot move a minimum).

        With no gateway in discovery and ``interval`` > 0 it depends only on the route
        table, the peer table's NIDs (``PeerTable.version``), the local nets
        (``LocalNets.version``), ``interval`` and ``next_ping``: ``deadline`` keeps it
        until one of them moves (``gw_dirty``: the route table and ``next_ping``)."""
        r = self.r
        best: float | None = None
        nets, next_ping = r.nets, self.next_ping
        find_peer, quick = r.peers.find_peer, not self.in_discovery and interval > 0
        for routes in r.table.routes.values():
            for route in routes:
                gw = find_peer(route.nid)
                if gw is None or (not quick and self.skip(gw, interval)):
                    continue
                for pn in gw.nets:
                    if pn.net in nets:
                        t = next_ping.get(pn, 0.0)
                        if best is None or t < best:
                            best = t
        return best

    def skip(self, gw: Peer, interval: int) -> bool:
        in_disc = bool(self.in_discovery) and any(p.nid in self.in_discovery for p in gw.lpnis)
        return in_disc or (interval <= 0 and self.r.table.is_discovered(gw))

    def ni_timeout(self) -> float:
        t = self.r.tunables
        return t.router_ping_timeout + max(t.alive_router_check_interval, 0)

    def tick(self, now: float) -> list[Action]:
        """``lnet_check_routers`` + the router's own NI status update (spec §6.2, §6.4)."""
        self.r.last_now = now
        _, actions = self.r.state_tick(now)
        if self.r.enabled and self.update_ni_status(now):
            # router.c lnet_check_routers: "if the status of the ni changed update the
            # peers" (lnet_push_update_to_peers(1))
            self.r.discovery.local_ni_changed(force=True)
        actions += self.r.alive.query_tick(now)
        interval = self.r.tunables.alive_router_check_interval
        for gw in self.r.table.gateways():
            if self.skip(gw, interval):
                continue
            for pn in gw.nets:
                if pn.net in self.r.nets and self.next_ping.get(pn, 0.0) <= now:
                    self.next_ping[pn] = now + (interval if interval > 0 else 60)
                    self.gw_dirty = True
                    actions += self.start_discovery(gw, pn.net, now)
                    break
        return actions

    def update_ni_status(self, now: float) -> bool:
        """``lnet_update_ni_status_locked``: silent or fatal NIs are reported DOWN. The status
        changes in place in the ping buffer (no new sequence); returns whether one changed,
        so the checker pushes the buffer to the MR peers (spec §5.1)."""
        limit = self.ni_timeout()
        changed = False
        for ni in self.r.local.local_nis():
            last = self.ni_last_alive.setdefault(ni, now)
            # the same sum as deadline(): now - last >= limit can be false at last + limit
            down = ni.fatal_error or (limit > 0 and now >= last + limit)
            if down and ni.status == LNET_NI_STATUS_UP:
                self.r.nistate.set_status(ni, LNET_NI_STATUS_DOWN)
                changed = True
        return changed

    # ------------------------------------------------------------------ the ping
    def start_discovery(self, gw: Peer, net: Net | None, now: float) -> list[Action]:
        """Ping the gateway on ``net`` (RTR_DISCOVERY, spec §6.4)."""
        if any(p.nid in self.in_discovery for p in gw.lpnis):
            return []
        nets = [pn for pn in gw.nets if pn.net in self.r.nets and pn.lpnis]
        pnet = next((pn for pn in nets if pn.net == net), nets[0] if nets else None)
        if pnet is None:
            return []
        self.in_discovery.add(gw.primary_nid)
        return self.r.discovery.start(gw, now, force_ping=True, force_push=True,
                                      rtr_net=pnet.net)

    def discovery_ping_reply(self, gw: Peer, info: PingInfo) -> list[Action]:
        """``lnet_router_discovery_ping_reply`` (spec §6.4): a gateway's ping data (peer NI
        status, MR and ROUTER_ENABLED features) and per route ``lr_single_hop``/``lr_alive``.
        Called by discovery after it merged the NIDs (002 consolidation)."""
        self.r.table.refresh_refcounts()
        status = dict(info.nis)
        for lpni in gw.lpnis:
            if lpni.nid in status:
                self.lpni_event(lpni, "ping_ni_up" if status[lpni.nid] == LNET_NI_STATUS_UP
                                else "ping_ni_down")
        if info.features & LNET_PING_FEAT_MULTI_RAIL:
            fire(gw, PeerEvent.MULTI_RAIL_ON)
        disabled = bool(info.features & LNET_PING_FEAT_RTE_DISABLED)
        effect = self.gw_event(gw, "ping_reply_rte_disabled" if disabled else "ping_reply")
        for route in self.r.table.all_routes():
            if self.r.table.gateway(route) is not gw:
                continue
            on_net = [st for nid, st in info.nis if nid.net == route.net]
            route.single_hop = bool(on_net)
            asym = self.r.tunables.avoid_asym_router_failure and (
                route.hops == 1 or route.single_hop)
            if not asym:
                self.route_event(route, "ping_no_asym")
            else:
                self.route_event(route, "ping_remote_up" if LNET_NI_STATUS_UP in on_net
                                 else "ping_remote_down")
        out: list[Action] = []
        if effect == "log_rte_disabled" and gw.rtr_refcount:
            out.append(Log(level="error", text=f"peer {gw.primary_nid} is being used as a "
                           "gateway but routing feature is not turned on"))
        # lnet_set_route_aliveness logs a change as it happens, on any discovery reply of a
        # gateway (peer.c lnet_discovery_event_reply), not only the checker's (explore 402)
        return out + self.log_route_changes("router ping")

    def consolidate(self, gw: Peer, nids: list[NID]) -> Peer:
        """Put every NID of the gateway on one peer whose primary is the first NID (002)."""
        table = self.r.peers
        if not nids:
            return gw
        local = {ni.nid for ni in self.r.local.local_nis()}
        for nid in nids:
            if nid in local:
                continue
            owner = table.find_peer(nid)
            if owner is gw:
                continue
            if owner is not None:
                old = table.by_nid[nid]
                table.del_lpni(old)
                if not owner.nets:
                    table.peers.remove(owner)
                    gw.rtrq.extend(owner.rtrq)
            lnet = self.r.nets.get(nid.net)
            new = table.add_nid(gw, nid, lnet.tunables.peer_credits if lnet else 0)
            new.last_alive = self.r.last_now
        if nids[0] not in local and table.find_peer(nids[0]) is gw:
            gw.primary_nid = nids[0]
        self.r.table.refresh_refcounts()
        return gw

    def discovery_complete(self, gw: Peer, rc: int, now: float) -> list[Action]:
        """``lnet_router_discovery_complete`` (spec §6.4); redo the parked sends (002).

        Sends parked on any NID that now belongs to ``gw`` are redone: after a merge the
        routes and sends of both former peers follow the merged gateway."""
        self.r.last_now = max(self.r.last_now, now)
        nids = {p.nid for p in gw.lpnis} | {gw.primary_nid}
        self.in_discovery -= nids
        self.discovered |= nids
        actions: list[Action] = []
        if rc != 0:
            self.gw_event(gw, "ping_failed")
            for lpni in gw.lpnis:
                self.lpni_event(lpni, "ping_failed")
            for route in self.r.table.all_routes():
                if self.r.table.gateway(route) is gw:
                    self.route_event(route, "ping_failed")
        elif not gw.alive:
            gw.alive = True  # completion without a reply handler call (no ping data)
        actions += self.log_route_changes("router ping" if rc == 0 else "router ping failed")
        # keys whose peer is gone (merged away) count as this gateway's: its NIDs moved here
        keys = [k for k in self.pending
                if (owner := self.r.peers.find_peer(k)) is gw or owner is None]
        for key in keys:
            for msg in self.pending.pop(key, []):
                msg.fire(MsgInput.READY)
                actions += self.r.sender.send(msg, now)
        return actions

    def log_route_changes(self, reason: str) -> list[Action]:
        """Console lines for route state changes ("has gone from up to down"), each also a
        ``route_state`` notice with ``reason`` (TRACE-SCHEMA)."""
        out: list[Action] = []
        for route in self.r.table.all_routes():
            up = self.r.table.route_alive(route)
            if route.shown_up is not None and route.shown_up != up:
                a, b = ("down", "up") if up else ("up", "down")
                out.append(Log(level="warning", text=f"route to {route.net} through "
                                                     f"{route.nid} has gone from {a} to {b}"))
                self.r.notices.emit("route_state", net=str(route.net), gateway=str(route.nid),
                                    state=b, reason=reason)
            route.shown_up = up
        return out
