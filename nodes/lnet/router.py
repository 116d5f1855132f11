"""Routing of one node: the facade ``eng.router`` (spec §1.4-1.6, §2.6, §6; seeds 001, 002).

Theory of operation. ``Router`` holds the routing state and is assembled from one mixin per
concept (pyzmq's core-plus-mixin split), each in its own module:

* ``route.py``     -- route table, route aliveness, route selection (spec §2.6, §6.1, §6.3);
* ``rtrpool.py``   -- forwarding: router credits, buffer pools, MR final hop (spec §1.5/1.6);
* ``rtrcheck.py``  -- the router checker: gateway pings and replies, router NI status (§6.4);
* ``rtralive.py``  -- ``lnet_notify`` from the LND, rx aliveness, next-hop aliveness and the
  LNet -> LND "peer NI dead" call (seed 001/002);
* ``rtrstate.py``  -- the transition tables of peer NI, gateway and route aliveness.

This module keeps the routing state machine (spec §6.2): DISABLED -> STARTING (``set routing
1``: forwarding at once, the ping keeps RTE_DISABLED for alive_router_check_interval +
router_ping_timeout) -> ENABLED; ``set routing 0`` -> STOPPING (RTE_DISABLED at once; disabled
once the pools are idle after that delay, at most three times it). Module parameter
``forwarding=1`` -> ENABLED at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.ni import LNET_NI_STATUS_UP
from nodes.lnet.route import LNET_UNDEFINED_HOPS, Route, RouteTable, RouteWait
from nodes.lnet.rtralive import RouterAliveness
from nodes.lnet.rtrcheck import RouterChecker
from nodes.lnet.rtrpool import PAGE_SIZE, POOL_PARAMS, POOLS, BufferPool, RouterPools

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.nid import NID, Net
    from nodes.lnet.peer import PeerNet, PeerNI

__all__ = ["LNET_UNDEFINED_HOPS", "PAGE_SIZE", "POOLS", "ROUTER_PARAMS", "ROUTING_DISABLED",
           "ROUTING_ENABLED", "ROUTING_STARTING", "ROUTING_STOPPING", "BufferPool", "Route",
           "RouteWait", "Router", "lpni_state"]

ROUTING_DISABLED, ROUTING_STARTING, ROUTING_ENABLED, ROUTING_STOPPING = range(4)
#: tunables (module parameters) this module reacts to
ROUTER_PARAMS = ("routing", "forwarding", *POOL_PARAMS)


class Router(RouteTable, RouterPools, RouterChecker, RouterAliveness):
    """Routing state of one node; ``eng.router``."""

    def __init__(self, eng: LNetEngine) -> None:
        self.eng = eng
        self.routes: dict[Net, list[Route]] = {}
        self.pools: list[BufferPool] | None = None
        self.state = ROUTING_DISABLED
        self.state_at = 0.0          # when STARTING/STOPPING ends (at the earliest)
        self.stop_limit = 0.0
        self.pending: dict[NID, list[Msg]] = {}    # sends parked on a gateway's discovery
        self.in_discovery: set[NID] = set()        # LNET_PEER_RTR_DISCOVERY (by NID)
        self.discovered: set[NID] = set()          # LNET_PEER_RTR_DISCOVERED (by NID)
        self.next_ping: dict[PeerNet, float] = {}  # lpn_next_ping
        self.ni_last_alive: dict[LNetNI, float] = {}
        self.notify_ts: dict[PeerNI, float] = {}   # lpni_timestamp (lnet_notify)
        self.query_last: dict[NID, float] = {}     # last query of a down peer NI
        self.query_wanted: set[NID] = set()
        self.last_now = 0.0

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
        return self.pools_resize(name, value, t)

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

    def state_tick(self, now: float) -> tuple[list[float], list[Action]]:
        """The routing state's next deadline and, if ``now`` >= 0, its transitions now."""
        actions: list[Action] = []
        if now >= 0:
            if self.state == ROUTING_STARTING and now >= self.state_at:
                self.state = ROUTING_ENABLED
                self.eng._ping_changed()
                actions.append(Log(level="warning", text="Message forwarding enabled"))
            if self.state == ROUTING_STOPPING and now >= self.state_at and (
                    self._pools_idle() or now >= self.stop_limit):
                actions += self._stop(now)
        times: list[float] = []
        if self.state == ROUTING_STARTING:
            times.append(self.state_at)
        elif self.state == ROUTING_STOPPING:  # then once a second until the pools are idle
            times.append(max(self.state_at, self.last_now + 1.0))
        return times, actions

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


def lpni_state(eng: LNetEngine, lpni: PeerNI) -> str:
    """Peer NI ``state``: up/down for gateways or when peer aliveness applies, else NA."""
    if lpni.peer.rtr_refcount > 0 or eng.router.enabled:
        return "up" if lpni.ns_status == LNET_NI_STATUS_UP else "down"
    return "NA"
