"""Sans-I/O ksocklnd V3/V4 connection: bytes in, frames out; frames in, bytes out (h11-style).

Theory of operation (STYLE rules 1, 2, 4): one ``KsockConnection`` per TCP connection. It owns
no socket and no clock. The handshake order is the kernel's:

* active (``ksocknal_connect`` → ``lnet_connect`` + ``ksocknal_create_conn``): send the
  acceptor connreq and our hello together, then expect the peer's hello;
* passive (``lnet_acceptor`` → ``lnet_accept`` → ``ksocknal_accept``/``ksocknal_create_conn``):
  expect the connreq, then the peer's hello, then reply with our hello — or with a hello of
  ctype SOCKLND_CONN_NONE to refuse it (lost connection race / duplicate), which closes.

After the handshake both sides exchange ``ksock_msg`` frames of the hellos' protocol: V3
(``lnet_hdr_nid4``) or V4 (``lnet_hdr_nid16``, large NIDs: ``wire6.py``). Every state change
goes through ``connstate.TRANSITIONS`` (the states and their table, ``connstate.py``); an input
with no entry is a protocol error: peer input raises ``WireProtocolError`` (hstatus
REMOTE_ERROR), local misuse raises ``LocalProtocolError``, and either moves the machine to
ERROR, where every further input raises again.

Receiving is zero-copy for bulk (``ksocknal_process_receive``'s states KSM_HEADER → LNET_HEADER
→ LNET_PAYLOAD): the driver asks ``get_buffer()`` where the next bytes go and reports
``buffer_updated(n)`` (asyncio's ``BufferedProtocol`` contract). Headers and small frames land
in a reused staging buffer (``STAGE_SIZE``) and are parsed in place; a payload larger than
``DIRECT_MIN`` gets a buffer of its own as soon as its header is parsed, and the kernel writes
the rest of it straight there (the kernel's ``ksnc_rx_kiov`` into the MD's pages; the first
read after such a payload asks for one frame head only, so a stream of bulk frames never
passes through the stage); it is handed on as a read-only ``memoryview`` of that buffer,
never copied. The buffer comes from the LND's ``BufferPool`` and is reused only once no view
of it is left. Small payloads are handed on as ``bytes``. ``receive_data(bytes)`` feeds the
same parser (handshake, tests).

Buffers are bounded: the stage never grows; a payload buffer is at most ``LNET_MTU`` (the
header is checked first); so a connection holds at most ``wire.MAX_FRAME_SIZE`` of a frame in
progress. The passive side stops parsing after the peer's hello until it has replied (the
kernel reads the hello synchronously, then hands the socket on); bytes that arrive meanwhile
are held in the stage. A chunk of good frames then garbage: ``buffer_updated``/``receive_data``
return the good events and record the error in ``error`` (state ERROR); the next call raises
it, so a driver checks ``error`` after handling the events of each chunk.
"""

from __future__ import annotations

from nodes.lnd import framehead, lnethdr, wire, wire6
from nodes.lnd.bufpool import BufferPool
from nodes.lnd.connstate import (
    HANDSHAKE_RX,
    RX_INPUTS,
    TRANSITIONS,
    ConnState,
    Input,
    LocalProtocolError,
)
from nodes.lnd.frames import (
    ConnreqReceived,
    Event,
    HelloReceived,
    LNetMessageReceived,
    NoopReceived,
    Payload,
)
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNetHdr, MsgType
from nodes.lnet.nid import NID

#: Staging buffer per connection: headers and small frames are received and parsed in place.
STAGE_SIZE = 64 << 10
#: Payloads above this are received into a buffer of their own (zero copy, never reused).
DIRECT_MIN = 16 << 10
_KSM = wire.KSOCK_MSG_HDR_SIZE
_HEAD = wire.LNET_FRAME_HEAD

S = ConnState
Inp = Input


