"""o2iblnd's asyncio driver on a node daemon: the emulated fabric over real sockets.

Theory of operation: the sans-I/O ``O2ibLND`` (o2iblnd.py) is driven here with the loop's
clock. Each NI listens on its ``ib*`` interface's address, port 987 (ko2iblnd's ``service``:
the rdma_cm port), and every emulated connection is one TCP socket between the two NIs'
addresses carrying the emulated IB packets (``vwire``: CM REQ/REP/RTU/REJ/DREQ, SEND, RDMA
WRITE/READ, ACK/NAK). ``Connect`` opens one from the NI's address; ``Write`` writes;
``Close`` closes once written. A refused or failed socket connect is the connect failure the
LND maps (``connect_failed``); a socket the peer closed only stops its bytes, so the QP's ACK
timers fail what was posted (RETRY_EXC_ERR), as when an HCA's peer vanishes. Deliveries,
completions and ``lnet_notify`` go to the node runtime's callbacks, in order, as they come.
A malformed stream on port 987 is one error line (``O2ibLND.errors``) and that socket closes.

Cost (benchmarks/o2ib.py, py-spy): bytes are received straight into the stream's packet
reader (``BufferedProtocol``: a large RDMA body into a pooled buffer of its own, no copy);
what one loop turn writes to a stream goes out in one ``send`` (the small packets joined, a
large RDMA body written as it is), flushed once the turn's callbacks ran (the emulated
HCA's ACKs with the rest: written before LNet's work they cost the receiver a second send
and the sender a second wake-up per read, and measured no faster); and the LND
outputs of one read (or timer) are one batch for the node driver (``on_batch``: the engine's
actions carried out once at its end, as the socklnd's reads are).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from nodes.lnet.hdr import LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from nodes.o2ib import ibfaults
from nodes.o2ib.kibtx import (
    IBLND_SERVICE,
    Close,
    Connect,
    Deliver,
    Notify,
    O2ibTunables,
    Output,
    TxDone,
    Write,
)
from nodes.o2ib.o2iblnd import O2ibLND

_log = logging.getLogger("lnet.o2iblnd")


class _Stream(asyncio.BufferedProtocol):
    def __init__(self, io: O2ibIO, stream: int | None) -> None:
        self.io, self.stream = io, stream
        self.transport: asyncio.Transport | None = None
        self._direct = False  # the last get_buffer() was the LND's reader's

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.stream is None:  # accepted on port 987
            self.stream = self.io.new_stream()
            self.io.streams[self.stream] = self
            self.io.feed(self.io.lnd.accept(self.stream, self.io.now()))

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self.io.lnd.rx_buffer(self.stream) if self.stream is not None else None
        self._direct = buf is not None
        return buf if buf is not None else self.io.scratch

    def buffer_updated(self, nbytes: int) -> None:
        io = self.io
        if self.stream is None:
            return
        if self._direct:
            io.feed(io.lnd.received(self.stream, nbytes, io.now()))
        else:  # a stream the LND failed or forgot: it decides (closes, drops)
            io.feed(io.lnd.receive(self.stream, bytes(io.scratch[:nbytes]), io.now()))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.io.streams.pop(self.stream, None)


class O2ibIO:
    """One node's o2iblnd over sockets between ``ib*`` addresses."""

    def __init__(self, *, incarnation: int,
                 on_rx: Callable[[NID, NID, LNetHdr, bytes | memoryview], None],
                 on_tx_done: Callable[[int, int, HStatus], None],
                 on_notify: Callable[[NID, NID, bool, bool], None],
                 port: int = IBLND_SERVICE,
                 on_batch: Callable[[bool], None] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.lnd = O2ibLND(incarnation=incarnation)
        self.port = port
        self._on_rx, self._on_tx_done, self._on_notify = on_rx, on_tx_done, on_notify
        self.streams: dict[int, _Stream] = {}
        #: one listener per address, shared by the NIs on it: (server, how many NIs)
        self._listeners: dict[str, tuple[asyncio.AbstractServer, int]] = {}
        self._ips: dict[NID, str] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._next = 1 << 30  # passive stream ids (the LND numbers its active ones from 1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_batch = on_batch
        self._depth = 0  # feed() calls in progress (the engine's sends feed from inside one)
        self._pending: dict[int, list[Write]] = {}  # this turn's writes, per stream
        self._flush_at: asyncio.Handle | None = None
        #: where a stream's bytes land when the LND has no reader for it (failed, unknown)
        self.scratch = memoryview(bytearray(1 << 16))

    def now(self) -> float:
        return self.loop.time()

    def new_stream(self) -> int:
        self._next += 1
        return self._next

    # --- NIs --------------------------------------------------------------------------------
    async def startup_ni(self, ni: NID, ip: str, tun: O2ibTunables | None = None) -> None:
        """Listen on ``ip``:987 for ``ni``, or share the listener already there: ko2iblnd
        listens once per IB device (``kiblnd_dev_start``: one cm_id on the device's address)
        and ``kiblnd_passive_connect`` finds the NI by the CONNREQ's destination NID, so
        two nets on one ``ib*`` interface take connections on one port. Raises OSError if
        it cannot bind."""
        held = self._listeners.get(ip)
        if held is None:
            server = await self.loop.create_server(lambda: _Stream(self, None), ip, self.port,
                                                   reuse_address=True)
            held = (server, 0)
        self._listeners[ip] = (held[0], held[1] + 1)
        self._ips[ni] = ip
        self.lnd.startup_ni(ni, tun)

    async def shutdown_ni(self, ni: NID) -> None:
        ip = self._ips.pop(ni, None)
        held = self._listeners.pop(ip, None) if ip is not None else None
        if ip is not None and held is not None:
            if held[1] > 1:
                self._listeners[ip] = (held[0], held[1] - 1)
            else:
                held[0].close()
        self.feed(self.lnd.shutdown_ni(ni, self.now()))

    def has(self, ni: NID) -> bool:
        return ni in self._ips

    # --- the engine's sends -----------------------------------------------------------------
    def send(self, tx_id: int, ni: NID, peer: NID, hdr: LNetHdr, payload: Any) -> None:
        if not isinstance(payload, bytes | memoryview):
            payload = bytes(payload)
        self.feed(self.lnd.send(tx_id, ni, peer, hdr, payload, self.now()))

    def port_down(self, ni: NID) -> None:
        self.feed(ibfaults.port_down(self.lnd, ni))

    def ib_fault(self, kind: str, nid: str, params: dict[str, object], on: bool
                 ) -> dict[str, object]:
        """An IB fault kind switched on or off on o2ib NI ``nid`` (the ``ib_fault`` request
        of the supervisor, testbed/mininet/faultctl.py)."""
        ni = NID.parse(nid)
        if not self.has(ni):
            return {"ok": False, "error": f"ib_fault {kind}: {nid} is not an o2ib NI here"}
        self.feed(ibfaults.apply(self.lnd, kind, ni, params, on, self.now()))
        return {"ok": True}

    # --- outputs -----------------------------------------------------------------------------
    def feed(self, outs: list[Output]) -> None:
        """Carry out the LND's outputs; writes wait for the turn's flush (``_flush``); the
        deliveries and completions of one call are one batch for the node driver."""
        batch = self._on_batch is not None and self._depth == 0 and any(
            isinstance(o, Deliver | TxDone) for o in outs)
        self._depth += 1
        if batch and self._on_batch is not None:
            self._on_batch(True)
        try:
            for o in outs:
                if isinstance(o, Write):
                    self._pending.setdefault(o.stream, []).append(o)
                elif isinstance(o, Deliver):
                    self._on_rx(o.ni, o.peer, o.hdr, o.payload)
                elif isinstance(o, TxDone):
                    self._on_tx_done(o.tx_id, o.rc, o.hstatus)
                elif isinstance(o, Notify):
                    self._on_notify(o.ni, o.peer, o.alive, False)
                elif isinstance(o, Close):
                    self._write(o.stream)  # what was written before the close goes first
                    s = self.streams.pop(o.stream, None)
                    if s is not None and s.transport is not None:
                        s.transport.close()
                elif isinstance(o, Connect):
                    self._spawn(self._connect(o))
        finally:
            if batch and self._on_batch is not None:
                self._on_batch(False)  # the engine's sends feed(), nested, into _pending
            self._depth -= 1
        if self._pending and self._flush_at is None:
            self._flush_at = self.loop.call_soon(self._flush)
        self._rearm()

    def _flush(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        for stream in list(self._pending):
            self._write(stream)

    def _write(self, stream: int) -> None:
        """One stream's pending writes: the small packets joined, a large body as it is."""
        ws = self._pending.pop(stream, None)
        s = self.streams.get(stream)
        if ws is None or s is None or s.transport is None or s.transport.is_closing():
            return
        t = s.transport
        small = bytearray()
        for w in ws:
            small += w.data
            if w.tail:
                t.write(small)
                small = bytearray()
                t.write(w.tail)
        if small:
            t.write(small)

    async def _connect(self, o: Connect) -> None:
        ip = self._ips.get(o.ni)
        s = _Stream(self, o.stream)
        self.streams[o.stream] = s
        try:
            if ip is None:
                raise OSError(100, "NI not started")
            await asyncio.wait_for(self.loop.create_connection(
                lambda: s, o.peer.ip, self.port, local_addr=(ip, 0)), timeout=5.0)
        except (OSError, TimeoutError) as e:
            self.streams.pop(o.stream, None)
            rc = -(getattr(e, "errno", None) or 110)
            self.feed(self.lnd.connect_failed(o.stream, rc, self.now()))
            return
        self.feed(self.lnd.connected(o.stream, self.now()))

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the clock -------------------------------------------------------------------------------
    def _rearm(self) -> None:
        d = self.lnd.next_deadline()
        if self._timer is not None:
            if d is not None and self._timer_at <= d:
                return
            self._timer.cancel()
            self._timer = None
        if d is not None:
            self._timer, self._timer_at = self.loop.call_at(d, self._on_timer), d

    def _on_timer(self) -> None:
        self._timer = None
        self.feed(self.lnd.handle_timer(self.now()))

    async def close(self) -> None:
        for ni in list(self._ips):
            await self.shutdown_ni(ni)
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in list(self.streams.values()):
            if s.transport is not None:
                s.transport.close()
