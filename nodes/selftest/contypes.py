"""The console's transaction records (lnet/selftest/conrpc.h, console.h): a node of the
console (``lstcon_node``), an RPC of a transaction (``lstcon_rpc``), a transaction
(``lstcon_rpc_trans``) and its statistics (``lstcon_trans_stat``), the operations and the
framework service each one's RPCs go to. ``conrpc`` runs transactions; ``conreply`` reads
their replies.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from nodes.lnet.hdr import LNET_PID_LUSTRE
from nodes.lnet.nid import NID
from nodes.selftest.rpcclient import ClientRpc
from nodes.selftest.wire import Service

LST_TRANS_TIMEOUT = 30
#: RPCs one step of ``postwait`` posts before it lets the node serve other work (issue 27
#: item 1: the kernel posts a transaction's RPCs in one go, on its own thread; here that loop
#: shares one event loop with every other request of the node, or of a whole simulator)
POST_BATCH = 64
LST_TRANS_MIN_TIMEOUT = 3
LST_PING_INTERVAL = 8
#: node states (lnetst.h)
ACTIVE, BUSY, DOWN, UNKNOWN = 0x1, 0x2, 0x4, 0x8


def validate_timeout(t: int) -> int:
    """``LST_VALIDATE_TIMEOUT``."""
    return max(LST_TRANS_MIN_TIMEOUT, min(t, LST_TRANS_TIMEOUT))


class Op(enum.IntEnum):
    """Transaction operations (conrpc.h ``LST_TRANS_*``; 0x1000: private)."""

    SESNEW = 0x1001
    SESEND = 0x1002
    SESQRY = 0x03
    SESPING = 0x04
    TSBCLIADD = 0x1011
    TSBSRVADD = 0x1012
    TSBRUN = 0x1013
    TSBSTOP = 0x1014
    TSBCLIQRY = 0x15
    TSBSRVQRY = 0x16
    STATQRY = 0x21


@dataclass(eq=False)
class ConNode:
    """``struct lstcon_node``: ``refs`` counts the lists holding it."""

    nid: NID
    state: int = UNKNOWN
    stamp: float = 0.0
    timeout: int = 0
    refs: int = 0
    ping: ConRpc | None = None

    @property
    def id_str(self) -> str:
        """``libcfs_id2str``."""
        return f"{LNET_PID_LUSTRE}-{self.nid}"


@dataclass(eq=False)
class ConRpc:
    """``struct lstcon_rpc``."""

    node: ConNode
    rpc: ClientRpc
    trans: Trans | None = None
    posted: bool = False
    finished: bool = False
    status: int = 0
    stamp: float | None = None


@dataclass
class TransStat:
    """``struct lstcon_trans_stat``: RPC total/success/failure, framework counters."""

    rpc: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    rpc_errno: int = 0
    fwk: list[int] = field(default_factory=lambda: [0] * 8)
    fwk_errno: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"rpc": self.rpc, "rpc_errno": self.rpc_errno, "fwk": self.fwk,
                "fwk_errno": self.fwk_errno}


@dataclass(eq=False)
class Trans:
    """``struct lstcon_rpc_trans``."""

    op: Op
    features: int
    rpcs: list[ConRpc] = field(default_factory=list)
    remaining: int = 0
    feats_updated: bool = False
    owner: list[Trans] | None = None
    on_done: Callable[[], None] | None = None
    stat: TransStat = field(default_factory=lambda: TransStat())
    #: the waiting lst went away (a signal in ``wait_event_interruptible``): -EINTR
    interrupted: bool = False


#: a console operation (``lstcon_*``): yields the transactions it waits on, returns the reply
Gen = Generator[Trans, None, dict[str, Any]]


SERVICE = {Op.SESNEW: Service.MAKE_SESSION, Op.SESEND: Service.REMOVE_SESSION,
           Op.SESQRY: Service.DEBUG, Op.SESPING: Service.DEBUG,
           Op.TSBCLIADD: Service.TEST, Op.TSBSRVADD: Service.TEST,
           Op.TSBRUN: Service.BATCH, Op.TSBSTOP: Service.BATCH, Op.TSBCLIQRY: Service.BATCH,
           Op.TSBSRVQRY: Service.BATCH, Op.STATQRY: Service.QUERY_STAT}
