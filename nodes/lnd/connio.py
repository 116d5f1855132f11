"""Established connections on non-blocking sockets: the socklnd's scheduler threads
(``ksocknal_scheduler``: ``ksocknal_process_receive`` / ``ksocknal_process_transmit``).

Theory of operation (aioquic's ``asyncio/protocol.py`` is the model: the loop only moves
bytes; the machines decide): each connection's socket is registered with the event loop
directly (``add_reader``; ``add_writer`` only while its send queue is not empty), in the same
call that establishes it, and unregistered before the socket is closed — there is no moment
in which the loop watches a file descriptor whose socket is gone or reused (issue 11 item 7:
the old transport attached in a later task, after a racing close).

* Receiving: ``recv_into`` straight into ``KsockConnection.get_buffer()`` — the staging
  buffer for headers and small frames, a bulk payload's own buffer for the rest of it — then
  ``buffer_updated``; frames go to ``deliver`` in order. Each wake-up reads until the socket
  is drained or ``READ_BUDGET`` reads were made (fairness between connections).
* Sending: txs queued on a connection (``queue``) are written by ``sendmsg`` of the send
  queue's buffers (``sendq.py``: heads and payloads, never joined); the first write is
  deferred to the end of the current loop iteration, so everything queued meanwhile (an
  engine's batch of actions) goes out in one system call; or, where the batch's end is
  known (the frames of a read, the completions of a write, a caller's ``hold``), to that
  end, in the same turn (a deferred flush is one more loop turn per batch). Completed txs
  go to ``completed``.
* Pipelining: the frames of a read are handed on ``RX_SLICE`` at a time, and what each
  slice made the node queue (ACKs, replies) is written before the next slice is handled,
  so the peer works on the first answers while this side works on the rest (rather than
  the two nodes taking turns on a whole window of messages).
* Failures (reset, EOF, a protocol error, the socket's own error) go to ``failed(conn, why,
  errno)``: the caller closes and fails what the connection held.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from nodes.lnd.conntable import Conn
from nodes.lnd.framing import Event
from nodes.lnd.sendq import Tx
from nodes.lnet.errors import WireProtocolError

#: linux/sockios.h SIOCOUTQ (== TIOCOUTQ): bytes not yet acknowledged by the peer
SIOCOUTQ = 0x5411
READ_BUDGET = 16
WRITE_BUDGET = 8
#: Frames handed to the node per batch; after each batch what it queued is written at once.
RX_SLICE = 16


def loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """The loop's clock, as cheap a call as it can be: asyncio's own loops read
    ``time.monotonic()`` in ``BaseEventLoop.time``, a Python method (an interpreted call, read
    several times per message by the driver, the runtime and the socklnd); the same clock
    read directly is a C call. Another loop's ``time`` (or a patched one) is kept as it is."""
    if getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time


@dataclass(eq=False, slots=True)
class SockState:
    """The driver's part of one connection: its socket and loop registrations."""

    sock: socket.socket
    fd: int
    writing: bool = False  # add_writer is armed
    flush_pending: bool = False  # a call_soon(_flush) is scheduled


