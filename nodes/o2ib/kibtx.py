"""o2iblnd's values: the per-NI tunables, a ``kib_tx``, and what the LND asks its transport for.

Theory of operation: ``O2ibTunables`` is ``lnet_ioctl_config_o2iblnd_tunables`` plus the net's
common credits after ``kiblnd_tunables_setup`` (o2iblnd_modparams.c) clamped them: peer
credits within [8, 255] and at most ``credits``; ``peer_credits_hiw`` within [peer_credits/2,
peer_credits - 1]; ``concurrent_sends`` 0 → peer_credits, then within [peer_credits/2,
peer_credits*2]. ``Tx`` is one ``kib_tx``: its message, the LNet message it finalises (an
engine tx id, or a received message to deliver), and o2iblnd's flags (queued, sending,
waiting, status, hstatus, deadline). The outputs (``Connect``, ``Write``, ``Close``,
``Deliver``, ``TxDone``, ``Notify``) are what the transport (simulator fabric or sockets
between ``ib*`` addresses) and the node driver carry out, in order.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from nodes.lnet.hdr import LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from nodes.o2ib.msg import IBLND_MAX_RDMA_FRAGS, IBLND_MSG_VERSION_1, Body, MsgType, RdmaDesc
from nodes.o2ib.pd import MemoryRegion

if TYPE_CHECKING:
    from nodes.o2ib.conn import Conn

IBLND_CREDITS_DEFAULT: Final = 8
IBLND_CREDITS_MAX: Final = 255  # (u8)-1: ibm_credits is one byte
IBLND_TIMEOUT_DEFAULT: Final = 50
IBLND_SERVICE: Final = 987  # ko2iblnd ``service``: the rdma_cm port
MAX_CONN_RACES_BEFORE_ABORT: Final = 20
#: the emulated QP's ACK timeout (IB's is 4.096 us * 2^timeout, tens of ms; sockets between
#: Python daemons on a busy host need more): RETRY_EXC_ERR after (retry_count + 1) of them
ACK_TIMEOUT: Final = 1.0

#: module parameter -> (default, minimum, maximum) as ko2iblnd takes them (modparams.c)
MODPARAMS: Final[dict[str, tuple[int, int, int]]] = {
    "peer_credits": (8, 1, IBLND_CREDITS_MAX), "peer_credits_hiw": (0, 0, IBLND_CREDITS_MAX),
    "concurrent_sends": (0, 0, 2 * IBLND_CREDITS_MAX), "credits": (256, 1, 1 << 20),
    "ntx": (512, 1, 1 << 20), "timeout": (IBLND_TIMEOUT_DEFAULT, 1, 1 << 20),
    "retry_count": (5, 0, 7), "rnr_retry_count": (6, 0, 7), "keepalive": (100, 0, 1 << 20),
    "conns_per_peer": (1, 1, 127), "map_on_demand": (1, 0, 256),
    "fmr_pool_size": (512, 1, 1 << 20), "fmr_flush_trigger": (384, 1, 1 << 20),
    "fmr_cache": (1, 0, 1),
}
#: ``lnd tunables:`` keys (lnetctl's YAML, liblnetconfig_lnd.c ``lustre_o2iblnd_show_tun``
#: order, then conns_per_peer, timeout, tos) -> the module parameter each sets
LNETCTL_KEYS: Final[dict[str, str]] = {
    "peercredits_hiw": "peer_credits_hiw", "map_on_demand": "map_on_demand",
    "concurrent_sends": "concurrent_sends", "fmr_pool_size": "fmr_pool_size",
    "fmr_flush_trigger": "fmr_flush_trigger", "fmr_cache": "fmr_cache", "ntx": "ntx",
    "conns_per_peer": "conns_per_peer",
}


def ipoib_refusal(net: object, lnd: int, o2iblnd: int, interface: str) -> str | None:
    """The line refusing an o2ib net on an interface that is not IPoIB-like (``ib*``): the
    emulated o2iblnd binds only to ``ib*`` interfaces, as ko2iblnd to an IPoIB device."""
    if lnd == o2iblnd and not interface.startswith("ib"):
        return f"cannot add network: {net} needs an IPoIB interface (ib*), not {interface}"
    return None


class TunableError(ValueError):
    """An unknown o2iblnd tunable or a value out of its range: one line."""


@dataclass(frozen=True, slots=True)
class O2ibTunables:
    """One NI's o2iblnd tunables after ``kiblnd_tunables_setup``."""

    peer_credits: int = IBLND_CREDITS_DEFAULT
    peer_credits_hiw: int = 0
    concurrent_sends: int = 0
    credits: int = 256
    ntx: int = 512
    timeout: int = IBLND_TIMEOUT_DEFAULT
    retry_count: int = 5
    rnr_retry_count: int = 6
    keepalive: int = 100
    conns_per_peer: int = 1
    map_on_demand: int = 1
    fmr_pool_size: int = 512  # (no FMR pools are emulated: shown, kept, no effect)
    fmr_flush_trigger: int = 384
    fmr_cache: int = 1

    @classmethod
    def for_ni(cls, peer_credits: int, credits: int, lnd: dict[str, int]) -> O2ibTunables:
        """An NI's: the net's ``peer_credits``/``credits`` (lct_peer_tx_credits,
        lct_max_tx_credits) and its ``lnd tunables:`` (lnetctl's names, ``LNETCTL_KEYS``),
        through ``kiblnd_tunables_setup``. ``TunableError``: an unknown key, a bad value."""
        params = {"peer_credits": min(max(peer_credits, 1), IBLND_CREDITS_MAX),
                  "credits": max(credits, 1)}
        for k, v in lnd.items():
            if k in ("timeout", "tos"):
                continue  # derived from LNet's (kiblnd_timeout) / no ToS emulated
            name = LNETCTL_KEYS.get(k)
            if name is None:
                raise TunableError(f"o2iblnd: unknown lnd tunable {k!r} (known: "
                                   f"{', '.join([*LNETCTL_KEYS, 'timeout', 'tos'])})")
            params[name] = v
        return cls.from_params(params)

    def lnetctl(self) -> dict[str, int]:
        """What ``lnetctl net show -v`` prints under ``lnd tunables:`` before conns_per_peer,
        timeout and tos (``lustre_o2iblnd_show_tun``)."""
        return {k: getattr(self, v) for k, v in LNETCTL_KEYS.items() if k != "conns_per_peer"}

    @classmethod
    def from_params(cls, params: dict[str, int]) -> O2ibTunables:
        """Check each (name, value) against ``MODPARAMS`` and clamp as the kernel does."""
        for k, v in params.items():
            rng = MODPARAMS.get(k)
            if rng is None:
                raise TunableError(f"o2iblnd: unknown tunable {k!r} (known: "
                                   f"{', '.join(sorted(MODPARAMS))})")
            if not rng[1] <= v <= rng[2]:
                raise TunableError(f"o2iblnd: {k}={v} out of range [{rng[1]}, {rng[2]}]")
        t = cls(**params)
        pc = min(max(t.peer_credits, IBLND_CREDITS_DEFAULT), IBLND_CREDITS_MAX, t.credits)
        hiw = t.peer_credits_hiw or 0
        hiw = min(max(hiw, pc // 2), pc - 1)
        cs = t.concurrent_sends or pc
        cs = max(min(cs, pc * 2), pc // 2)
        return cls(**{**{k: getattr(t, k) for k in MODPARAMS}, "peer_credits": pc,
                      "peer_credits_hiw": hiw, "concurrent_sends": cs,
                      "map_on_demand": t.map_on_demand or 1})


# init written out: mypyc compiles it (a dataclass's generated __init__ runs interpreted)
@dataclass(init=False, eq=False, slots=True)
class Tx:
    """``kib_tx``. ``lnet_tx``: the engine's tx id finalised by ``TxDone``; ``deliver``: a
    received PUT/GET reply delivered (``Deliver``) once its data is in ``sink``."""

    type: MsgType
    body: Body
    lnet_tx: int | None = None
    cookie: int = 0
    queued: bool = False
    sending: int = 0
    waiting: bool = False
    status: int = 0
    hstatus: HStatus = HStatus.OK
    deadline: float = 0.0
    payload: bytes | memoryview = b""  # PUT/REPLY source of the RDMA (LNet's, not copied)
    rdma: RdmaDesc | None = None  # PUT_DONE/GET_DONE: where the RDMA writes
    sink: MemoryRegion | None = None  # PUT_ACK / GET_REQ: the registered sink
    deliver: LNetHdr | None = None  # PUT_ACK / GET_REQ: the message to hand to LNet
    credits_sent: int = 0
    wr_ids: list[int] = field(default_factory=list)

    def __init__(self, type: MsgType, body: Body, lnet_tx: int | None = None, cookie: int = 0,
                 *, waiting: bool = False, status: int = 0, hstatus: HStatus = HStatus.OK,
                 deadline: float = 0.0, payload: bytes | memoryview = b"",
                 rdma: RdmaDesc | None = None, sink: MemoryRegion | None = None,
                 deliver: LNetHdr | None = None) -> None:
        self.type, self.body, self.lnet_tx, self.cookie = type, body, lnet_tx, cookie
        self.queued, self.sending, self.waiting, self.status = False, 0, waiting, status
        self.hstatus, self.deadline, self.payload, self.rdma = (hstatus, deadline,
                                                                payload, rdma)
        self.sink, self.deliver, self.credits_sent = sink, deliver, 0
        self.wr_ids = []


class ConnState(enum.IntEnum):
    INIT = 0
    ACTIVE_CONNECT = 1
    PASSIVE_WAIT = 2
    ESTABLISHED = 3
    CLOSING = 4
    DISCONNECTED = 5


class PostRx(enum.Enum):
    DONT_POST = 0
    NO_CREDIT = 1
    PEER_CREDIT = 2
    RSRVD_CREDIT = 3


@dataclass(eq=False, slots=True)
class Peer:
    """``kib_peer_ni``."""

    ni: NID
    nid: NID
    conns: list[Conn] = field(default_factory=list)
    tx_queue: deque[Tx] = field(default_factory=deque)
    connecting: int = 0
    accepting: int = 0
    reconnecting: int = 0
    races: int = 0
    version: int = 0
    incarnation: int = 0
    queue_depth: int = 0
    max_frags: int = IBLND_MAX_RDMA_FRAGS
    error: int = 0
    next_conn: Conn | None = None  # ibp_next_conn: the connection used last


def oob_msgs(version: int) -> int:
    """IBLND_OOB_MSGS: v2 keeps 2 receives for a keepalive and a credit return."""
    return 2 if version != IBLND_MSG_VERSION_1 else 0


# --- what the LND asks for ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Connect:
    """Open a stream (the emulated port 987) from ``ni``'s interface to ``peer``'s."""

    stream: int
    ni: NID
    peer: NID


@dataclass(init=False, slots=True, unsafe_hash=True)
class Write:
    """``data`` then ``tail`` (a large RDMA body, written as it is: not joined) on ``stream``."""

    stream: int
    data: bytes
    tail: bytes | memoryview = b""

    def __init__(self, stream: int, data: bytes, tail: bytes | memoryview = b"") -> None:
        self.stream, self.data, self.tail = stream, data, tail


@dataclass(frozen=True, slots=True)
class Close:
    stream: int


@dataclass(init=False, slots=True, unsafe_hash=True)
class Deliver:
    """``lnet_parse`` of a message whose payload is all here."""

    ni: NID
    peer: NID
    hdr: LNetHdr
    payload: bytes | memoryview

    def __init__(self, ni: NID, peer: NID, hdr: LNetHdr, payload: bytes | memoryview) -> None:
        self.ni, self.peer, self.hdr, self.payload = ni, peer, hdr, payload


@dataclass(init=False, slots=True, unsafe_hash=True)
class TxDone:
    """``lnet_finalize`` of the engine's tx, with ``msg_health_status``."""

    tx_id: int
    rc: int
    hstatus: HStatus

    def __init__(self, tx_id: int, rc: int, hstatus: HStatus) -> None:
        self.tx_id, self.rc, self.hstatus = tx_id, rc, hstatus


@dataclass(frozen=True, slots=True)
class Notify:
    """``lnet_notify`` (``kiblnd_peer_notify``/``kiblnd_peer_alive``)."""

    ni: NID
    peer: NID
    alive: bool


Output = Connect | Write | Close | Deliver | TxDone | Notify
