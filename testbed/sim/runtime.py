"""One simulated node: what ``nodes.daemon.runtime.NodeRuntime`` is to a daemon, on virtual time.

Theory of operation: ``SimRuntime`` implements the front end's ``Runtime`` protocol in full
(``nodes/dlc/runtime.py``), so the lnetctl/lctl/lst verbs (``nodes/dlc/verbs``) run unchanged;
``SimHost`` is its node around LNet (the topology plan's interfaces and host names, the
fabric's clock and log for ``lctl dk``). The verbs' coroutines never suspend here, because
``wait_final`` advances *virtual* time until the MD completes instead of awaiting I/O
(``run_sync`` drives them). Engine
actions go to the fabric (``SimFabric.apply``), which plays the socklnd: deliveries, tx
completions, peer notifications. The node's engine gets ``Random(f"{seed}:{node}")``.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from nodes import planted, selftest
from nodes.daemon import etchosts
from nodes.daemon.ifaddr import inet_select
from nodes.daemon.runtime import SRPC_BULK_DATA
from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import EINVAL, ENOENT, LNetConfigError
from nodes.lnet.nid import NID, O2IBLND, Net, nid_from_ip
from nodes.o2ib.kibtx import O2ibTunables, ipoib_refusal
from testbed.base import TestbedError
from testbed.plan import NodePlan
from testbed.sim.socktables import SimSockTables

if TYPE_CHECKING:
    from testbed.sim.inproc import SimTestbed


class SimHost:
    """``NodeHost`` of a simulated node: its topology interfaces, the testbed's plan as the
    hosts view, virtual time and the fabric's log of this node for ``lctl dk``."""

    def __init__(self, sim: SimTestbed, plan: NodePlan) -> None:
        self.sim = sim
        self.plan = plan

    def addresses(self) -> list[tuple[str, str]]:
        """The plan's interfaces: every IPv4 address in order, then every IPv6 one."""
        ifaces = self.plan.interfaces
        return [(i.name, str(i.ip)) for i in ifaces if i.ipv4] + \
            [(i.name, str(i.ip6)) for i in ifaces if i.ip6 is not None]

    def interface_up(self, name: str) -> bool:
        """Up unless the testbed set the interface's link down (``SimFabric.down``)."""
        down = {str(n) for n in self.sim.fabric.down}
        return any(i.name == name and str(i.nid) not in down for i in self.plan.interfaces)

    def resolve_host(self, name: str) -> str | None:
        """Each node's name and first interface address, from the testbed's plan."""
        return etchosts.lookup_text(etchosts.plan_hosts(self.sim.plan.nodes), name)

    def debug_clock(self) -> float:
        """Virtual time."""
        return float(self.sim.fabric.now)

    def engine_log(self) -> list[tuple[float, str]] | None:
        """The fabric keeps every node's engine log: this node's lines."""
        me = self.plan.name
        return [(t, text) for t, name, text in self.sim.fabric.log if name == me]


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a command coroutine that never suspends (all its waits are virtual)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise TestbedError("sim: a command waited on real I/O, which the sim backend cannot do")


