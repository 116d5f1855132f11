"""One ksocklnd connection's states and their transition table (STYLE rule 2): the handshake
order of ``ksocknal_connect``/``lnet_connect`` (active: connreq and hello sent, the peer's
hello awaited) and of ``lnet_accept``/``ksocknal_accept`` (passive: connreq, hello, our reply
or a ctype NONE refusal), then RUNNING until CLOSE. Anything absent from ``TRANSITIONS`` is a
protocol error: the peer's (an ``RX_*`` input: ``WireProtocolError``) or the driver's
(``LocalProtocolError``). ``framing.py`` ``KsockConnection`` is the machine that applies it.
"""

from __future__ import annotations

import enum


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
TRANSITIONS: dict[tuple[ConnState, Input], ConnState] = {
    (S.A_IDLE, Inp.TX_HANDSHAKE): S.A_AWAIT_HELLO, (S.A_AWAIT_HELLO, Inp.RX_HELLO): S.RUNNING,
    (S.P_AWAIT_CONNREQ, Inp.RX_CONNREQ): S.P_AWAIT_HELLO,
    (S.P_AWAIT_HELLO, Inp.RX_HELLO): S.P_HELLO_RECEIVED,
    (S.P_HELLO_RECEIVED, Inp.TX_HELLO): S.RUNNING, (S.P_HELLO_RECEIVED, Inp.TX_REJECT): S.CLOSED,
    (S.RUNNING, Inp.RX_MSG): S.RUNNING, (S.RUNNING, Inp.TX_MSG): S.RUNNING,
    **{(s, Inp.CLOSE): S.CLOSED for s in ConnState if s is not S.ERROR},
}
RX_INPUTS = frozenset({Inp.RX_CONNREQ, Inp.RX_HELLO, Inp.RX_MSG})
HANDSHAKE_RX = frozenset({S.P_AWAIT_CONNREQ, S.A_AWAIT_HELLO, S.P_AWAIT_HELLO})
