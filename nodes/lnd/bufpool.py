"""Payload buffers for bulk receive, reused once nobody holds a view of them.

Theory of operation: ``framing.py`` receives a bulk payload (above ``DIRECT_MIN``) straight
into a buffer of its own and hands it on as a read-only view. Allocating that buffer fresh for
every 1 MiB message costs more than the copy it saves (a new mapping faulted in, 256 pages per
message, when the previous ones are still held); so one LND keeps a few ``LNET_MTU`` buffers
and gives one out again only when CPython's reference count says no view of it is left. A
payload its consumer keeps simply keeps its buffer: the pool allocates another (up to
``keep``; beyond that, buffers are one-off). Never a buffer someone can still read.
"""

from __future__ import annotations

import sys

from nodes.lnet.hdr import LNET_MTU


class BufferPool:
    """Preallocated payload buffers (``LNET_MTU`` each) shared by one LND's connections,
    reused once nobody holds a view of them any more (CPython's reference count says so):
    the kernel then writes into pages already mapped, instead of a fresh 1 MiB allocation
    faulting in 256 pages per message. A payload kept by its consumer simply keeps its
    buffer; the pool then allocates another (up to ``keep``; beyond, buffers are one-off)."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._bufs: list[bytearray] = []

    def get(self, n: int) -> bytearray:
        """A buffer of at least ``n`` bytes that nobody else references."""
        if n <= LNET_MTU:
            for b in self._bufs:
                if sys.getrefcount(b) <= 3:  # the list, ``b`` and getrefcount's argument
                    return b
            if len(self._bufs) < self.keep:
                self._bufs.append(bytearray(LNET_MTU))
                return self._bufs[-1]
        return bytearray(n)


__all__ = ["BufferPool"]
