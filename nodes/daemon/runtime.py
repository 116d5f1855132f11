"""The asyncio driver around one node's engine: clock, timers, LND and MD waiters.

Theory of operation (aioquic's protocol.py is the model): ``now`` comes from the event loop's
monotonic clock; after every engine call the shared ``NodeDriver`` (``nodes/driver.py``, also
the simulator's) carries the actions out (``Transmit`` to the socklnd, ``MDEvent`` to whoever
waits on that MD handle, ``Log`` to the node log) and re-arms the single loop timer when the
engine's earliest deadline moved. What is the daemon's own: the socklnd, the link watcher,
the loop timer. The engine never sees a socket or a clock.

Observation (issue 16, docs/events.md): ``observe`` gives the driver a recorder
(``RUNDIR/nodes/NODE.rec``, sampled on a second loop timer) and, with ``trace``, a message
trace sink (``RUNDIR/nodes/NODE.trace.jsonl``, ``nodes/daemon/eventlog.py TraceLog``), both
on the event log's clock: unix time = loop time + the offset taken once at start.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes import planted, selftest
from nodes.daemon.eventlog import TraceLog
from nodes.daemon.host import DaemonHost
from nodes.daemon.ifaddr import inet_select, interface_ipv4, interface_ipv6
from nodes.daemon.linkwatch import LinkWatch, interface_subnet
from nodes.driver import NodeDriver
from nodes.lnd.connio import loop_clock
from nodes.lnd.socklnd import RxMsg, SockLND
from nodes.lnet.actions import Action, Log, MDEvent, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import EINVAL, ENOENT, LNetConfigError
from nodes.lnet.events import MessageReceived, PeerNotify, TxCompleted
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID, O2IBLND, Net, nid_from_ip
from nodes.o2ib.kibtx import O2ibTunables, ipoib_refusal
from nodes.o2ib.o2ibio import O2ibIO
from nodes.recorder import Recorder, rec_path

log = logging.getLogger("lnet")


def _log_line(act: Log) -> None:
    getattr(log, act.level if act.level != "info" else "debug")(act.text)

#: lnet_selftest's bulk portal (lnet/selftest/selftest.h SRPC_RDMA_PORTAL): the traffic
#: generator PUTs and GETs there with match bits 0 (which srpc never uses), answered by
#: the sink ``selftest.attach`` posts on every node.
SRPC_RDMA_PORTAL = 52
#: what a GET on that match entry reads (a GET of N bytes gets N bytes back): one shared
#: zero buffer of LNET_MTU bytes, never copied per node (bytes are immutable).
SRPC_BULK_DATA = bytes(LNET_MTU)


#: the shortest sleep of the loop's selector (epoll's timeout is in milliseconds)
_SELECT_RESOLUTION = 1e-3


def _no_op() -> None:
    """A ready callback: the loop polls without sleeping (``NodeRuntime._arm_timer``)."""

class NodeRuntime:
    """Owns the engine, the socklnd and the timer of one emulated node; the engine's actions
    are carried out by the shared ``NodeDriver`` (``nodes/driver.py``), with the loop's clock,
    the socklnd and a loop timer. Implements the front end's ``Runtime`` protocol in full
    (``nodes/dlc/runtime.py``, by shape: this package imports nothing of ``nodes/dlc``)."""

    def __init__(self, *, seed: int, port: int = 988) -> None:
        self.loop = asyncio.get_running_loop()
        #: the loop's clock (loop.time), read directly: the engine's ``now``
        self.now: Callable[[], float] = loop_clock(self.loop)
        rng = random.Random(seed)
        self.incarnation = rng.getrandbits(63) | 1
        # a test may plant a wrong decision (nodes/planted.py, issue 17)
        self.engine: LNetEngine = planted.new_engine(planted.from_environ(os.environ), rng=rng,
                                                     incarnation=self.incarnation)
        self.lnd = SockLND(on_rx=self._on_rx, on_tx_done=self._on_tx_done,
                           on_conn=self._on_conn, on_notify=self._on_notify,
                           on_batch=self._on_batch, incarnation=self.incarnation, port=port)
        #: o2iblnd (nodes/o2ib/o2ibio.py) for the NIs of ``o2ib`` nets, on ``ib*`` interfaces
        self.o2ib = O2ibIO(incarnation=self.incarnation, on_rx=self._on_o2ib_rx,
                           on_tx_done=self._on_tx_done, on_notify=self._on_notify,
                           on_batch=self._on_batch)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when ``_timer`` fires (while it is not None)
        self._batch_now: float | None = None  # the clock at the start of an LND batch
        # health notices for user space (hlth-lnt-udev): set by the control server to the
        # testbed event log (nodes/daemon/eventlog.py)
        self.notice_sink: Callable[[str, dict[str, Any]], None] | None = None
        self.driver = NodeDriver(
            self.engine, now=self.now, transmit=self._transmit, arm_timer=self._arm_timer,
            notify_peer_down=self._notify_peer_down,
            log=_log_line, notice_sink=self._notice,
            set_lnd_timeout=lambda nid, s: self.lnd.set_timeout(s, nid))
        #: the LND's timeouts and socket-side parameters (``Runtime.timeouts``)
        self.timeouts = self.driver.timeouts
        # carrier watch (hlt-005/010/025): subnet per NI, learnt while the link is up
        self._subnets: dict[NID, ipaddress.IPv4Network | None] = {}
        self.linkwatch = LinkWatch(nis=self._watched_nis, on_change=self._on_link,
                                   on_simulated=self._on_simulated_link)
        self._linkwatch_task = self.loop.create_task(self.linkwatch.run())
        # every node serves lnet_selftest (nodes/selftest), which also answers the bursts
        self.selftest = selftest.attach(self.driver, burst_data=SRPC_BULK_DATA)
        self._sample_timer: asyncio.TimerHandle | None = None
        self.trace: TraceLog | None = None
        self._trace_flush: asyncio.TimerHandle | None = None
        #: unix time - loop time: the event log's clock (docs/events.md §1)
        self.clock_offset = time.time() - self.loop.time()
        #: the node around LNet (``Runtime.host``): its namespace's interfaces, the testbed's
        #: hosts view (``host.hosts_path``), the wall clock of ``lctl dk``
        self.host = DaemonHost()
        #: the front end's per-node state (``Runtime.dlc_state``)
        self.dlc_state: dict[str, Any] = {}

    def _notify_peer_down(self, nid: NID) -> None:
        """``lnd_notify_peer_down``: the socklnd closes the peer's connections on the next
        loop turn (not inside the engine call that decided it)."""
        self.loop.call_soon(self.lnd.notify_peer_down, nid)

    # ---------------------------------------------------------------- observation
    def observe(self, rundir: Path, node: str, *, record_period: float = 0.0,
                trace: bool = False) -> None:
        """Record this node every ``record_period`` seconds (0: no recorder) and, with
        ``trace``, write the engine's message trace (issue 16 items 1 and 4)."""
        if record_period > 0:
            self.driver.recorder = Recorder(self.engine, rec_path(rundir, node), node=node,
                                            period=record_period,
                                            clock_offset=self.clock_offset)
            self.driver.arm_sample = self._arm_sample
        if trace:
            self.trace = TraceLog(rundir / "nodes" / f"{node}.trace.jsonl", node,
                                  self.clock_offset)
            self.driver.set_trace_sink(self._trace)

    def _arm_sample(self, at: float) -> None:
        if self._sample_timer is not None:
            self._sample_timer.cancel()
        self._sample_timer = self.loop.call_at(at, self._on_sample_timer)

    def _on_sample_timer(self) -> None:
        self._sample_timer = None
        self.driver.on_sample_timer()

    def _trace(self, act: Any) -> None:
        trace = self.trace
        if trace is None:
            return
        trace.write(act.at, act)  # the engine's now: the call's, not the write's
        if self._trace_flush is None and trace.pending:
            self._trace_flush = self.loop.call_later(TraceLog.FLUSH_AFTER, self._flush_trace)

    def _flush_trace(self) -> None:
        self._trace_flush = None
        if self.trace is not None:
            self.trace.flush()

    def flush_observations(self) -> None:
        """Write what the trace and the recorder hold (before a reader looks at the run
        directory: the pytest plugin's teardown check, ``testbed report``)."""
        if self.trace is not None:
            self.trace.flush()
        if self.driver.recorder is not None:
            self.driver.recorder.flush()

    # ---------------------------------------------------------------- engine plumbing
    def execute(self, actions: list[Action]) -> None:
        self.driver.execute(actions)

    def flush_notices(self) -> None:
        """After direct engine calls (a DLC verb): the engine's health notices to the sink
        (notify.py, hlth-lnt-udev), and the recorder's chance to see what changed."""
        self.driver.flush_notices()
        self.driver.sample()

    def _notice(self, kind: str, fields: dict[str, Any]) -> None:
        if self.notice_sink is not None:
            self.notice_sink(kind, fields)

    def _transmit(self, act: Transmit) -> None:
        if act.ni.net.lnd == O2IBLND:
            self.o2ib.send(act.tx_id, act.ni, act.lpni, act.hdr, act.payload)
            return
        self.lnd.send(act.tx_id, act.ni, act.lpni, act.hdr, act.payload)

    def _on_o2ib_rx(self, ni: NID, peer: NID, hdr: Any, payload: bytes | memoryview) -> None:
        self.driver.receive(MessageReceived(ni=ni, peer_nid=peer, hdr=hdr, payload=payload),
                            self._batch_now)

    def _arm_timer(self, deadline: float | None) -> None:
        """The loop timer at the engine's earliest deadline. A timer already armed at or
        before it stays (it fires early, nothing is due yet and the driver arms again):
        with messages in flight the earliest response deadline moves on every completion,
        and a cancelled and recreated TimerHandle per message was measurable (issue 13).
        A deadline closer than the selector can sleep (epoll waits whole milliseconds,
        rounded up) also gets a no-op callback, so the loop's next turn polls instead of
        sleeping a millisecond: selftest's work queue runs a microsecond after it was
        scheduled (``sfwtest.WORK_DELAY``), and each of those sleeps stalled an lst ping
        batch (both daemons ~40 % idle at 64 RPCs in flight)."""
        timer = self._timer
        if timer is not None:
            if deadline is not None and self._timer_at <= deadline:  # (timer.when(): a
                return                                                # Python call)
            timer.cancel()
            self._timer = None
        if deadline is not None:
            loop = self.loop
            self._timer = loop.call_at(deadline, self._on_timer)
            self._timer_at = deadline
            if deadline - self.now() < _SELECT_RESOLUTION:
                loop.call_soon(_no_op)

    def _on_timer(self) -> None:
        self._timer = None
        self.lnd.hold()  # what the timer's actions send is written at its end (one turn)
        try:
            self.driver.on_timer()
        finally:
            self.lnd.release()

    def _on_batch(self, begin: bool) -> None:
        """The socklnd hands over the frames of one read or the txs of one write: their
        engine actions are carried out once, at the end (``NodeDriver.hold``), and they
        happened at one instant (one system call): the clock is read once for them."""
        if begin:
            self.driver.hold()
            self._batch_now = self.now()
        else:
            self._batch_now = None
            self.driver.release()

    def _on_rx(self, rx: RxMsg) -> None:
        self.driver.receive(MessageReceived(ni=rx.ni, peer_nid=rx.peer_nid, hdr=rx.hdr,
                                            payload=rx.payload), self._batch_now)

    def _on_tx_done(self, tx_id: int, rc: int, hstatus: HStatus) -> None:
        if type(hstatus) is not HStatus:  # (the socklnd's are already; the call is ~1 us)
            hstatus = HStatus(hstatus)
        now = self._batch_now
        ev = TxCompleted(tx_id=tx_id, rc=rc, hstatus=hstatus)
        self.driver.execute(self.engine.handle(ev, self.now() if now is None else now))

    def _on_notify(self, ni: NID, peer: NID, alive: bool, reset: bool) -> None:
        """``lnet_notify`` from the socklnd (seed 002 rtr-mr-lnd-notify), logged as a
        ``peer_notify`` event as the sim's fabric logs it (a dead notice is what a route
        that goes down cites, docs/events.md §2)."""
        self._notice("peer_notify", {"ni": str(ni), "lpni": str(peer), "alive": alive,
                                     **({"reset": True} if reset else {})})
        ev = PeerNotify(ni=ni, nid=peer, alive=alive, reset=reset)
        self.execute(self.engine.handle(ev, self.now()))

    def _on_conn(self, event: str, ni: NID, peer: NID, reason: str) -> None:
        log.info("connection %s: %s -> %s %s", event, ni, peer, reason)

    # ---------------------------------------------------------------- link state
    def _watched_nis(self) -> dict[NID, str]:
        return {ni.nid: ni.interface for ni in self.engine.local_nis() if ni.interface}

    def _on_link(self, nid: NID, up: bool, cause: str = "carrier") -> None:
        """``ksocknal_handle_link_state_change``: the NI's fatal state follows the carrier;
        on carrier loss the socklnd closes the conns over that interface, so what they held
        is resent elsewhere (snd-080/085). ``cause`` is ``simulated`` for ``lnd_link``."""
        if nid.net.lnd == O2IBLND:  # IB_EVENT_PORT_ERR: the NI fatal first, then its QPs
            self.driver.link_event(nid, up, cause)
            if not up:
                self.o2ib.port_down(nid)
            return
        if up:
            self.lnd.link_up(nid)
        else:
            closed = self.lnd.link_down(nid, self._subnets.get(nid))
            log.warning("link down on %s: %d connection(s) closed", nid, closed)
        self.driver.link_event(nid, up, cause)

    def _on_simulated_link(self, nid: NID, up: bool) -> None:
        self._on_link(nid, up, "simulated")

    def lnd_link(self, nid: NID, up: bool) -> bool:
        """The LND hook of hlth-dbg-sim-ni-down/up (``lctl net_ni_down|up NID``): the socklnd
        reports a link down/up event for ``nid`` exactly as on a carrier change, without
        touching the interface; returns whether the NI's link state changed.

        Raises:
            LNetConfigError: -ENOENT, ``nid`` is not a local NI.
        """
        try:
            return self.linkwatch.simulate(nid, up)
        except KeyError:
            raise LNetConfigError(-ENOENT, f"{nid} is not a local NI") from None

    # ---------------------------------------------------------------- the LND's parameters
    def set_bulk_port(self, port: int) -> None:
        """lnet's ``accept_port_bulk``: the socklnd's second listener."""
        self.lnd.set_bulk_port(port)

    def set_conns_per_peer(self, nid: NID, conns_per_peer: int) -> None:
        """``ksocknal_tunables_setup``: the socklnd's connections made from now on."""
        self.lnd.set_conns_per_peer(nid, conns_per_peer)

    def set_o2ib_tunables(self, nid: NID, tunables: O2ibTunables) -> None:
        """``kiblnd_tunables_setup``: the daemon's o2iblnd, for connections made from now on."""
        if self.o2ib.has(nid):
            self.o2ib.lnd.set_tunables(nid, tunables)

    def socklnd_tables(self) -> SockLND:
        """What ``lctl conn_list|peer_list|interface_list`` read: the socklnd itself."""
        return self.lnd

    # ---------------------------------------------------------------- upper layer
    async def share(self) -> None:
        """Between two long steps of one request: the loop serves the others first."""
        await asyncio.sleep(0)

    async def wait_final(self, start: Callable[[], tuple[int, list[Action]]]) -> list[MDEvent]:
        """Start an operation and wait until its MD is unlinked; returns all its events."""
        fut: asyncio.Future[list[MDEvent]] = self.loop.create_future()
        events: list[MDEvent] = []
        handle, actions = start()

        def on_event(ev: MDEvent) -> None:
            events.append(ev)
            if ev.unlinked and not fut.done():
                fut.set_result(events)

        self.driver.watch(handle, on_event)
        self.execute(actions)
        return await fut

    # ---------------------------------------------------------------- DLC with LND side
    async def net_add(self, net: Net, interface: str, *, address: str | None = None,
                      **kw: Any) -> NID:
        refusal = ipoib_refusal(net, net.lnd, O2IBLND, interface)
        if refusal is not None:
            raise LNetConfigError(-EINVAL, refusal)
        ip = address or inet_select(interface, interface_ipv4(interface),
                                    interface_ipv6(interface), self.engine.node.large_nids)
        nid = nid_from_ip(ip, net)
        ni = self.engine.net_add(net, interface, nid, **kw)
        self.driver.ni_added(nid)  # sock_timeout 0: LNet's lnd_timeout
        self.execute([])  # re-arm the timer: MR peers are pushed the new buffer (dyn-045)
        subnet = self._subnets[nid] = interface_subnet(interface)
        try:
            if net.lnd == O2IBLND:
                await self.o2ib.startup_ni(nid, ip)
            else:
                await self.lnd.startup_ni(nid, ip, timeout=float(ni.lnd_timeout),
                                          conns_per_peer=ni.conns_per_peer,
                                          netmask=None if subnet is None
                                          else str(subnet.netmask))
        except OSError as e:
            for gone in self.engine.net_del(net, interface):
                self.driver.ni_removed(gone)
            raise LNetConfigError(-(e.errno or EINVAL),
                                  f"cannot add network: {e.strerror or e}") from e
        return nid

    async def net_del(self, net: Net, interface: str | None) -> None:
        for nid in self.engine.net_del(net, interface):
            self.driver.ni_removed(nid)
            await self._shutdown_ni(nid)
        self.execute([])  # re-arm the timer: MR peers are pushed the new buffer (dyn-045)

    async def unconfigure(self) -> None:
        for nid in self.engine.unconfigure():
            self.driver.ni_removed(nid)
            await self._shutdown_ni(nid)

    async def _shutdown_ni(self, nid: NID) -> None:
        if self.o2ib.has(nid):
            await self.o2ib.shutdown_ni(nid)
        else:
            await self.lnd.shutdown_ni(nid)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for handle in (self._sample_timer, self._trace_flush):
            if handle is not None:
                handle.cancel()
        if self.driver.recorder is not None:
            self.driver.on_sample_timer()  # the last change, if one is unsampled
            self.driver.recorder.close()
        if self.trace is not None:
            self.trace.close()
        self._linkwatch_task.cancel()
        await asyncio.gather(self._linkwatch_task, return_exceptions=True)
        await self.lnd.close()
        await self.o2ib.close()