class KsockConnection:
    """The per-connection machine. ``active`` is True for the connecting side."""

    def __init__(self, *, active: bool, pool: BufferPool | None = None) -> None:
        self.active = active
        self._pool = pool if pool is not None else BufferPool(0, 0)  # (0: each one-off)
        self.state = S.A_IDLE if active else S.P_AWAIT_CONNREQ
        self.error: WireProtocolError | None = None
        self.flip = False  # peer byte order swapped (ksnc_flip)
        self.peer_hello: wire.KsockHello | None = None
        #: the protocol of the hellos: V3 (nid4 headers) or V4 (large NIDs, lnet_hdr_nid16),
        #: the active side's choice by address family, the passive side's from its hello
        self.version = wire.KSOCK_PROTO_V3
        self._head = _HEAD  # ksock_msg_hdr + the LNet header of this protocol
        self._stage = bytearray(STAGE_SIZE)
        self._mv = memoryview(self._stage)
        self._start = self._end = 0  # unparsed bytes: _stage[_start:_end]
        self._need = 4  # handshake: bytes the unit being read needs (magic first)
        # bulk payload in progress: its buffer (claimed), bytes in it, header, ksm, head
        self._pbuf: memoryview | None = None
        self._plen = self._pgot = 0
        self._phdr: LNetHdr | None = None
        self._pksm, self._phead = (0, 0, 0), b""
        self._head_only = False  # a bulk payload just ended: next read one head only

    # --- state table --------------------------------------------------------------------
    def _fire(self, inp: Input) -> None:
        if self.state is S.RUNNING and (inp is Inp.RX_MSG or inp is Inp.TX_MSG):
            return  # the table's (RUNNING, RX_MSG|TX_MSG) -> RUNNING, once per frame: no
            # lookup (an Enum's hash is a Python call, two per key: ~1 us a frame)
        nxt = TRANSITIONS.get((self.state, inp))
        if nxt is None:
            prev = self.state
            self.state = S.ERROR
            if inp in RX_INPUTS:
                raise lnethdr.bad_frame(f"{inp.value} in state '{prev.value}'")
            raise LocalProtocolError(f"cannot {inp.value} in state '{prev.value}'")
        self.state = nxt

    @property
    def rx_pending(self) -> int:
        """Bytes of a frame begun but not finished (``ksnc_rx_started``): what a stall holds."""
        if self._pbuf is not None:
            return _HEAD + self._pgot
        return self._end - self._start if self.state is S.RUNNING else 0

    @property
    def _buf(self) -> memoryview:
        """The bytes buffered for the frame in progress (staged, or its payload so far)."""
        if self._pbuf is not None:
            return self._pbuf[:self._pgot]
        return self._mv[self._start:self._end]

    # --- receive ------------------------------------------------------------------------
    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty while receiving is legal)."""
        if self._pbuf is not None:
            return self._pbuf[self._pgot:]
        if self._start == self._end:
            self._start = self._end = 0
            if self._head_only:
                self._head_only = False
                return self._mv[:_HEAD]
        elif self._end == STAGE_SIZE or (self._start and STAGE_SIZE - self._end < _HEAD):
            n = self._end - self._start  # a partial unit (< one small frame): to the front
            self._stage[:n] = self._mv[self._start:self._end]
            self._start, self._end = 0, n
        return self._mv[self._end:]

    def buffer_updated(self, nbytes: int) -> list[Event]:
        """``nbytes`` were written into the last ``get_buffer()``; return the frames they
        finish.

        Raises:
            WireProtocolError: the bytes (or earlier ones) violate the protocol; the machine
                is then in ERROR and stays there.
        """
        if self.error is not None:
            raise self.error
        events: list[Event] = []
        try:
            if self._pbuf is not None:
                self._pgot += nbytes
                if self._pgot < self._plen:
                    return events
                events.append(self._finish_payload())
            else:
                self._end += nbytes
            if self.state is S.RUNNING:
                self._parse_running(events)
            elif self.state in HANDSHAKE_RX:
                self._parse_handshake(events)
            elif self.state is S.P_HELLO_RECEIVED:
                if self._end == STAGE_SIZE:
                    raise lnethdr.bad_frame("peer sent too much before our hello reply")
            elif self._end > self._start:
                raise lnethdr.bad_frame(f"unexpected data in state '{self.state.value}'")
        except WireProtocolError as exc:
            self.state = S.ERROR
            self.error = exc
            if not events:
                raise
        return events

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Feed bytes from the peer (copied in); return the complete frames they finish
        (raises ``WireProtocolError`` as ``buffer_updated``)."""
        if (err := self.error) is not None:  # (a local: mypyc would check ``self.error`` below
            raise err                         # against mypy's narrowing of it to None)
        view = memoryview(data)
        events: list[Event] = []
        pos = 0
        while True:
            buf = self.get_buffer()
            n = min(len(buf), len(view) - pos)
            buf[:n] = view[pos:pos + n]
            pos += n
            try:
                events += self.buffer_updated(n)
            except WireProtocolError:
                if not events:
                    raise
                return events  # the error is recorded; the next call raises it
            if self.error is not None or pos >= len(view):
                return events
            if n == 0:  # no room left: the stage holds a unit that cannot complete
                self.state = S.ERROR
                self.error = lnethdr.bad_frame("peer sent too much before our hello reply")
                if not events:
                    raise self.error
                return events

    def _parse_handshake(self, events: list[Event]) -> None:
        while self.state in HANDSHAKE_RX and self._end - self._start >= self._need:
            b = self._mv[self._start:self._start + self._need]
            connreq = self.state is S.P_AWAIT_CONNREQ
            ev = self._step_connreq(b) if connreq else self._step_hello(b)
            if ev is not None:
                self._start += len(b)
                self._need = 4
                events.append(ev)
        if self.state is S.RUNNING:
            self._parse_running(events)

    def _step_connreq(self, b: memoryview) -> Event | None:
        if len(b) == 4:
            self.flip = wire.connreq_flip(int.from_bytes(b, "little"))
            self._need = 8
            return None
        if len(b) == 8:  # lnet_accept reads the version, then the rest by it
            self._need = wire6.connreq_size(
                int.from_bytes(b[4:8], "big" if self.flip else "little"))
            return None
        nid = wire6.unpack_connreq(b, self.flip)
        self._fire(Inp.RX_CONNREQ)
        return ConnreqReceived(nid=nid)

    def _step_hello(self, b: memoryview) -> Event | None:
        if len(b) == 4:
            self.flip = wire.hello_flip(int.from_bytes(b, "little"))
            self._need = 8
            return None
        if len(b) == 8:
            version = int.from_bytes(b[4:8], "big" if self.flip else "little")
            if version != wire.KSOCK_PROTO_V4:
                wire.check_hello_version(version)
            self.version = version
            self._need = wire6.HELLO4_SIZE if version == wire.KSOCK_PROTO_V4 \
                else wire.HELLO_SIZE
            return None
        if self.version == wire.KSOCK_PROTO_V4:
            return self._hello_received(wire6.unpack_hello(b, self.flip))
        if len(b) == wire.HELLO_SIZE:
            nips = wire.hello_nips(b, self.flip)
            if nips:
                self._need = wire.HELLO_SIZE + 4 * nips
                return None
        return self._hello_received(wire.unpack_hello(b))

    def _hello_received(self, hello: wire.KsockHello) -> Event:
        self.peer_hello = hello
        self._use(hello.version)
        self._fire(Inp.RX_HELLO)
        return HelloReceived(hello=hello)

    def _use(self, version: int) -> None:
        self.version = version
        self._head = wire6.LNET_FRAME_HEAD16 if version == wire.KSOCK_PROTO_V4 else _HEAD

    def _parse_running(self, events: list[Event]) -> None:
        """``ksocknal_process_receive``: every whole frame in the stage, in place; a bulk
        payload begun here continues in its own buffer."""
        mv, start, end, flip = self._mv, self._start, self._end, self.flip
        head = self._head
        unpack = wire6.unpack_hdr if head != _HEAD else lnethdr.unpack_hdr
        try:
            while end - start >= _KSM:
                t, csum, c0, c1 = wire.unpack_ksm_hdr(mv, flip, start)
                if t == wire.KSOCK_MSG_NOOP:
                    wire.verify_csum(mv[start:start + _KSM], csum)
                    start += _KSM
                    self._fire(Inp.RX_MSG)
                    events.append(NoopReceived(zc_cookies=(c0, c1)))
                    continue
                if end - start < head:
                    break
                hdr = unpack(mv[start + _KSM:start + head])
                plen = hdr.payload_length
                body = start + head
                if end - body >= plen:
                    if csum:
                        wire.verify_csum(mv[start:body], csum, mv[body:body + plen])
                    payload = bytes(mv[body:body + plen]) if plen else b""
                    start = body + plen
                    self._fire(Inp.RX_MSG)
                    events.append(LNetMessageReceived(hdr=hdr, payload=payload,
                                                      zc_cookies=(c0, c1)))
                    continue
                if plen <= DIRECT_MIN:
                    break  # a small frame: wait for the rest of it in the stage
                self._pbuf = pbuf = self._pool.get(plen)  # its own buffer (ksnc_rx_kiov)
                self._plen, self._pgot = plen, end - body
                pbuf[:self._pgot] = mv[body:end]
                self._phdr, self._pksm = hdr, (csum, c0, c1)
                self._phead = bytes(mv[start:body]) if csum else b""
                start = end
                break
        finally:
            self._start, self._end = start, end

    def _finish_payload(self) -> Event:
        pbuf, hdr, (csum, c0, c1) = self._pbuf, self._phdr, self._pksm
        assert pbuf is not None and hdr is not None
        self._pbuf, self._phdr, self._pgot = None, None, 0
        self._head_only = True
        view = pbuf.toreadonly()  # (the claim passes to the consumer's view, bufpool.py)
        if csum:
            wire.verify_csum(self._phead, csum, view)
        self._fire(Inp.RX_MSG)
        return LNetMessageReceived(hdr=hdr, payload=view, zc_cookies=(c0, c1))

    # --- send ---------------------------------------------------------------------------
    def send_handshake(self, connreq_nid: NID, hello: wire.KsockHello) -> bytes:
        """Active side: the acceptor connreq (``lnet_connect``) followed by our hello."""
        self._fire(Inp.TX_HANDSHAKE)
        self._need = 4
        self._use(hello.version)
        return wire6.pack_connreq(connreq_nid) + wire6.pack_any_hello(hello)

    def send_hello(self, hello: wire.KsockHello) -> bytes:
        """Passive side: reply with our hello; ctype SOCKLND_CONN_NONE refuses and closes."""
        refuse = hello.ctype == wire.SOCKLND_CONN_NONE
        self._fire(Inp.TX_REJECT if refuse else Inp.TX_HELLO)
        return wire6.pack_any_hello(hello)

    def send_lnet_head(self, hdr: LNetHdr, payload: bytes | bytearray | memoryview, *,
                       checksum: bool = False) -> bytes:
        """The ksock_msg_hdr + lnet_hdr of one KSOCK_MSG_LNET frame; the payload follows it
        on the wire as its own buffer (scatter-gather, never joined). Zero-copy cookies are
        unused: we never request ZC ACKs."""
        if hdr.payload_length != len(payload) or (
                hdr.type in (MsgType.ACK, MsgType.GET) and len(payload)):
            raise LocalProtocolError("payload does not match the header")
        self._fire(Inp.TX_MSG)
        if self._head != _HEAD:  # V4: lnet_hdr_nid16
            return wire6.pack_lnet_head(hdr, payload, checksum=checksum)
        if checksum:
            return wire.pack_lnet_head(hdr, payload, checksum=True)
        return framehead.pack_head(hdr)

    def send_lnet(self, hdr: LNetHdr, payload: bytes, *, checksum: bool = False) -> bytes:
        """One whole KSOCK_MSG_LNET frame (head + payload joined: tests and tools)."""
        return self.send_lnet_head(hdr, payload, checksum=checksum) + payload

    def send_noop(self) -> bytes:
        """A KSOCK_MSG_NOOP (keepalive, ``ksocknal_send_keepalive_locked``)."""
        self._fire(Inp.TX_MSG)
        return wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_NOOP))

    def close(self) -> None:
        """Local close; further input raises; a payload begun is dropped."""
        self._pbuf = None
        if self.state is not S.ERROR:
            self._fire(Inp.CLOSE)


__all__ = ["DIRECT_MIN", "STAGE_SIZE", "ConnState", "ConnreqReceived", "Event",
           "HelloReceived", "Input", "KsockConnection", "LNetMessageReceived",
           "LocalProtocolError", "NoopReceived", "Payload"]
