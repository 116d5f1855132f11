"""Sans-I/O ksocklnd V3 connection: bytes in, frames out; frames in, bytes out (h11-style).

Theory of operation (STYLE rules 1, 2, 4): one ``KsockConnection`` per TCP connection. It owns
no socket and no clock. The handshake order is the kernel's:

* active (``ksocknal_connect`` → ``lnet_connect`` + ``ksocknal_create_conn``): send the
  acceptor connreq and our hello together, then expect the peer's hello;
* passive (``lnet_acceptor`` → ``lnet_accept`` → ``ksocknal_accept``/``ksocknal_create_conn``):
  expect the connreq, then the peer's hello, then reply with our hello — or with a hello of
  ctype SOCKLND_CONN_NONE to refuse it (lost connection race / duplicate), which closes.

After the handshake both sides exchange V3 ``ksock_msg`` frames. Every state change goes through
``_TRANSITIONS``; an input with no entry is a protocol error: peer input raises
``WireProtocolError`` (hstatus REMOTE_ERROR), local misuse raises ``LocalProtocolError``, and
either moves the machine to ERROR, where every further input raises again.

Parsing is incremental and bounded: the machine buffers at most the frame it is reading, never
more than ``wire.MAX_FRAME_SIZE`` (ksock_msg_hdr + lnet_hdr + LNET_MTU); magic, version, type and
payload_length are checked as soon as their bytes arrive, so garbage is refused early. The
passive side stops parsing after the peer's hello until it has replied (the kernel reads the
hello synchronously and only then hands the socket to its scheduler); bytes that arrive in the
meantime are held, bounded by the same limit.

If a chunk holds good frames followed by garbage, ``receive_data`` returns the good events and
records the error in ``error`` (state ERROR); the next call raises it. A driver therefore checks
``error`` after handling the events of each chunk.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodes.lnd import wire
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_HDR_SIZE, LNetHdr, MsgType
from nodes.lnet.nid import NID


class LocalProtocolError(Exception):
    """The driver asked for something illegal in the current state (a bug, not the peer's)."""


class ConnState(enum.Enum):
    A_IDLE = "active: nothing sent yet"
    A_AWAIT_HELLO = "active: connreq+hello sent, awaiting peer hello"
    P_AWAIT_CONNREQ = "passive: awaiting acceptor connreq"
    P_AWAIT_HELLO = "passive: awaiting peer hello"
    P_HELLO_RECEIVED = "passive: peer hello received, our reply pending"
    RUNNING = "established"
    CLOSED = "closed"
    ERROR = "error"


class Input(enum.Enum):
    RX_CONNREQ = "connreq received"
    RX_HELLO = "hello received"
    RX_MSG = "ksock_msg received"
    TX_HANDSHAKE = "send connreq+hello"
    TX_HELLO = "send hello reply"
    TX_REJECT = "send hello reply with ctype NONE"
    TX_MSG = "send ksock_msg"
    CLOSE = "close"


S = ConnState
Inp = Input
#: (state, input) -> next state. Everything absent is a protocol error (STYLE rule 2).
_TRANSITIONS: dict[tuple[ConnState, Input], ConnState] = {
    (S.A_IDLE, Inp.TX_HANDSHAKE): S.A_AWAIT_HELLO,
    (S.A_AWAIT_HELLO, Inp.RX_HELLO): S.RUNNING,
    (S.P_AWAIT_CONNREQ, Inp.RX_CONNREQ): S.P_AWAIT_HELLO,
    (S.P_AWAIT_HELLO, Inp.RX_HELLO): S.P_HELLO_RECEIVED,
    (S.P_HELLO_RECEIVED, Inp.TX_HELLO): S.RUNNING,
    (S.P_HELLO_RECEIVED, Inp.TX_REJECT): S.CLOSED,
    (S.RUNNING, Inp.RX_MSG): S.RUNNING,
    (S.RUNNING, Inp.TX_MSG): S.RUNNING,
    **{(s, Inp.CLOSE): S.CLOSED for s in ConnState if s is not S.ERROR},
}
_RX_INPUTS = frozenset({Inp.RX_CONNREQ, Inp.RX_HELLO, Inp.RX_MSG})


# --- events (facts that happened on the wire) --------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ConnreqReceived:
    nid: NID  # acr_nid: the NI the peer wants


@dataclass(frozen=True, slots=True, kw_only=True)
class HelloReceived:
    hello: wire.KsockHello


@dataclass(frozen=True, slots=True, kw_only=True)
class LNetMessageReceived:
    hdr: LNetHdr
    payload: bytes
    zc_cookies: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoopReceived:
    zc_cookies: tuple[int, int] = (0, 0)


Event = ConnreqReceived | HelloReceived | LNetMessageReceived | NoopReceived


class KsockConnection:
    """The per-connection machine. ``active`` is True for the connecting side."""

    def __init__(self, *, active: bool) -> None:
        self.active = active
        self.state = S.A_IDLE if active else S.P_AWAIT_CONNREQ
        self.error: WireProtocolError | None = None
        self.flip = False  # peer byte order swapped (ksnc_flip)
        self.peer_hello: wire.KsockHello | None = None
        self._buf = bytearray()
        self._need = self._initial_need()
        self._held = bytearray()  # passive: bytes after the hello, before our reply
        self._ksm: tuple[int, int, int, int] | None = None
        self._hdr: LNetHdr | None = None

    # --- state table --------------------------------------------------------------------
    def _fire(self, inp: Input) -> None:
        nxt = _TRANSITIONS.get((self.state, inp))
        if nxt is None:
            prev = self.state
            self.state = S.ERROR
            if inp in _RX_INPUTS:
                raise wire._bad(f"{inp.value} in state '{prev.value}'")
            raise LocalProtocolError(f"cannot {inp.value} in state '{prev.value}'")
        changed = nxt is not self.state
        self.state = nxt
        if inp in _RX_INPUTS or changed:
            # a frame was consumed or the phase changed; sending in RUNNING must not touch
            # a partly received frame (the receive and send directions are independent)
            self._buf.clear()
            self._need = self._initial_need()

    def _initial_need(self) -> int:
        # 4 bytes of magic first: the kernel reads and checks it before anything else
        return 4 if self.state in (S.P_AWAIT_CONNREQ, S.A_AWAIT_HELLO, S.P_AWAIT_HELLO) else (
            wire.KSOCK_MSG_HDR_SIZE if self.state is S.RUNNING else 1)

    # --- receive ------------------------------------------------------------------------
    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer; return the complete frames they finish.

        Raises:
            WireProtocolError: the bytes (or earlier ones) violate the protocol; the machine is
                then in ERROR and stays there.
        """
        if self.error is not None:
            raise self.error
        if self.state is S.P_HELLO_RECEIVED:
            if len(self._held) + len(data) > wire.MAX_FRAME_SIZE:
                self._fail(wire._bad("peer sent too much before our hello reply"))
            self._held += data
            return []
        if self._held:
            data = bytes(self._held) + data
            self._held.clear()
        events: list[Event] = []
        view = memoryview(data)
        pos = 0
        try:
            while True:
                if len(self._buf) < self._need:
                    take = min(self._need - len(self._buf), len(view) - pos)
                    self._buf += view[pos:pos + take]
                    pos += take
                    if len(self._buf) < self._need:
                        break
                ev = self._step()
                if ev is not None:
                    events.append(ev)
                    if self.state is S.P_HELLO_RECEIVED:
                        self._held += view[pos:]
                        break
        except WireProtocolError as exc:
            self.state = S.ERROR
            self.error = exc
            if not events:
                raise
        return events

    def _fail(self, exc: WireProtocolError) -> None:
        self.state = S.ERROR
        self.error = exc
        raise exc

    def _step(self) -> Event | None:
        """``_buf`` holds ``_need`` bytes: check them; either raise ``_need`` or emit a frame."""
        if self.state is S.P_AWAIT_CONNREQ:
            return self._step_connreq()
        if self.state in (S.A_AWAIT_HELLO, S.P_AWAIT_HELLO):
            return self._step_hello()
        if self.state is S.RUNNING:
            return self._step_msg()
        raise wire._bad(f"unexpected data in state '{self.state.value}'")

    def _step_connreq(self) -> Event | None:
        b = self._buf
        if len(b) == 4:
            self.flip = wire.connreq_flip(int.from_bytes(b, "little"))
            self._need = wire.CONNREQ_SIZE
            return None
        nid = wire.unpack_connreq(b)
        self._fire(Inp.RX_CONNREQ)
        return ConnreqReceived(nid=nid)

    def _step_hello(self) -> Event | None:
        b = self._buf
        order = "big" if self.flip else "little"
        if len(b) == 4:
            self.flip = wire.hello_flip(int.from_bytes(b, "little"))
            self._need = 8
            return None
        if len(b) == 8:
            wire.check_hello_version(int.from_bytes(b[4:8], order))
            self._need = wire.HELLO_SIZE
            return None
        if len(b) == wire.HELLO_SIZE:
            nips = wire.hello_nips(b, self.flip)
            if nips:
                self._need = wire.HELLO_SIZE + 4 * nips
                return None
        hello = wire.unpack_hello(b)
        self.peer_hello = hello
        self._fire(Inp.RX_HELLO)
        return HelloReceived(hello=hello)

    def _step_msg(self) -> Event | None:
        b = self._buf
        hsz = wire.KSOCK_MSG_HDR_SIZE
        if self._ksm is None:
            self._ksm = wire.unpack_ksm_hdr(b, self.flip)
            if self._ksm[0] == wire.KSOCK_MSG_LNET:
                self._need = hsz + LNET_HDR_SIZE
                return None
        elif self._hdr is None:
            self._hdr = wire.unpack_hdr(memoryview(b)[hsz:])
            if self._hdr.payload_length:
                self._need = hsz + LNET_HDR_SIZE + self._hdr.payload_length
                return None
        _t, csum, c0, c1 = self._ksm
        wire.verify_csum(b, csum)
        hdr = self._hdr
        ev: Event
        if hdr is None:
            ev = NoopReceived(zc_cookies=(c0, c1))
        else:
            ev = LNetMessageReceived(hdr=hdr, payload=bytes(b[hsz + LNET_HDR_SIZE:]),
                                     zc_cookies=(c0, c1))
        self._ksm = None
        self._hdr = None
        self._fire(Inp.RX_MSG)
        return ev

    # --- send ---------------------------------------------------------------------------
    def send_handshake(self, connreq_nid: NID, hello: wire.KsockHello) -> bytes:
        """Active side: the acceptor connreq (``lnet_connect``) followed by our hello."""
        self._fire(Inp.TX_HANDSHAKE)
        return wire.pack_connreq(connreq_nid) + wire.pack_hello(hello)

    def send_hello(self, hello: wire.KsockHello) -> bytes:
        """Passive side: reply with our hello; ctype SOCKLND_CONN_NONE refuses and closes."""
        refuse = hello.ctype == wire.SOCKLND_CONN_NONE
        self._fire(Inp.TX_REJECT if refuse else Inp.TX_HELLO)
        return wire.pack_hello(hello)

    def send_lnet(self, hdr: LNetHdr, payload: bytes, *, checksum: bool = False) -> bytes:
        """One KSOCK_MSG_LNET frame (zero-copy cookies unused: we never request ZC ACKs)."""
        if hdr.payload_length != len(payload) or (
                hdr.type in (MsgType.ACK, MsgType.GET) and payload):
            raise LocalProtocolError("payload does not match the header")
        self._fire(Inp.TX_MSG)
        return wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_LNET, hdr=hdr, payload=payload),
                             checksum=checksum)

    def send_noop(self) -> bytes:
        """A KSOCK_MSG_NOOP (keepalive, ``ksocknal_send_keepalive_locked``)."""
        self._fire(Inp.TX_MSG)
        return wire.pack_msg(wire.KsockMsg(wire.KSOCK_MSG_NOOP))

    def close(self) -> None:
        """Local close; further input raises."""
        if self.state is not S.ERROR:
            self._fire(Inp.CLOSE)


__all__ = ["ConnState", "ConnreqReceived", "Event", "HelloReceived", "Input",
           "KsockConnection", "LNetMessageReceived", "LocalProtocolError", "NoopReceived"]