class ConnIO:
    """Moves the bytes of every established connection of one socklnd."""

    def __init__(self, *, deliver: Callable[[Conn, list[Event]], None],
                 completed: Callable[[Conn, list[Tx]], None],
                 failed: Callable[[Conn, str, int | None], None]) -> None:
        self._loop: asyncio.AbstractEventLoop  # the running loop, from the first attach
        self._clock: Callable[[], float] = time.monotonic  # its clock (loop_clock), likewise
        self._deliver = deliver
        self._completed = completed
        self._failed = failed
        self._dirty: list[Conn] = []  # connections with a flush pending (flush_pending)
        self._flush_armed = False  # a call_soon(flush_dirty) is scheduled
        self._held = 0  # hold() depth: a caller writes the dirty connections when done

    def attach(self, c: Conn, sock: socket.socket) -> None:
        """Start moving ``c``'s bytes now (synchronously: no window before the loop watches
        the socket); ``ksocknal_lib_setup_sock``'s TCP_NODELAY (``nagle`` 0)."""
        self._loop = asyncio.get_running_loop()
        self._clock = loop_clock(self._loop)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        st = c.io = SockState(sock, sock.fileno())
        self._loop.add_reader(st.fd, self._readable, c)
        if c.sendq:
            self._kick(c, st)

    def detach(self, c: Conn) -> None:
        """Stop watching ``c``'s socket, then close it."""
        st = c.io
        if not isinstance(st, SockState):
            return
        if st.fd >= 0:
            if st.writing:
                self._loop.remove_writer(st.fd)
            self._loop.remove_reader(st.fd)
            st.fd = -1
        st.sock.close()

    # --- send ---------------------------------------------------------------------------
    def queue(self, c: Conn, tx: Tx) -> None:
        """``ksocknal_queue_tx_locked``: pack ``tx``'s head and queue it on ``c``."""
        tx.head = c.framer.send_lnet_head(tx.hdr, tx.payload)
        c.sendq.push(tx)
        st = c.io
        if isinstance(st, SockState):
            self._kick(c, st)

    def _kick(self, c: Conn, st: SockState) -> None:
        if not st.writing and not st.flush_pending:
            st.flush_pending = True
            self._dirty.append(c)
            if not self._flush_armed and not self._held:
                self._flush_armed = True
                self._loop.call_soon(self._flush_soon)

    def hold(self) -> None:
        """Txs queued from now until ``release`` are written by it, in this loop turn (not
        by a deferred flush on the next one): around a batch whose end is known (the frames
        of a read, the completions of a write, a timer's engine call)."""
        self._held += 1

    def release(self) -> None:
        self._held -= 1
        if not self._held and self._dirty:
            self.flush_dirty()

    def _flush_soon(self) -> None:
        self._flush_armed = False
        self.flush_dirty()

    def flush_dirty(self) -> None:
        """Write now what every connection queued since its last write, and what the
        completions of those writes queued meanwhile (held: no deferred flush for them)."""
        dirty = self._dirty
        self._held += 1
        try:
            while dirty:
                c = dirty.pop()
                st = c.io
                if isinstance(st, SockState) and st.flush_pending:
                    self._flush(c)
        finally:
            self._held -= 1

    def _flush(self, c: Conn) -> None:
        st = c.io
        assert isinstance(st, SockState)
        st.flush_pending = False
        if c.closed:
            return
        sendq, sock = c.sendq, st.sock
        done: list[Tx] = []
        wrote = 0
        for _ in range(WRITE_BUDGET):
            if not sendq:
                break
            bufs, size = sendq.iov()
            try:
                n = sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._failed(c, f"connection lost: {exc}", exc.errno)
                return
            wrote += n
            done += sendq.advance(n)
            if n < size:  # the kernel took less than offered: its buffer is full
                break
        if wrote:
            c.last_tx = self._clock()
        if sendq and not st.writing:
            self._loop.add_writer(st.fd, self._flush, c)
            st.writing = True
        elif not sendq and st.writing:
            self._loop.remove_writer(st.fd)
            st.writing = False
        if done:
            self._held += 1  # (hold: what the completions queued is written here)
            try:
                self._completed(c, done)
            finally:
                self.release()

    # --- receive ------------------------------------------------------------------------
    def _readable(self, c: Conn) -> None:
        self._held += 1  # (hold: what the frames made the node queue is written here)
        try:
            self._read(c)
        finally:
            self.release()

    def _read(self, c: Conn) -> None:
        st = c.io
        assert isinstance(st, SockState)
        framer, sock = c.framer, st.sock
        for _ in range(READ_BUDGET):
            buf = framer.get_buffer()
            try:
                n = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._failed(c, f"connection lost: {exc}", exc.errno)
                return
            if n == 0:
                # socklnd_cb.c ksocknal_receive: EOF in the middle of a message is -EPROTO
                self._failed(c, "protocol error: EOF in the middle of a message"
                             if framer.rx_pending else "peer closed the connection", None)
                return
            c.last_rx = self._clock()
            try:
                events = framer.buffer_updated(n)
            except WireProtocolError as exc:
                self._failed(c, f"protocol error: {exc}", None)
                return
            for i in range(0, len(events), RX_SLICE):
                self._deliver(c, events[i:i + RX_SLICE] if len(events) > RX_SLICE else events)
                if c.closed:
                    return
                if self._dirty:  # answers go out while the next frames are handled
                    self.flush_dirty()
            if framer.error is not None:
                self._failed(c, f"protocol error: {framer.error}", None)
                return
            if n < len(buf):
                break

    def feed(self, c: Conn, events: list[Event]) -> None:
        """Frames that arrived with the handshake, then bytes held meanwhile."""
        if events:
            self._deliver(c, events)
        if c.closed:
            return
        try:
            held = c.framer.receive_data(b"")
        except WireProtocolError as exc:
            self._failed(c, f"protocol error: {exc}", None)
            return
        if held:
            self._deliver(c, held)
        if not c.closed and c.framer.error is not None:
            self._failed(c, f"protocol error: {c.framer.error}", None)

    # --- probes for the progress monitor ------------------------------------------------
    @staticmethod
    def probe(c: Conn) -> tuple[int, int | None, bool]:
        """(SIOCOUTQ, ``tcpi_bytes_acked``, ``tcpi_retransmits`` > 0) of ``c``'s socket.
        Retransmitting means the peer never acknowledged some data (zero-window probes do
        not count), so TCP_USER_TIMEOUT will end a dead path; bytes acked moving is
        progress that SIOCOUTQ sampling cannot see while the queue is refilled (not
        ``tcpi_last_ack_recv``: zero-window probe ACKs refresh it while nothing moves)."""
        st = c.io
        if not isinstance(st, SockState) or st.fd < 0:
            return 0, None, False
        try:
            outq = struct.unpack("i", fcntl.ioctl(st.fd, SIOCOUTQ, b"\0" * 4))[0]
        except OSError:
            outq = 0
        try:
            info = st.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 128)
        except OSError:
            return outq, None, False
        if len(info) < 128:
            return outq, None, len(info) > 2 and info[2] > 0
        return outq, struct.unpack_from("Q", info, 120)[0], info[2] > 0

    @staticmethod
    def set_user_timeout(c: Conn, seconds: float) -> None:
        """``TCP_USER_TIMEOUT``: how long TCP keeps unacknowledged data before giving up."""
        st = c.io
        if isinstance(st, SockState):
            with contextlib.suppress(OSError):
                st.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                                   int(seconds * 1000))


__all__ = ["READ_BUDGET", "SIOCOUTQ", "WRITE_BUDGET", "ConnIO", "SockState", "loop_clock"]
