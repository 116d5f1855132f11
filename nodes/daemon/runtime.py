"""The asyncio driver around one node's engine: clock, timers, LND and MD waiters.

Theory of operation (aioquic's protocol.py is the model): ``now`` comes from the event loop's
monotonic clock; after every engine call the actions are carried out (``Transmit`` to the
socklnd, ``MDEvent`` to whoever waits on that MD handle, ``Log`` to the node log) and the single
timer is re-armed at ``engine.next_deadline()``. The engine never sees a socket or a clock.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
from collections.abc import Callable
from typing import Any

from nodes.daemon.ifaddr import interface_ipv4
from nodes.daemon.linkwatch import LinkWatch, interface_subnet
from nodes.lnd.socklnd import RxMsg, SockLND
from nodes.lnet.actions import Action, Log, MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.events import MessageReceived, TxCompleted
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID, Net, nid_from_ip

log = logging.getLogger("lnet")

#: lnet_selftest's bulk portal (lnet/selftest/selftest.h SRPC_RDMA_PORTAL): the traffic
#: generator PUTs there and every node posts a sink match entry on it at start.
SRPC_RDMA_PORTAL = 52


class NodeRuntime:
    """Owns the engine, the socklnd and the timer of one emulated node."""

    def __init__(self, *, seed: int, port: int = 988) -> None:
        self.loop = asyncio.get_running_loop()
        rng = random.Random(seed)
        self.incarnation = rng.getrandbits(63) | 1
        self.engine = LNetEngine(rng=rng, incarnation=self.incarnation)
        self.engine.dc_enabled = True  # peer discovery on (nodes/lnet/discovery.py)
        self.lnd = SockLND(on_rx=self._on_rx, on_tx_done=self._on_tx_done,
                           on_conn=self._on_conn, incarnation=self.incarnation, port=port)
        self._timer: asyncio.TimerHandle | None = None
        self._waiters: dict[int, Callable[[MDEvent], None]] = {}
        # carrier watch (hlt-005/010/025): subnet per NI, learnt while the link is up
        self._subnets: dict[NID, ipaddress.IPv4Network | None] = {}
        self.linkwatch = LinkWatch(nis=self._watched_nis, on_change=self._on_link)
        self._linkwatch_task = self.loop.create_task(self.linkwatch.run())
        self.engine.attach_me(SRPC_RDMA_PORTAL, 0, 0xFFFF_FFFF_FFFF_FFFF, sink=True)

    def now(self) -> float:
        return self.loop.time()

    # ---------------------------------------------------------------- engine plumbing
    def run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Call an engine entry point that returns actions (or (value, actions))."""
        result = fn(*args, **kw)
        if isinstance(result, tuple):
            value, actions = result
        else:
            value, actions = None, result
        self.execute(actions or [])
        return value

    def execute(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Transmit):
                self.lnd.send(action.tx_id, action.ni, action.lpni, action.hdr, action.payload)
            elif isinstance(action, MDEvent):
                waiter = self._waiters.get(action.handle)
                if waiter is not None:
                    if action.unlinked:
                        del self._waiters[action.handle]
                    waiter(action)
            elif isinstance(action, Log):
                getattr(log, action.level if action.level != "info" else "debug")(action.text)
        self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = self.engine.next_deadline()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.execute(self.engine.handle_timer(self.now()))

    def _on_rx(self, rx: RxMsg) -> None:
        ev = MessageReceived(ni=rx.ni, peer_nid=rx.peer_nid, hdr=rx.hdr, payload=rx.payload)
        self.execute(self.engine.handle(ev, self.now()))

    def _on_tx_done(self, tx_id: int, rc: int, hstatus: HStatus) -> None:
        ev = TxCompleted(tx_id=tx_id, rc=rc, hstatus=HStatus(hstatus))
        self.execute(self.engine.handle(ev, self.now()))

    def _on_conn(self, event: str, ni: NID, peer: NID, reason: str) -> None:
        log.info("connection %s: %s -> %s %s", event, ni, peer, reason)

    # ---------------------------------------------------------------- link state
    def _watched_nis(self) -> dict[NID, str]:
        return {ni.nid: ni.interface for ni in self.engine.local_nis() if ni.interface}

    def _on_link(self, nid: NID, up: bool) -> None:
        """``ksocknal_handle_link_state_change``: the NI's fatal state follows the carrier;
        on carrier loss the socklnd closes the conns over that interface, so what they held
        is resent elsewhere (snd-080/085)."""
        if up:
            self.lnd.link_up(nid)
        else:
            closed = self.lnd.link_down(nid, self._subnets.get(nid))
            log.warning("link down on %s: %d connection(s) closed", nid, closed)
        self.execute(self.engine.ni_set_fatal(nid, not up, self.now()))

    def set_lnd_timeout(self, net: Net, seconds: int) -> int:
        """``lnetctl net set --net N --lnd-timeout S``: the LND timeout of every NI of ``net``
        (socklnd connect/stale/progress timeout, and the engine's message deadline, spec
        §3.4); returns how many NIs changed."""
        count = 0
        for ni in self.engine.local_nis():
            if ni.nid.net == net:
                ni.lnd_timeout = seconds
                self.lnd.set_timeout(float(seconds or self.engine.tunables.lnd_timeout), ni.nid)
                count += 1
        return count

    # ---------------------------------------------------------------- upper layer
    def watch(self, handle: int, callback: Callable[[MDEvent], None]) -> None:
        self._waiters[handle] = callback

    async def wait_final(self, start: Callable[[], tuple[int, list[Action]]]) -> list[MDEvent]:
        """Start an operation and wait until its MD is unlinked; returns all its events."""
        fut: asyncio.Future[list[MDEvent]] = self.loop.create_future()
        events: list[MDEvent] = []
        handle, actions = start()

        def on_event(ev: MDEvent) -> None:
            events.append(ev)
            if ev.unlinked and not fut.done():
                fut.set_result(events)

        self.watch(handle, on_event)
        self.execute(actions)
        return await fut

    # ---------------------------------------------------------------- DLC with LND side
    async def net_add(self, net: Net, interface: str, **kw: Any) -> NID:
        ip = interface_ipv4(interface)
        if ip is None:
            raise LNetConfigError(-EINVAL, f"cannot add network: interface {interface} "
                                           "has no IPv4 address")
        nid = nid_from_ip(ip, net)
        ni = self.engine.net_add(net, interface, nid, **kw)
        self.execute([])  # re-arm the timer: MR peers are pushed the new buffer (dyn-045)
        self._subnets[nid] = interface_subnet(interface)
        try:
            await self.lnd.startup_ni(nid, ip, timeout=float(ni.lnd_timeout
                                                              or self.engine.tunables.lnd_timeout))
        except OSError as e:
            self.engine.net_del(net, interface)
            raise LNetConfigError(-(e.errno or EINVAL),
                                  f"cannot add network: {e.strerror or e}") from e
        return nid

    async def net_del(self, net: Net, interface: str | None) -> None:
        for nid in self.engine.net_del(net, interface):
            await self.lnd.shutdown_ni(nid)
        self.execute([])  # re-arm the timer: MR peers are pushed the new buffer (dyn-045)

    async def unconfigure(self) -> None:
        for nid in self.engine.unconfigure():
            await self.lnd.shutdown_ni(nid)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._linkwatch_task.cancel()
        await asyncio.gather(self._linkwatch_task, return_exceptions=True)
        await self.lnd.close()
