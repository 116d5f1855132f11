"""Per-connection send queue for scatter-gather writes (``ksnc_tx_queue``), sans-I/O.

Theory of operation: a tx is queued on a connection with its 96-byte head (ksock_msg_hdr +
lnet_hdr, packed by ``ksocknal_tx_prep`` time) and its payload as a separate buffer. The
driver asks ``iov()`` for the next buffers — head, payload, head, payload... of as many txs as
fit ``IOV_MAX_BUFS``/``IOV_MAX_BYTES``, the first one starting where the last write stopped —
and hands them to one ``sendmsg``; ``advance(n)`` then says which txs are now wholly in the
kernel (``tx_resid == 0``: ``ksocknal_tx_done`` with 0). Nothing is ever joined or copied:
many small frames go out in one system call, a 1 MiB payload straight from the caller's
buffer.

A tx whose first bytes were written but not its last is *posted* (``posted``): the one a
failure reports as a network/remote timeout (seed 003, ``nodes/lnd/errmap.py``); the txs
behind it were never posted. ``nob`` is the bytes not yet written (``ksnc_tx_nob``), what
``ksocknal_find_conn_locked`` compares to pick the least loaded connection.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from nodes.lnet.hdr import LNetHdr

#: At most this many buffers per sendmsg (IOV_MAX is 1024; beyond ~64 nothing is gained).
IOV_MAX_BUFS = 128
#: ...and about this many bytes (the kernel takes what fits the socket buffer anyway).
IOV_MAX_BYTES = 4 << 20

Buffer = bytes | bytearray | memoryview


@dataclass(init=False, eq=False, slots=True)
class Tx:
    """One LNET message the LND was asked to send (``struct ksock_tx``); its ``__init__``
    written out (compiled, where the dataclass one would run as Python: one per message)."""

    tx_id: int
    hdr: LNetHdr
    payload: Buffer
    deadline: float = 0.0  # while waiting for a connection (ksocknal_flush_stale_txs)
    head: bytes = b""  # ksock_msg_hdr + lnet_hdr, packed when queued on a connection
    done: bool = False

    def __init__(self, tx_id: int, hdr: LNetHdr, payload: Buffer, deadline: float = 0.0,
                 head: bytes = b"", done: bool = False) -> None:
        self.tx_id, self.hdr, self.payload, self.deadline = tx_id, hdr, payload, deadline
        self.head, self.done = head, done

    @property
    def nob(self) -> int:
        """Frame bytes: head + payload (``tx_nob``)."""
        return len(self.head) + len(self.payload)


class SendQueue:
    """The txs queued on one connection, and how much of the first one is written."""

    __slots__ = ("nob", "off", "txs")

    def __init__(self) -> None:
        self.txs: deque[Tx] = deque()
        self.off = 0  # bytes of txs[0] already written
        self.nob = 0  # bytes queued and not yet written

    def __len__(self) -> int:
        return len(self.txs)

    def push(self, tx: Tx) -> None:
        self.txs.append(tx)
        self.nob += tx.nob

    @property
    def posted(self) -> Tx | None:
        """The tx partly written, if any."""
        return self.txs[0] if self.txs and self.off else None

    def iov(self) -> tuple[list[Buffer], int]:
        """The buffers of the next write and their size: the rest of the first tx, then
        whole txs."""
        out: list[Buffer] = []
        size = 0
        off = self.off
        for tx in self.txs:
            hlen = len(tx.head)
            if off < hlen:
                out.append(memoryview(tx.head)[off:] if off else tx.head)
                size += hlen - off
                off = 0
            else:
                off -= hlen
            if len(tx.payload) > off:
                out.append(memoryview(tx.payload)[off:] if off else tx.payload)
                size += len(tx.payload) - off
            off = 0
            if len(out) >= IOV_MAX_BUFS - 1 or size >= IOV_MAX_BYTES:
                break
        return out, size

    def advance(self, n: int) -> list[Tx]:
        """``n`` bytes were written: pop and return the txs now wholly written."""
        done: list[Tx] = []
        self.nob -= n
        n += self.off
        txs = self.txs
        while txs and n >= txs[0].nob:
            tx = txs.popleft()
            n -= tx.nob
            done.append(tx)
        self.off = n
        return done

    def clear(self) -> tuple[Tx | None, list[Tx]]:
        """Empty the queue: (the posted tx or None, the txs never posted)."""
        posted = self.posted
        txs = list(self.txs)
        self.txs.clear()
        self.off = self.nob = 0
        return posted, txs[1:] if posted is not None else txs


__all__ = ["IOV_MAX_BUFS", "IOV_MAX_BYTES", "Buffer", "SendQueue", "Tx"]
