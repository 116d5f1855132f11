"""Routing of one node: the ``Router`` object (spec §1.4-1.6, §2.6, §6; seeds 001, 002).

Theory of operation. ``Router`` is one object; what it does is split by concept into parts
it owns, each holding its own state and reaching the others through the router:

* ``table``   (``route.py``)    -- route table, route aliveness (spec §6.1, §6.3);
* ``path``    (``routesel.py``) -- route selection over the table (spec §2.6; no state);
* ``fwd``     (``rtrpool.py``)  -- forwarding: router credits, buffer pools, MR final hop
  (spec §1.5/1.6);
* ``checker`` (``rtrcheck.py``) -- the router checker: gateway pings and replies, router NI
  status (§6.4);
* ``alive``   (``rtralive.py``) -- ``lnet_notify`` from the LND, rx aliveness, next-hop
  aliveness and the LNet -> LND "peer NI dead" call (seed 001/002);
* ``rtrstate.py``               -- the transition tables of peer NI, gateway and route
  aliveness.

The router itself keeps the routing state machine (spec §6.2): DISABLED -> STARTING (``set
routing 1``: forwarding at once, the ping keeps RTE_DISABLED for alive_router_check_interval
+ router_ping_timeout) -> ENABLED; ``set routing 0`` -> STOPPING (RTE_DISABLED at once;
disabled once the pools are idle after that delay, at most three times it). Module parameter
``forwarding=1`` -> ENABLED at once. Each change of routing state raises a ``routing``
notice, each change of a route's usability a ``route_state`` notice (TRACE-SCHEMA).

Its timer is derived from state it shares with other components (a gateway's peer nets grow
when discovery merges peers; local NI status and link state), so the engine asks
``deadline()`` whenever it needs the next deadline, only while routing is in use
(``active``): a node with no routes that does not route pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from nodes.lnet.actions import Action, Log
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.errors import ENODEV, LNetConfigError
from nodes.lnet.ni import LNET_NI_STATUS_UP, LNetNet
from nodes.lnet.nid import NID, Net
from nodes.lnet.node import NodeState
from nodes.lnet.notify import Notices
from nodes.lnet.peer import Peer, PeerNI, PeerTable
from nodes.lnet.route import LNET_UNDEFINED_HOPS, Route, RouteTable, RouteWait
from nodes.lnet.routesel import RouteSelector
from nodes.lnet.rtralive import RouterAliveness
from nodes.lnet.rtrcheck import RouterChecker
from nodes.lnet.rtrpool import PAGE_SIZE, POOL_PARAMS, POOLS, BufferPool, RouterPools
from nodes.lnet.tunables import Tunables

if TYPE_CHECKING:
    import random

    from nodes.lnet.discovery import Discovery
    from nodes.lnet.health import Health
    from nodes.lnet.msg import Msg
    from nodes.lnet.nets import LocalNets
    from nodes.lnet.nistate import NIState
    from nodes.lnet.send import Sender

__all__ = ["LNET_UNDEFINED_HOPS", "PAGE_SIZE", "POOLS", "ROUTER_PARAMS", "ROUTING_DISABLED",
           "ROUTING_ENABLED", "ROUTING_STARTING", "ROUTING_STOPPING", "BufferPool", "Route",
           "RouteWait", "Router", "lpni_state"]

ROUTING_DISABLED: Final = 0
ROUTING_STARTING: Final = 1
ROUTING_ENABLED: Final = 2
ROUTING_STOPPING: Final = 3
#: tunables (module parameters) this module reacts to
ROUTER_PARAMS = ("routing", "forwarding", *POOL_PARAMS)
#: sends a GET: the engine's ``get`` (router queries, rtr-router-query-down)
GetFn = Callable[..., tuple[int, list[Action]]]


class Router:
    """Routing state of one node (``LNetEngine.router``)."""

    def __init__(self, *, node: NodeState, tunables: Tunables, peers: PeerTable,
                 local: LocalNets, counters: GlobalCounters, notices: Notices,
                 nistate: NIState, health: Health, rng: random.Random,
                 ids: Iterator[int]) -> None:
        self.node = node
        self.tunables = tunables
        self.peers = peers
        self.local = local
        self.counters = counters
        self.notices = notices
        self.nistate = nistate
        self.health = health
        self.rng = rng
        self.ids = ids
        # wired by the engine (built after the router)
        self.sender_ref: Sender | None = None
        self.discovery_ref: Discovery | None = None
        self.get: GetFn = lambda *a, **kw: (0, [])
        self.ping_changed: Callable[[], None] = lambda: None
        self.state = ROUTING_DISABLED
        self.state_at = 0.0          # when STARTING/STOPPING ends (at the earliest)
        self.stop_limit = 0.0
        self.last_now = 0.0
        self.table = RouteTable(self)
        self.path = RouteSelector(self)  # stateless: reads the table of the moment
        self.fwd = RouterPools(self)
        self.checker = RouterChecker(self)
        self.alive = RouterAliveness(self)

    # ------------------------------------------------------------------ collaborators
    @property
    def sender(self) -> Sender:
        assert self.sender_ref is not None
        return self.sender_ref

    @property
    def discovery(self) -> Discovery:
        assert self.discovery_ref is not None
        return self.discovery_ref

    @property
    def nets(self) -> dict[Net, LNetNet]:
        return self.local.nets

    def require_up(self) -> None:
        if not self.node.configured:
            raise LNetConfigError(-ENODEV, "LNet is not configured")  # lnetctl: No such device

    def clear(self) -> None:
        """``unconfigure``: a fresh router (routes, pools, checker and aliveness state)."""
        self.state, self.state_at, self.stop_limit, self.last_now = ROUTING_DISABLED, 0.0, \
            0.0, 0.0
        self.table = RouteTable(self)
        self.fwd = RouterPools(self)
        self.checker = RouterChecker(self)
        self.alive = RouterAliveness(self)

    # ------------------------------------------------------------------ the public face
    @property
    def active(self) -> bool:
        """Routing is in use: routes, a routing state, or down peer NIs to query."""
        return bool(self.table.routes) or self.state != ROUTING_DISABLED \
            or bool(self.alive.query_wanted)

    def deadline(self) -> float | None:
        return self.checker.deadline() if self.active else None

    @property
    def pending(self) -> dict[NID, list[Msg]]:
        return self.checker.pending

    @property
    def discovered(self) -> set[NID]:
        return self.checker.discovered

    def add(self, net: Net, gateway: NID, hops: int | None, priority: int,
            now: float) -> list[Action]:
        return self.table.add(net, gateway, hops, priority, now)

    def delete(self, net: Net | None, gateway: NID | None) -> None:
        self.table.delete(net, gateway)

    def all_routes(self) -> list[Route]:
        return self.table.all_routes()

    def route_alive(self, route: Route) -> bool:
        return self.table.route_alive(route)

    def gateways(self) -> list[Peer]:
        """Every gateway peer of the route table, once each (the recorder samples them)."""
        return self.table.gateways()

    def route_show(self, net: str | None = None, gateway: str | None = None,
                   hop: int | None = None, priority: int | None = None,
                   verbose: int = 0) -> dict[str, Any]:
        return self.table.route_show(net, gateway, hop, priority, verbose)

    def routing_show(self) -> dict[str, Any]:
        return self.fwd.routing_show()

    def health_fell(self, lpni: PeerNI, before: int) -> list[Action]:
        return self.alive.health_fell(lpni, before)

    @property
    def enabled(self) -> bool:
        """``lnet_routing_enabled``: forwarding in every state but DISABLED (spec §6.2)."""
        return self.state != ROUTING_DISABLED

    def rte_disabled(self) -> bool:
        """Whether our ping buffer carries LNET_PING_FEAT_RTE_DISABLED (spec §6.2)."""
        return self.state != ROUTING_ENABLED

    # ------------------------------------------------------------------ routing state
    def on_tunable(self, name: str, value: int, now: float | None) -> list[Action]:
        """``set routing|forwarding|*_buffers`` (spec §6.2, §1.6)."""
        t = now if now is not None else self.last_now
        if name == "forwarding":
            return self._enable(t, immediate=True) if value else self._disable(t)
        if name == "routing":
            return self._enable(t, immediate=False) if value else self._disable(t)
        return self.fwd.pools_resize(name, value, t)

    def _enable(self, now: float, *, immediate: bool) -> list[Action]:
        self.fwd.alloc_pools()
        for ni in self.local.local_nis():
            self.checker.ni_last_alive[ni] = now
        if immediate:
            self._routing_notice(ROUTING_ENABLED)
            self.state = ROUTING_ENABLED
            self.tunables.routing = 1
            self.ping_changed()
            return []
        if self.state == ROUTING_ENABLED:
            return []
        delay = self._grace()
        self._routing_notice(ROUTING_STARTING)
        self.state, self.state_at = ROUTING_STARTING, now + delay
        return [Log(level="warning", text=f"Message forwarding will be enabled in {delay}s")]

    def _disable(self, now: float) -> list[Action]:
        if self.state == ROUTING_DISABLED:
            return []
        delay = self._grace()
        self._routing_notice(ROUTING_STOPPING)
        self.state, self.state_at, self.stop_limit = ROUTING_STOPPING, now + delay, \
            now + 3 * delay
        self.ping_changed()
        return [Log(level="warning", text=f"Message forwarding will be disabled in {delay}s")]

    def _grace(self) -> int:
        t = self.tunables
        return max(t.alive_router_check_interval, 0) + t.router_ping_timeout

    def state_tick(self, now: float) -> tuple[list[float], list[Action]]:
        """The routing state's next deadline and, if ``now`` >= 0, its transitions now."""
        actions: list[Action] = []
        if now >= 0:
            if self.state == ROUTING_STARTING and now >= self.state_at:
                self._routing_notice(ROUTING_ENABLED)
                self.state = ROUTING_ENABLED
                self.ping_changed()
                actions.append(Log(level="warning", text="Message forwarding enabled"))
            if self.state == ROUTING_STOPPING and now >= self.state_at and (
                    self.fwd.pools_idle() or now >= self.stop_limit):
                actions += self._stop(now)
        t = self.state_deadline()
        return ([] if t is None else [t]), actions

    def state_deadline(self) -> float | None:
        """When the routing state next moves on its own (STARTING, STOPPING), else None."""
        if self.state == ROUTING_STARTING:
            return self.state_at
        if self.state == ROUTING_STOPPING:  # then once a second until the pools are idle
            return max(self.state_at, self.last_now + 1.0)
        return None

    def _routing_notice(self, new: int) -> None:
        """A ``routing`` notice when forwarding turns on or off, or when what our ping buffer
        advertises (RTE_DISABLED) changes: a gateway tells its peers it stops routing before
        it stops forwarding, and they may take its routes down on that alone (TRACE-SCHEMA)."""
        on, rte_off = new != ROUTING_DISABLED, new != ROUTING_ENABLED
        if on != self.enabled or rte_off != self.rte_disabled():
            self.notices.emit("routing", enabled=on, rte_disabled=rte_off)

    def _stop(self, now: float) -> list[Action]:
        self._routing_notice(ROUTING_DISABLED)
        self.state = ROUTING_DISABLED
        self.tunables.routing = 0
        actions: list[Action] = [Log(level="warning", text="Message forwarding disabled")]
        for pool in self.fwd.pools or []:
            while pool.msgs:
                msg = pool.msgs.popleft()
                pool.credits += 1
                actions += self.fwd.drop_forward(msg, now, "routing disabled")
        return actions


def lpni_state(router: Router, lpni: PeerNI) -> str:
    """Peer NI ``state``: up/down for gateways or when peer aliveness applies, else NA."""
    if lpni.peer.rtr_refcount > 0 or router.enabled:
        return "up" if lpni.ns_status == LNET_NI_STATUS_UP else "down"
    return "NA"
