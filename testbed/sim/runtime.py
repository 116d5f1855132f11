"""One simulated node: what ``nodes.daemon.runtime.NodeRuntime`` is to a daemon, on virtual time.

Theory of operation: ``SimRuntime`` offers the interface the daemon's command modules use
(``engine``, ``now``, ``run``, ``execute``, ``wait_final``, ``net_add``, ``net_del``,
``unconfigure``, ``set_lnd_timeout``, ``lnd_link``), so ``lnetctl_cmd``/``lctl_cmd`` run
unchanged; their coroutines never suspend here, because ``wait_final`` advances *virtual*
time until the MD completes instead of awaiting I/O (``run_sync`` drives them). Engine
actions go to the fabric (``SimFabric.apply``), which plays the socklnd: deliveries, tx
completions, peer notifications. The node's engine gets ``Random(f"{seed}:{node}")``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from nodes.daemon.runtime import SRPC_BULK_DATA, SRPC_RDMA_PORTAL
from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import EINVAL, ENOENT, LNetConfigError
from nodes.lnet.nid import NID, Net, nid_from_ip
from testbed.base import TestbedError
from testbed.plan import NodePlan

if TYPE_CHECKING:
    from testbed.sim.inproc import SimTestbed


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a command coroutine that never suspends (all its waits are virtual)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise TestbedError("sim: a command waited on real I/O, which the sim backend cannot do")


class SimRuntime:
    """One simulated node: what ``NodeRuntime`` is to a daemon, on the fabric's clock."""

    def __init__(self, sim: SimTestbed, plan: NodePlan, seed: int) -> None:
        self.sim = sim
        self.name = plan.name
        self.plan = plan
        rng = random.Random(f"{seed}:{plan.name}")
        self.incarnation = rng.getrandbits(63) | 1
        self.engine = LNetEngine(rng=rng, incarnation=self.incarnation)
        self.engine.attach_me(SRPC_RDMA_PORTAL, 0, 0xFFFF_FFFF_FFFF_FFFF,
                              data=SRPC_BULK_DATA, sink=True)
        sim.fabric.add(self.name, self.engine)
        # per-NI socklnd sock_timeout (``net set --lnd-timeout``); absent = LNet's lnd_timeout
        self.sock_timeout: dict[NID, int] = {}

    def now(self) -> float:
        return self.sim.fabric.now

    def execute(self, actions: list[Action]) -> None:
        self.sim.fabric.apply(self.name, actions)

    def run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return self.sim.fabric.call(self.name, fn, *args, **kw)

    def start(self, start: Callable[[], tuple[int, list[Action]]]) -> tuple[int, int]:
        """Start an operation; returns (MD handle, index of its first event)."""
        mark = len(self.sim.fabric.events[self.name])
        handle, actions = start()
        self.execute(actions)
        return handle, mark

    def final(self, handle: int, mark: int) -> list[MDEvent] | None:
        evs = [e for e in self.sim.fabric.events[self.name][mark:] if e.handle == handle]
        return evs if evs and evs[-1].unlinked else None

    async def wait_final(self, start: Callable[[], tuple[int, list[Action]]]) -> list[MDEvent]:
        """Start an operation and advance virtual time until its MD is unlinked."""
        handle, mark = self.start(start)
        while (evs := self.final(handle, mark)) is None:
            if not self.sim.fabric.step():
                raise TestbedError(f"sim: node {self.name}: MD {handle} can never complete")
        return evs

    async def net_add(self, net: Net, interface: str, **kw: Any) -> NID:
        iface = next((i for i in self.plan.interfaces if i.name == interface), None)
        if iface is None:
            raise LNetConfigError(-EINVAL, f"cannot add network: interface {interface} "
                                           "has no IPv4 address")
        nid = nid_from_ip(str(iface.ip), net)
        self.engine.net_add(net, interface, nid, **kw)
        self.sock_timeout.pop(nid, None)
        self.sync_lnd_timeouts()
        self.sim.fabric.refresh()
        if nid in self.sim.fabric.down:  # the link watcher's first pass: carrier is down
            self.execute(self.engine.ni_set_fatal(nid, True, self.now()))
        return nid

    async def net_del(self, net: Net, interface: str | None) -> None:
        self.engine.net_del(net, interface)
        self.sim.fabric.refresh()

    def sync_lnd_timeouts(self) -> None:
        """As ``NodeRuntime._sync_lnd_timeouts`` (hlth-lnd-tx-timeout-from-lnet): an NI without
        its own ``--lnd-timeout`` follows LNet's derived lnd_timeout (``ksocknal_timeout()``)."""
        for ni in self.engine.local_nis():
            if not ni.is_lo and ni.nid not in self.sock_timeout:
                ni.lnd_timeout = self.engine.tunables.lnd_timeout

    def set_lnd_timeout(self, net: Net, seconds: int) -> int:
        """``NodeRuntime.set_lnd_timeout`` (``net set --lnd-timeout``; 0: back to LNet's);
        returns how many NIs changed."""
        count = 0
        for ni in self.engine.local_nis():
            if ni.nid.net == net:
                if seconds:
                    self.sock_timeout[ni.nid] = seconds
                else:
                    self.sock_timeout.pop(ni.nid, None)
                ni.lnd_timeout = seconds or self.engine.tunables.lnd_timeout
                count += 1
        return count

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
        self.execute(self.engine.ni_set_fatal(nid, not up, self.now(), "simulated"))
        return True

    async def unconfigure(self) -> None:
        self.engine.unconfigure()
        self.sim.fabric.refresh()