class SimRuntime:
    """One simulated node: what ``NodeRuntime`` is to a daemon, on the fabric's clock. The
    engine's actions are carried out by the fabric's ``NodeDriver`` for this node (the same
    driver class as the daemon's, ``nodes/driver.py``)."""

    def __init__(self, sim: SimTestbed, plan: NodePlan, seed: int, generation: int = 0) -> None:
        self.sim = sim
        self.name = plan.name
        self.plan = plan
        self.generation = generation
        # a restarted node is a new incarnation (seed 002: peers see the reset), still seeded
        rng = random.Random(f"{seed}:{plan.name}" + (f":{generation}" if generation else ""))
        self.incarnation = rng.getrandbits(63) | 1
        # a test may plant a wrong decision (nodes/planted.py, issue 17)
        self.engine: LNetEngine = planted.new_engine(planted.from_environ(os.environ), rng=rng,
                                                     incarnation=self.incarnation)
        sim.fabric.add(self.name, self.engine)
        self.driver = sim.fabric.drivers[self.name]
        #: the LND's timeouts and socket-side parameters (``Runtime.timeouts``)
        self.timeouts = self.driver.timeouts
        # lnet_selftest on every node, as on the daemon (it answers the bursts too)
        self.selftest = selftest.attach(self.driver, burst_data=SRPC_BULK_DATA)
        self.host = SimHost(sim, plan)
        #: the front end's per-node state (``Runtime.dlc_state``)
        self.dlc_state: dict[str, Any] = {}

    def now(self) -> float:
        return self.sim.fabric.now

    def socklnd_tables(self) -> SimSockTables:
        """What ``lctl conn_list|peer_list|interface_list`` read (``socktables.py``)."""
        return SimSockTables(self)

    def execute(self, actions: list[Action]) -> None:
        self.driver.execute(actions)

    def flush_notices(self) -> None:
        """Nothing here: the simulated node's verb path flushes its notices itself, in the
        fabric's order (``SimNodeHandle``: ``SimFabric.flush`` after each verb)."""

    def set_bulk_port(self, port: int) -> None:
        """Nothing listens on a simulated node: the value is kept (``lnd_params``) and shown
        (``socktables.py``), no second acceptor is started."""

    def set_conns_per_peer(self, nid: NID, conns_per_peer: int) -> None:
        """Nothing to tell: the fabric reads each NI's ``conns_per_peer`` when it lists the
        sockets of a pair (``socktables.conn_types``)."""

    def set_o2ib_tunables(self, nid: NID, tunables: O2ibTunables) -> None:
        """Nothing to tell: the simulator's o2iblnd reads them from the NI (``lnd_o2ib``)."""

    def start(self, start: Callable[[], tuple[int, list[Action]]]) -> tuple[int, int]:
        """Start an operation; returns (MD handle, index of its first event)."""
        mark = len(self.sim.fabric.events[self.name])
        handle, actions = start()
        self.execute(actions)
        return handle, mark

    def final(self, handle: int, mark: int) -> list[MDEvent] | None:
        """The events of MD ``handle`` since ``mark`` if it is unlinked, else None."""
        evs = [e for e in self.sim.fabric.events[self.name][mark:] if e.handle == handle]
        return evs if evs and evs[-1].unlinked else None

    async def share(self) -> None:
        """Between two long steps of one request: in a server, other requests first (once
        per ``SHARE_SLICE``, ``SimTestbed.share``); in-process, nothing."""
        await self.sim.share()

    async def wait_final(self, start: Callable[[], tuple[int, list[Action]]]) -> list[MDEvent]:
        """Start an operation and wait until its MD is unlinked; returns all its events.

        Unpaced (the in-process testbed, a server at ``--speed 0``): advance virtual time here
        until it completes. Paced (a server at ``--speed`` > 0): await a future the MD's last
        event resolves while the server's pacing task drives the clock."""
        events: list[MDEvent] = []
        handle, actions = start()
        paced = self.sim.paced
        fut: asyncio.Future[list[MDEvent]] | None = (
            asyncio.get_running_loop().create_future() if paced else None)

        def on_event(ev: MDEvent) -> None:
            events.append(ev)
            if ev.unlinked and fut is not None and not fut.done():
                fut.set_result(events)

        self.driver.watch(handle, on_event)
        self.execute(actions)
        if fut is not None:
            self.sim.kick()
            return await fut
        fabric = self.sim.fabric
        while not (events and events[-1].unlinked):
            if not fabric.step():
                self.driver.waiters.pop(handle, None)
                raise TestbedError(f"sim: node {self.name}: MD {handle} can never complete")
            await self.sim.share()
        return events

    async def net_add(self, net: Net, interface: str, *, address: str | None = None,
                      **kw: Any) -> NID:
        refusal = ipoib_refusal(net, net.lnd, O2IBLND, interface)
        if refusal is not None:
            raise LNetConfigError(-EINVAL, refusal)
        iface = next((i for i in self.plan.interfaces if i.name == interface), None)
        if iface is None:
            raise LNetConfigError(-EINVAL, f"cannot add network: interface {interface} "
                                           "has no IPv4 address")
        ip6 = [str(iface.ip6)] if iface.ip6 is not None else []
        ip = address or inet_select(interface, str(iface.ip) if iface.ipv4 else None, ip6,
                                    self.engine.node.large_nids)
        nid = nid_from_ip(ip, net)
        self.engine.net_add(net, interface, nid, **kw)
        self.sim.fabric.dead.discard(nid)  # its acceptor listens again
        self.driver.ni_added(nid)
        self.sim.fabric.refresh_node(self.name)
        self.execute([])  # re-arm: MR peers are pushed the new buffer (dyn-045)
        if nid in self.sim.fabric.down:  # the link watcher's first pass: carrier is down
            self.execute(self.engine.ni_set_fatal(nid, True, self.now()))
        return nid

    async def net_del(self, net: Net, interface: str | None) -> None:
        gone = set(self.engine.net_del(net, interface))
        for nid in gone:
            self.driver.ni_removed(nid)
        self._closed(gone)

    def _closed(self, gone: set[NID]) -> None:
        """The NIs ``gone`` were shut down: their socklnd closes their connections (each peer
        reads the FIN: ``Fabric.hang_up``) and their acceptor, so a connect is refused."""
        fabric = self.sim.fabric
        fabric.refresh_node(self.name)
        fabric.hang_up(self.name, gone, False)
        fabric.dead.update(gone)
        self.execute([])

    def lnd_link(self, nid: NID, up: bool) -> bool:
        """``NodeRuntime.lnd_link`` (hlth-dbg-sim-ni-down/up): a link event reported by the
        LND, the interface untouched; until a real link change the NI's sends fail with
        -ENETDOWN (``SimFabric.lnd_down``). Returns whether the link state changed."""
        ni = self.engine.ni_by_nid(nid)
        if ni is None or ni.is_lo:
            raise LNetConfigError(-ENOENT, f"{nid} is not a local NI")
        (self.sim.fabric.lnd_down.discard if up else self.sim.fabric.lnd_down.add)(nid)
        if ni.fatal_error == (not up):  # the link watcher reports changes only
            return False
        self.driver.link_event(nid, up, "simulated")
        return True

    async def unconfigure(self) -> None:
        gone = set(self.engine.unconfigure())
        for nid in gone:
            self.driver.ni_removed(nid)
        self._closed(gone)
