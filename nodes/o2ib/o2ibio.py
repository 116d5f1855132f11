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


class _Stream(asyncio.Protocol):
    def __init__(self, io: O2ibIO, stream: int | None) -> None:
        self.io, self.stream = io, stream
        self.transport: asyncio.Transport | None = None

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

    def data_received(self, data: bytes) -> None:
        if self.stream is not None:
            self.io.feed(self.io.lnd.receive(self.stream, data, self.io.now()))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.io.streams.pop(self.stream, None)


class O2ibIO:
    """One node's o2iblnd over sockets between ``ib*`` addresses."""

    def __init__(self, *, incarnation: int,
                 on_rx: Callable[[NID, NID, LNetHdr, bytes], None],
                 on_tx_done: Callable[[int, int, HStatus], None],
                 on_notify: Callable[[NID, NID, bool, bool], None],
                 port: int = IBLND_SERVICE) -> None:
        self.loop = asyncio.get_running_loop()
        self.lnd = O2ibLND(incarnation=incarnation)
        self.port = port
        self._on_rx, self._on_tx_done, self._on_notify = on_rx, on_tx_done, on_notify
        self.streams: dict[int, _Stream] = {}
        self._servers: dict[NID, asyncio.AbstractServer] = {}
        self._ips: dict[NID, str] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._next = 1 << 30  # passive stream ids (the LND numbers its active ones from 1)
        self._tasks: set[asyncio.Task[None]] = set()

    def now(self) -> float:
        return self.loop.time()

    def new_stream(self) -> int:
        self._next += 1
        return self._next

    # --- NIs --------------------------------------------------------------------------------
    async def startup_ni(self, ni: NID, ip: str, tun: O2ibTunables | None = None) -> None:
        """Listen on ``ip``:987 for ``ni``. Raises OSError if it cannot bind."""
        server = await self.loop.create_server(lambda: _Stream(self, None), ip, self.port,
                                               reuse_address=True)
        self._servers[ni], self._ips[ni] = server, ip
        self.lnd.startup_ni(ni, tun)

    async def shutdown_ni(self, ni: NID) -> None:
        server = self._servers.pop(ni, None)
        self._ips.pop(ni, None)
        if server is not None:
            server.close()
        self.feed(self.lnd.shutdown_ni(ni, self.now()))

    def has(self, ni: NID) -> bool:
        return ni in self._servers

    # --- the engine's sends -----------------------------------------------------------------
    def send(self, tx_id: int, ni: NID, peer: NID, hdr: LNetHdr, payload: Any) -> None:
        self.feed(self.lnd.send(tx_id, ni, peer, hdr, bytes(payload), self.now()))

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
        for o in outs:
            if isinstance(o, Write):
                s = self.streams.get(o.stream)
                if s is not None and s.transport is not None and not s.transport.is_closing():
                    s.transport.write(o.data)
            elif isinstance(o, Deliver):
                self._on_rx(o.ni, o.peer, o.hdr, o.payload)
            elif isinstance(o, TxDone):
                self._on_tx_done(o.tx_id, o.rc, o.hstatus)
            elif isinstance(o, Notify):
                self._on_notify(o.ni, o.peer, o.alive, False)
            elif isinstance(o, Close):
                s = self.streams.pop(o.stream, None)
                if s is not None and s.transport is not None:
                    s.transport.close()
            elif isinstance(o, Connect):
                self._spawn(self._connect(o))
        self._rearm()

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
        for ni in list(self._servers):
            await self.shutdown_ni(ni)
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in list(self.streams.values()):
            if s.transport is not None:
                s.transport.close()
