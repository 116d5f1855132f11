"""Payload buffers for bulk receive, reused once nobody holds a view of them.

Theory of operation: ``framing.py`` receives a bulk payload (above ``DIRECT_MIN``) straight
into a buffer of its own and hands it on as a read-only view. Allocating that buffer fresh for
every 1 MiB message costs more than the copy it saves (the daemon's malloc maps every block
above 128 KiB afresh: 256 pages faulted in and zeroed per message, unmapped again when the
consumer drops it); so one LND keeps ``LNET_MTU`` buffers and gives one out again only when
CPython's reference count says no view of it is left.

How many it keeps follows what its consumers hold at once, as the pages of a real node's MDs
do: a brw read client holds each bulk until its RPC completes, ``concurrency`` of them (lst
up to 64, ``lnet/selftest``), so a fixed handful was not enough and every further bulk was a
fresh mapping (py-spy, issue 13: 37 % of the read client's samples in ``bytearray(n)``). The
pool grows on demand up to ``limit`` buffers (beyond that, buffers are one-off) and gives
back the free ones above ``keep`` when ``trim()`` (the socklnd's once-a-tick monitor) finds
that no buffer was taken since its last call: a busy LND keeps its working set, an idle one
returns to ``keep``. Never a buffer someone can still read.
"""

from __future__ import annotations

import sys

from nodes.lnet.hdr import LNET_MTU


class BufferPool:
    """Preallocated payload buffers (``LNET_MTU`` each) shared by one LND's connections,
    reused once nobody holds a view of them any more (CPython's reference count says so):
    the kernel then writes into pages already mapped, instead of a fresh 1 MiB allocation
    faulting in 256 pages per message. Grows up to ``limit`` while its consumers hold that
    many; ``trim()`` shrinks an idle pool back to ``keep``."""

    def __init__(self, keep: int = 8, limit: int = 256) -> None:
        self.keep = keep
        self.limit = max(keep, limit)
        self._bufs: list[bytearray] = []
        self._taken = False  # a buffer was given out since the last trim()

    @property
    def size(self) -> int:
        """Buffers pooled (free or held)."""
        return len(self._bufs)

    def get(self, n: int) -> bytearray:
        """A buffer of at least ``n`` bytes that nobody else references."""
        if n <= LNET_MTU:
            self._taken = True
            for b in self._bufs:
                if sys.getrefcount(b) <= 3:  # the list, ``b`` and getrefcount's argument
                    return b
            if len(self._bufs) < self.limit:
                self._bufs.append(bytearray(LNET_MTU))
                return self._bufs[-1]
        return bytearray(n)

    def trim(self) -> int:
        """If no buffer was taken since the last call, drop the free buffers above ``keep``
        (a held one stays: its holder still reads it). Returns how many were dropped."""
        if self._taken or len(self._bufs) <= self.keep:
            self._taken = False
            return 0
        kept: list[bytearray] = []
        dropped = 0
        for b in self._bufs:
            if len(kept) < self.keep or sys.getrefcount(b) > 3:  # the list, ``b``, argument
                kept.append(b)
            else:
                dropped += 1
        self._bufs = kept
        return dropped


__all__ = ["BufferPool"]
