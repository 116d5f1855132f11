"""Routing: routes, gateways, router buffers, forwarding, the router checker (spec §1.4-1.6,
§2.6, §6; seeds 001, 002, 003).

Theory of operation.
* Routes (``lnetctl route add``, spec §6.1): one list per remote net, each new route inserted
  at a random position (seeded rng, ``lnet_add_route_to_rnet``). A route names the NID it was
  added with (``lr_nid``); its gateway is always *the peer that owns that NID now*, so when
  discovery merges the peers of several NIDs of one router (seed 002 "Router Discovery") the
  routes end up on one gateway peer with no bookkeeping (``gateway()``).
* Route selection (spec §2.6, 002 "Route Selection"): alive routes only; the gateway's primary
  NID in the destination's preferred-router list (UDSP ``--rte``) wins, then lower priority,
  fewer hops (undefined = 1), then the Multi-Rail choice among the gateway's NIs on the source
  net (health, fewer queued bytes, more credits) and finally the lower ``lr_seq`` (round
  robin). A gateway peer NI below ``MAX_HEALTH * router_sensitivity / 100`` is not used (seed
  002; today's LNet ignores the percentage, docs/differences.md).
* Route aliveness (``lnet_is_route_alive``, spec §6.3 + seed 002): gateway alive, routing
  enabled on it (no RTE_DISABLED in its ping), a usable gateway NI on the route's local net,
  and with ``avoid_asym_router_failure`` for single-hop routes an UP NI on the remote net.
* Gateway discovery on first use (002) and the router checker (spec §6.4): a gateway is pinged
  on one of its local nets every ``alive_router_check_interval`` (and at once after a route
  add); the REPLY's NI list and statuses update the gateway peer (consolidating NIDs, peer NI
  status) and the routes (``lr_single_hop``, ``lr_alive``); failure marks the gateway down.
  When the discovery module offers ``start(..., rtr_net=)`` it does the ping and calls
  ``discovery_complete``; otherwise the checker's own ping (the pre-LU-11299 pinger) is used.
  A send whose only routes wait for their gateway's first discovery is parked and redone when
  it completes.
* Forwarding on a router (seed 001, spec §1.5/§1.6/§6.6): a message for another node takes a
  router credit of the sending peer NI (``lpni_rtrcredits``, queued FIFO on the peer's
  ``rtrq``), then a buffer from the smallest pool that fits (tiny/small/large, queued FIFO on
  the pool), is sent on with full reselection (resends may pick another NI or gateway, seed
  003) and gives both back when that send finalizes. Routers never drop on deadline; a next
  hop marked down is dropped (REMOTE_DROPPED, -EHOSTUNREACH) when peer aliveness applies.
* Routing state (spec §6.2): DISABLED -> STARTING (``set routing 1``: forwarding at once, the
  ping keeps RTE_DISABLED for alive_router_check_interval + router_ping_timeout) -> ENABLED;
  ``set routing 0`` -> STOPPING (RTE_DISABLED at once; disabled once the pools are idle after
  that delay, at most three times it). Module parameter ``forwarding=1`` -> ENABLED at once.
  On a router, an NI that receives nothing for router_ping_timeout +
  alive_router_check_interval, or whose link is fatal, is reported DOWN in the ping buffer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodes.lnet.actions import Action, Log
from nodes.lnet.errors import EEXIST, EHOSTUNREACH, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.hstatus import HStatus
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP
from nodes.lnet.nid import LNET_NID_ANY, LO_NET, NID, Net
from nodes.lnet.peer import LNET_PEER_MULTI_RAIL, LNET_PEER_ROUTER_ENABLED
from nodes.lnet.select import SelectError, best_ni
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import MD, Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import Peer, PeerNet, PeerNI

LNET_UNDEFINED_HOPS = 0xFFFF_FFFF
PAGE_SIZE = 4096
#: (name, npages) of the three router buffer pools (spec §1.6)
POOLS = (("tiny", 0), ("small", 1), ("large", LNET_MTU // PAGE_SIZE))
ROUTING_DISABLED, ROUTING_STARTING, ROUTING_ENABLED, ROUTING_STOPPING = range(4)
#: tunables (module parameters) this module reacts to
ROUTER_PARAMS = ("routing", "forwarding", "tiny_buffers", "small_buffers", "large_buffers")


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
    alive: bool = True          # lr_alive, from the last ping reply
    single_hop: bool = False    # lr_single_hop, learnt from the gateway's ping
    shown_up: bool | None = None  # last state logged ("has gone from up to down")

    @property
    def hops_cmp(self) -> int:
        return 1 if self.hops == LNET_UNDEFINED_HOPS else self.hops


@dataclass(eq=False, slots=True)
class BufferPool:
    """``lnet_rtrbufpool``: ``credits`` may go negative; waiters queue FIFO in ``msgs``."""

    name: str
    npages: int
    nbuffers: int
    credits: int
    mincredits: int
    msgs: deque[Msg] = field(default_factory=deque)

    def show(self) -> dict[str, int]:
        return {"npages": self.npages, "nbuffers": self.nbuffers, "credits": self.credits,
                "mincredits": self.mincredits}


class Router:
    """Routing state of one node; ``eng.router``."""

    def __init__(self, eng: LNetEngine) -> None:
        self.eng = eng
        self.routes: dict[Net, list[Route]] = {}
        self.pools: list[BufferPool] | None = None
        self.state = ROUTING_DISABLED
        self.state_at = 0.0          # when STARTING/STOPPING ends (at the earliest)
        self.stop_limit = 0.0
        self.pending: dict[Peer, list[Msg]] = {}   # sends parked on a gateway's discovery
        self.in_discovery: set[Peer] = set()       # LNET_PEER_RTR_DISCOVERY
        self.discovered: set[Peer] = set()         # LNET_PEER_RTR_DISCOVERED
        self.next_ping: dict[PeerNet, float] = {}  # lpn_next_ping
        self.ni_last_alive: dict[LNetNI, float] = {}
        self.last_now = 0.0

    # ------------------------------------------------------------------ queries
    @property
    def enabled(self) -> bool:
        """``lnet_routing_enabled``: forwarding in every state but DISABLED (spec §6.2)."""
        return self.state != ROUTING_DISABLED

    def rte_disabled(self) -> bool:
        """Whether our ping buffer carries LNET_PING_FEAT_RTE_DISABLED (spec §6.2)."""
        return self.state != ROUTING_ENABLED

    def gateway(self, route: Route) -> Peer | None:
        return self.eng.peers.find_peer(route.nid)

    def all_routes(self) -> list[Route]:
        return [r for rs in self.routes.values() for r in rs]

    def gateways(self) -> list[Peer]:
        out: list[Peer] = []
        for r in self.all_routes():
            gw = self.gateway(r)
            if gw is not None and gw not in out:
                out.append(gw)
        return out

    def refresh_refcounts(self) -> None:
        """``lp_rtr_refcount``: routes using each peer as gateway (after add/del/merge)."""
        gws = [self.gateway(r) for r in self.all_routes()]
        for peer in self.eng.peers.peers:
            peer.rtr_refcount = sum(1 for g in gws if g is peer)

    def threshold(self) -> int:
        """Seed 002: a gateway peer NI below MAX_HEALTH * router_sensitivity % is not used."""
        return LNET_MAX_HEALTH_VALUE * self.eng.tunables.router_sensitivity // 100

    def lpni_usable(self, lpni: PeerNI) -> bool:
        return lpni.ns_status == LNET_NI_STATUS_UP and lpni.healthv >= self.threshold()

    def route_alive(self, route: Route) -> bool:
        """``lnet_is_route_alive`` (spec §6.3) with seed 002's health threshold."""
        gw = self.gateway(route)
        if gw is None or not gw.alive or not gw.state & LNET_PEER_ROUTER_ENABLED:
            return False
        llpn = gw.peer_net(route.lnet)
        if llpn is None or not any(self.lpni_usable(p) for p in llpn.lpnis):
            return False
        if self.eng.tunables.avoid_asym_router_failure and (route.hops == 1 or
                                                            route.single_hop):
            rlpn = gw.peer_net(route.net)
            if rlpn is None or not any(p.ns_status == LNET_NI_STATUS_UP for p in rlpn.lpnis):
                return False
        return route.alive

    # ------------------------------------------------------------------ DLC: routes
    def add(self, net: Net, gateway: NID, hops: int | None, priority: int,
            now: float) -> list[Action]:
        """``lnet_add_route`` with the kernel's checks (spec §6.1); raises LNetConfigError."""
        eng = self.eng
        eng._require_up()
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
            lpni = eng.peers.traffic_add(gateway, eng.nets[gateway.net].tunables.peer_credits)
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
            self.next_ping[pnet] = now
        logs: list[Action] = []
        if eng.tunables.avoid_asym_router_failure and hops is None:
            logs.append(Log(level="warning", text="Use hops = 1 for a single-hop route when "
                            "avoid_asym_router_failure feature is enabled"))
        return logs

    def delete(self, net: Net | None, gateway: NID | None) -> None:
        """``lnet_del_route``: routes to ``net`` (all nets if None) via ``gateway``'s peer."""
        self.eng._require_up()
        gw = self.eng.peers.find_peer(gateway) if gateway is not None else None
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

    # ------------------------------------------------------------------ routing state
    def on_tunable(self, name: str, value: int, now: float | None) -> list[Action]:
        """``set routing|forwarding|*_buffers`` (spec §6.2, §1.6)."""
        t = now if now is not None else self.last_now
        if name == "forwarding":
            return self._enable(t, immediate=True) if value else self._disable(t)
        if name == "routing":
            return self._enable(t, immediate=False) if value else self._disable(t)
        if self.pools is not None:
            idx = {"tiny_buffers": 0, "small_buffers": 1, "large_buffers": 2}[name]
            pool = self.pools[idx]
            delta = value - pool.nbuffers
            pool.nbuffers = value
            actions: list[Action] = []
            if delta < 0:
                pool.credits += delta  # shrinking is lazy: fewer buffers come back
                pool.mincredits = min(pool.mincredits, pool.credits)
            for _ in range(max(delta, 0)):  # each new buffer is a returned credit
                pool.credits += 1
                if pool.credits <= 0 and pool.msgs:
                    actions += self._forward_send(pool.msgs.popleft(), t)
            return actions
        return []

    def _alloc_pools(self) -> None:
        if self.pools is None:
            t = self.eng.tunables
            sizes = (t.tiny_buffers, t.small_buffers, t.large_buffers)
            self.pools = [BufferPool(name, npages, n, n, n)
                          for (name, npages), n in zip(POOLS, sizes, strict=True)]

    def _enable(self, now: float, *, immediate: bool) -> list[Action]:
        self._alloc_pools()
        for ni in self.eng.local_nis():
            self.ni_last_alive[ni] = now
        if immediate:
            self.state = ROUTING_ENABLED
            self.eng.tunables.routing = 1
            self.eng._ping_changed()
            return []
        if self.state == ROUTING_ENABLED:
            return []
        delay = self._grace()
        self.state, self.state_at = ROUTING_STARTING, now + delay
        return [Log(level="warning", text=f"Message forwarding will be enabled in {delay}s")]

    def _disable(self, now: float) -> list[Action]:
        if self.state == ROUTING_DISABLED:
            return []
        delay = self._grace()
        self.state, self.state_at, self.stop_limit = ROUTING_STOPPING, now + delay, \
            now + 3 * delay
        self.eng._ping_changed()
        return [Log(level="warning", text=f"Message forwarding will be disabled in {delay}s")]

    def _grace(self) -> int:
        t = self.eng.tunables
        return max(t.alive_router_check_interval, 0) + t.router_ping_timeout

    def _pools_idle(self) -> bool:
        return all(p.credits == p.nbuffers and not p.msgs for p in self.pools or [])

    # ------------------------------------------------------------------ route selection
    def is_remote(self, lpni: PeerNI, src: LNetNI | None, msg: Msg) -> bool:
        """REMOTE_DST classification (spec §2.2 step 6)."""
        nets = self.eng.nets
        if src is not None:
            return src.net.net != lpni.nid.net
        if msg.extra.get("forwarding") or msg.recovery or msg.is_response \
                or not lpni.peer.multi_rail:
            return lpni.nid.net not in nets
        return not any(pn.net in nets and nets[pn.net].nis and pn.lpnis
                       for pn in lpni.peer.nets)

    def find_routed_path(self, msg: Msg, lpni: PeerNI,
                         src: LNetNI | None) -> tuple[LNetNI, PeerNI]:
        """``lnet_handle_find_routed_path`` (spec §2.6); raises SelectError or RouteWait."""
        eng = self.eng
        rtr = msg.rtr_nid_param
        if rtr is not None and msg.is_response:
            gw_lpni = eng.peers.find_lpni(rtr)
            if gw_lpni is not None and gw_lpni.peer.rtr_refcount > 0 and (
                    src is None or src.net.net == gw_lpni.nid.net):
                ni = src or best_ni(eng.nets[gw_lpni.nid.net], msg.md_cpt,
                                    eng.tunables.numa_range)
                if ni is not None:
                    msg.extra["rt_dst"] = lpni.nid
                    return ni, gw_lpni
        dst = lpni
        if src is None and not msg.extra.get("forwarding") and lpni.peer.multi_rail \
                and not msg.is_response:
            dst = self._best_remote_lpni(lpni)
        routes = self.routes.get(dst.nid.net)
        if not routes:
            raise SelectError(-EHOSTUNREACH, f"no route to {dst.nid}: Route table may be "
                                             "misconfigured")
        src_net = src.net.net if src is not None else None
        choice = self._find_route(routes, src_net, dst)
        if choice is None:
            waiting = [g for r in routes if (g := self.gateway(r)) is not None
                       and g not in self.discovered and g.alive
                       and (src_net is None or g.peer_net(src_net) is not None)]
            if waiting and not msg.recovery:
                raise RouteWait(waiting)
            raise SelectError(-EHOSTUNREACH, f"no route to {dst.nid} from "
                                             f"{src.nid if src else 'any'}")
        route, gw_lpni = choice
        alive = [r for r in routes if self.route_alive(r)]
        route.seq = max(r.seq for r in alive) + 1
        ni = src or best_ni(eng.nets[gw_lpni.nid.net], msg.md_cpt, eng.tunables.numa_range)
        assert ni is not None
        msg.extra["rt_dst"] = dst.nid
        dst.peer.send_seq += 1  # the final destination's stamps move too (spec §2.7)
        dst.peer_net.seq = dst.seq = dst.peer.send_seq
        return ni, gw_lpni

    def _best_remote_lpni(self, lpni: PeerNI) -> PeerNI:
        """SRC_ANY request to an MR peer: its net that has routes, then its best NI there."""
        pnets = [pn for pn in lpni.peer.nets if pn.net in self.routes and pn.lpnis]
        if not pnets:
            return lpni
        pn = min(pnets, key=lambda p: (-p.healthv, p.sel_priority, p.seq))
        return min(pn.lpnis, key=lambda p: (-p.healthv, p.sel_priority, -p.tx_credits, p.seq))

    def _gw_lpni(self, gw: Peer, net: Net) -> PeerNI | None:
        """The gateway's best usable NI on ``net`` (``lnet_find_best_lpni``, seed 002)."""
        pnet = gw.peer_net(net)
        if pnet is None:
            return None
        cands = [p for p in pnet.lpnis if self.lpni_usable(p)]
        if not cands:
            return None
        return min(cands, key=lambda p: (-p.healthv, p.sel_priority, -p.tx_credits, p.seq))

    def _find_route(self, routes: list[Route], src_net: Net | None,
                    dst: PeerNI) -> tuple[Route, PeerNI] | None:
        """``lnet_find_route_locked`` (spec §2.6 step 3, 002 "Route Selection")."""
        best: tuple[Route, PeerNI] | None = None
        best_key: tuple[int, ...] | None = None
        for route in routes:
            if not self.route_alive(route):
                continue
            gw = self.gateway(route)
            assert gw is not None
            net = src_net if src_net is not None else route.lnet
            if net not in self.eng.nets:
                continue
            gw_lpni = self._gw_lpni(gw, net)
            if gw_lpni is None:
                continue
            pref = 0 if gw.primary_nid in dst.rtr_pref_nids or any(
                p.nid in dst.rtr_pref_nids for p in gw.lpnis) else 1
            key = (pref, route.priority, route.hops_cmp, -gw_lpni.healthv, gw_lpni.txqnob,
                   -gw_lpni.tx_credits, route.seq)
            if best_key is None or key <= best_key:  # equal: the later route wins
                best, best_key = (route, gw_lpni), key
        return best

    def park(self, msg: Msg, wait: RouteWait, now: float) -> list[Action]:
        """Queue ``msg`` until a gateway's discovery completes (002: discovery on first use)."""
        gw = wait.gateways[0]
        self.pending.setdefault(gw, []).append(msg)
        actions: list[Action] = []
        for g in wait.gateways:
            actions += self._start_discovery(g, None, now)
        return actions

    # ------------------------------------------------------------------ router checker
    def deadline(self) -> float | None:
        """Next time the checker has work: a gateway ping, a state change, an NI timeout."""
        times: list[float] = []
        interval = self.eng.tunables.alive_router_check_interval
        if interval > 0 or any(g not in self.discovered for g in self.gateways()):
            for gw in self.gateways():
                if gw in self.in_discovery or (interval <= 0 and gw in self.discovered):
                    continue
                for pn in gw.nets:
                    if pn.net in self.eng.nets:
                        times.append(self.next_ping.get(pn, 0.0))
        if self.state == ROUTING_STARTING:
            times.append(self.state_at)
        elif self.state == ROUTING_STOPPING:  # then once a second until the pools are idle
            times.append(max(self.state_at, self.last_now + 1.0))
        if self.enabled:
            limit = self._ni_timeout()
            nis = self.eng.local_nis()
            times += [t + limit for ni, t in self.ni_last_alive.items()
                      if ni in nis and ni.status == LNET_NI_STATUS_UP and limit > 0]
            times += [self.last_now + 1.0 for ni in self.eng.local_nis()
                      if ni.fatal_error and ni.status == LNET_NI_STATUS_UP]
        if not times:
            return None
        return max(min(times), self.last_now)

    def _ni_timeout(self) -> float:
        t = self.eng.tunables
        return t.router_ping_timeout + max(t.alive_router_check_interval, 0)

    def tick(self, now: float) -> list[Action]:
        """``lnet_check_routers`` + the router's own NI status update (spec §6.2, §6.4)."""
        self.last_now = now
        actions: list[Action] = []
        if self.state == ROUTING_STARTING and now >= self.state_at:
            self.state = ROUTING_ENABLED
            self.eng._ping_changed()
            actions.append(Log(level="warning", text="Message forwarding enabled"))
        if self.state == ROUTING_STOPPING and now >= self.state_at and (
                self._pools_idle() or now >= self.stop_limit):
            actions += self._stop(now)
        if self.enabled:
            self._update_ni_status(now)
        interval = self.eng.tunables.alive_router_check_interval
        for gw in self.gateways():
            if gw in self.in_discovery or (interval <= 0 and gw in self.discovered):
                continue
            for pn in gw.nets:
                if pn.net in self.eng.nets and self.next_ping.get(pn, 0.0) <= now:
                    self.next_ping[pn] = now + (interval if interval > 0 else 60)
                    actions += self._start_discovery(gw, pn.net, now)
                    break
        return actions

    def _stop(self, now: float) -> list[Action]:
        self.state = ROUTING_DISABLED
        self.eng.tunables.routing = 0
        actions: list[Action] = [Log(level="warning", text="Message forwarding disabled")]
        for pool in self.pools or []:
            while pool.msgs:
                msg = pool.msgs.popleft()
                pool.credits += 1
                actions += self._drop_forward(msg, now, "routing disabled")
        return actions

    def _update_ni_status(self, now: float) -> None:
        """``lnet_update_ni_status_locked``: silent or fatal NIs are reported DOWN."""
        limit = self._ni_timeout()
        changed = False
        for ni in self.eng.local_nis():
            last = self.ni_last_alive.setdefault(ni, now)
            down = ni.fatal_error or (limit > 0 and now - last >= limit)
            if down and ni.status == LNET_NI_STATUS_UP:
                ni.status = LNET_NI_STATUS_DOWN
                changed = True
        if changed:
            self.eng._ping_changed()

    def _start_discovery(self, gw: Peer, net: Net | None, now: float) -> list[Action]:
        """Ping the gateway on ``net`` (RTR_DISCOVERY, spec §6.4)."""
        if gw in self.in_discovery:
            return []
        nets = [pn for pn in gw.nets if pn.net in self.eng.nets and pn.lpnis]
        pnet = next((pn for pn in nets if pn.net == net), nets[0] if nets else None)
        if pnet is None:
            return []
        self.in_discovery.add(gw)
        try:
            from nodes.lnet import discovery  # the discovery developer's entry point
        except ImportError:
            discovery = None  # type: ignore[assignment]
        start = getattr(discovery, "start", None)
        if start is not None:
            try:
                return list(start(self.eng, gw, now, force_ping=True, force_push=True,
                                  rtr_net=pnet.net) or [])
            except TypeError:
                pass
        target = min(pnet.lpnis, key=lambda p: (-p.healthv, p.seq))
        _h, actions = self.eng.get(now, target.nid, length=16 + 16 * 17, portal=0,
                                   match_bits=1 << 63, recovery=True,
                                   timeout=float(max(self.eng.tunables.router_ping_timeout, 1)),
                                   owner=("rtr", target.nid))
        return actions

    def on_md_event(self, md: MD, kind: str, status: int, payload: bytes) -> list[Action]:
        """The checker's own router ping finished (``lnet_router_discovery_ping_reply``)."""
        assert md.owner is not None
        gw = self.eng.peers.find_peer(md.owner[1])
        if gw is None or (kind == "SEND" and status == 0):
            return []
        now = self.last_now
        if kind == "REPLY" and status == 0:
            from nodes.lnet.ping import PingInfo

            try:
                info = PingInfo.unpack(payload)
            except Exception as e:  # a bad reply counts as a failed discovery
                return [Log(level="error", text=f"bad ping reply from {gw.primary_nid}: {e}"),
                        *self.discovery_complete(gw, -EINVAL, now)]
            gw = self._consolidate(gw, [nid for nid, _ in info.nis])
            return [*self.discovery_ping_reply(gw, info),
                    *self.discovery_complete(gw, 0, now)]
        return self.discovery_complete(gw, status or -EHOSTUNREACH, now)

    def discovery_ping_reply(self, gw: Peer, info: Any) -> list[Action]:
        """``lnet_router_discovery_ping_reply`` (spec §6.4): a gateway's ping data (peer NI
        status, MR and ROUTER_ENABLED features) and per route ``lr_single_hop``/``lr_alive``.
        Called by discovery after it merged the NIDs (002 consolidation), or by our pinger."""
        from nodes.lnet.ping import LNET_PING_FEAT_MULTI_RAIL, LNET_PING_FEAT_RTE_DISABLED

        self.refresh_refcounts()
        status = dict(info.nis)
        for lpni in gw.lpnis:
            if lpni.nid in status:
                lpni.ns_status = status[lpni.nid]
        if info.features & LNET_PING_FEAT_MULTI_RAIL:
            gw.state |= LNET_PEER_MULTI_RAIL
        if info.features & LNET_PING_FEAT_RTE_DISABLED:
            gw.state &= ~LNET_PEER_ROUTER_ENABLED
        else:
            gw.state |= LNET_PEER_ROUTER_ENABLED
        for route in self.all_routes():
            if self.gateway(route) is not gw:
                continue
            on_net = [st for nid, st in info.nis if nid.net == route.net]
            route.single_hop = bool(on_net)
            asym = self.eng.tunables.avoid_asym_router_failure and (
                route.hops == 1 or route.single_hop)
            route.alive = LNET_NI_STATUS_UP in on_net if asym else True
        if info.features & LNET_PING_FEAT_RTE_DISABLED and gw.rtr_refcount:
            return [Log(level="error", text=f"peer {gw.primary_nid} is being used as a "
                        "gateway but routing feature is not turned on")]
        return []

    def _consolidate(self, gw: Peer, nids: list[NID]) -> Peer:
        """Put every NID of the gateway on one peer whose primary is the first NID (002)."""
        table = self.eng.peers
        if not nids:
            return gw
        local = {ni.nid for ni in self.eng.local_nis()}
        for nid in nids:
            if nid in local:
                continue
            owner = table.find_peer(nid)
            if owner is gw:
                continue
            if owner is not None:
                old = table.by_nid[nid]
                table._del_lpni(old)
                if not owner.nets:
                    table.peers.remove(owner)
                    self._move_state(owner, gw)
            lnet = self.eng.nets.get(nid.net)
            new = table._add_nid(gw, nid, lnet.tunables.peer_credits if lnet else 0)
            new.last_alive = self.last_now
        if nids[0] not in local and table.find_peer(nids[0]) is gw:
            gw.primary_nid = nids[0]
        self.refresh_refcounts()
        return gw

    def _move_state(self, old: Peer, new: Peer) -> None:
        self.pending.setdefault(new, []).extend(self.pending.pop(old, []))
        self.in_discovery.discard(old)
        self.discovered.discard(old)
        new.rtrq.extend(old.rtrq)

    def discovery_complete(self, gw: Peer, rc: int, now: float) -> list[Action]:
        """``lnet_router_discovery_complete`` (spec §6.4); redo the parked sends (002)."""
        from nodes.lnet import send

        self.last_now = max(self.last_now, now)
        self.in_discovery.discard(gw)
        self.discovered.add(gw)
        gw.alive = rc == 0
        actions: list[Action] = []
        if rc != 0:
            for lpni in gw.lpnis:
                lpni.ns_status = LNET_NI_STATUS_DOWN
            for route in self.all_routes():
                if self.gateway(route) is gw:
                    route.alive = False
        actions += self.log_route_changes()
        for msg in self.pending.pop(gw, []):
            actions += send.send(self.eng, msg, now)
        return actions

    def log_route_changes(self) -> list[Action]:
        """Console lines for route state changes ("has gone from up to down")."""
        out: list[Action] = []
        for route in self.all_routes():
            up = self.route_alive(route)
            if route.shown_up is not None and route.shown_up != up:
                a, b = ("down", "up") if up else ("up", "down")
                out.append(Log(level="warning", text=f"route to {route.net} through "
                                                     f"{route.nid} has gone from {a} to {b}"))
            route.shown_up = up
        return out

    # ------------------------------------------------------------------ receive side
    def on_rx(self, ni: LNetNI, lpni: PeerNI, src: NID, now: float) -> str | None:
        """Every received message (spec §4.2 step 4, §6.5); returns a drop reason or None."""
        self.last_now = max(self.last_now, now)
        lpni.ns_status = LNET_NI_STATUS_UP
        if self.enabled:
            self.ni_last_alive[ni] = now
            if ni.status != LNET_NI_STATUS_UP and not ni.fatal_error \
                    and ni.healthv == LNET_MAX_HEALTH_VALUE:
                ni.status = LNET_NI_STATUS_UP
                self.eng._ping_changed()
        if src.net == lpni.nid.net or self.eng.ni_by_nid(src) is not None:
            return None
        gw = lpni.peer
        if self.eng.tunables.drop_asym_route and not any(
                self.gateway(r) is gw for r in self.routes.get(src.net, [])):
            return f"Dropping asymmetrical route from {src} through {lpni.nid}"
        if not gw.alive and gw.rtr_refcount > 0:
            gw.alive = True
            for p in gw.lpnis:
                if p.nid.net == src.net:
                    p.ns_status = LNET_NI_STATUS_UP
        return None

    def forward(self, ni: LNetNI, lpni: PeerNI, hdr: Any, payload: bytes,
                now: float) -> list[Action]:
        """A message for another node arrived on a router (seed 001, spec §1.5, §6.6)."""
        from nodes.lnet.msg import Msg

        eng = self.eng
        msg = Msg(eng.new_id(), hdr.type, hdr, payload, final_dst=hdr.dest_nid)
        msg.extra["forwarding"] = True
        msg.rxni, msg.rxpeer = ni, lpni
        eng.counters.msg_alloc()
        msg.extra["rtr_credit"] = True
        lpni.rtr_credits -= 1
        lpni.min_rtr_credits = min(lpni.min_rtr_credits, lpni.rtr_credits)
        if lpni.rtr_credits < 0:
            lpni.peer.rtrq.append(msg)  # wait for a router credit (lp_rtrq)
            return []
        return self._take_buffer(msg, now)

    def pool_for(self, nob: int) -> BufferPool:
        """``lnet_msg2bufpool``: the smallest pool whose buffers hold the payload."""
        assert self.pools is not None
        for pool in self.pools:
            if pool.npages * PAGE_SIZE >= nob:
                return pool
        return self.pools[-1]

    def _take_buffer(self, msg: Msg, now: float) -> list[Action]:
        if self.pools is None:
            self._alloc_pools()
        pool = self.pool_for(msg.nob)
        msg.extra["rtr_pool"] = pool
        pool.credits -= 1
        pool.mincredits = min(pool.mincredits, pool.credits)
        if pool.credits < 0:
            pool.msgs.append(msg)  # wait for a buffer (rbp_msgs), FIFO
            return []
        return self._forward_send(msg, now)

    def _forward_send(self, msg: Msg, now: float) -> list[Action]:
        from nodes.lnet import send

        self.eng.counters.bump("route_count")
        self.eng.counters.bump("route_length", msg.nob)
        return send.send(self.eng, msg, now)

    def _drop_forward(self, msg: Msg, now: float, why: str) -> list[Action]:
        self.eng.counters.bump("drop_count")
        self.eng.counters.bump("drop_length", msg.nob)
        self.eng.counters.msg_free()
        return [Log(level="info", text=f"dropping routed {msg.type.name} to {msg.final_dst}: "
                                       f"{why}"), *self.return_rx_credits(msg, now)]

    def return_rx_credits(self, msg: Msg, now: float) -> list[Action]:
        """``lnet_return_rx_credits_locked``: buffer, then router credit; wake the next."""
        actions: list[Action] = []
        pool = msg.extra.pop("rtr_pool", None)
        if isinstance(pool, BufferPool):
            pool.credits += 1
            if pool.credits <= 0 and pool.msgs:
                actions += self._forward_send(pool.msgs.popleft(), now)
        if msg.extra.pop("rtr_credit", False) and msg.rxpeer is not None:
            lpni = msg.rxpeer
            lpni.rtr_credits += 1
            if lpni.rtr_credits <= 0 and lpni.peer.rtrq:
                actions += self._take_buffer(lpni.peer.rtrq.popleft(), now)
        return actions

    def next_hop_dead(self, msg: Msg, lpni: PeerNI) -> bool:
        """Peer aliveness on a router (spec §1.5 step 1): forwarding to a DOWN peer NI."""
        if not self.enabled or msg.recovery or not msg.extra.get("forwarding"):
            return False
        lnet = self.eng.nets.get(lpni.nid.net)
        return bool(lnet and lnet.tunables.peer_timeout > 0
                    and lpni.ns_status != LNET_NI_STATUS_UP)

    def tx_failed(self, lpni: PeerNI, hstatus: HStatus) -> None:
        """LND "peer down" (``lnet_notify``): gateway peer NIs and, on routers, any peer NI."""
        if hstatus in (HStatus.REMOTE_DROPPED, HStatus.NETWORK_TIMEOUT) and (
                self.enabled or lpni.peer.rtr_refcount > 0):
            lpni.ns_status = LNET_NI_STATUS_DOWN

    # ------------------------------------------------------------------ views (spec §9.3)
    def route_show(self, net: str | None = None, gateway: str | None = None,
                   hop: int | None = None, priority: int | None = None,
                   verbose: int = 0) -> dict[str, Any]:
        out = []
        want_net = Net.parse(net) if net else None
        want_gw = NID.parse(gateway) if gateway else None
        gw_peer = self.eng.peers.find_peer(want_gw) if want_gw else None
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

    def routing_show(self) -> dict[str, Any]:
        """``lnetctl routing show``: nothing until the pools have been allocated."""
        if self.pools is None:
            return {}
        t = self.eng.tunables
        cpt = {p.name: p.show() for p in self.pools}
        return {"routing": [{"cpt[0]": cpt}, {"enable": int(self.enabled)}],
                "buffers": {"tiny": t.tiny_buffers, "small": t.small_buffers,
                            "large": t.large_buffers}}


def lpni_state(eng: LNetEngine, lpni: PeerNI) -> str:
    """Peer NI ``state``: up/down for gateways or when peer aliveness applies, else NA."""
    if lpni.peer.rtr_refcount > 0 or eng.router.enabled:
        return "up" if lpni.ns_status == LNET_NI_STATUS_UP else "down"
    return "NA"
