"""The emulated HCA's protection domain and memory regions (``ib_alloc_pd``, ``ib_reg_mr``):
what an RDMA's key may touch (issue 28; nodes/o2ib/verbs.py checks RDMAs against it)."""

from __future__ import annotations

from dataclasses import dataclass

from nodes.lnd.bufpool import BufferPool


# init written out: mypyc compiles it (a dataclass's generated __init__ runs interpreted)
@dataclass(init=False, slots=True)
class MemoryRegion:
    """``ib_reg_mr``: a buffer, its keys and the remote access it grants."""

    rkey: int
    buf: bytearray | memoryview
    remote_write: bool = True
    remote_read: bool = True

    def __init__(self, rkey: int, buf: bytearray | memoryview, remote_write: bool = True,
                 remote_read: bool = True) -> None:
        self.rkey, self.buf = rkey, buf
        self.remote_write, self.remote_read = remote_write, remote_read


class ProtectionDomain:
    """The node's registered regions, by rkey (``ib_alloc_pd`` + the regions in it). Their
    memory comes from ``pool`` (the pages of a real node's MDs are mapped already: a fresh
    1 MiB allocation per message faulted in 256 pages, 19 % of a receiver's samples), and
    is reused once nobody holds a view of it (``BufferPool``)."""

    def __init__(self) -> None:
        self._mrs: dict[int, MemoryRegion] = {}
        self._next_key = 0x100
        self.pool = BufferPool()

    def reg_mr(self, length: int, *, remote_write: bool = True,
               remote_read: bool = True) -> MemoryRegion:
        self._next_key += 1
        mr = MemoryRegion(self._next_key, self.pool.get(length), remote_write, remote_read)
        self._mrs[mr.rkey] = mr
        return mr

    def dereg_mr(self, mr: MemoryRegion) -> None:
        self._mrs.pop(mr.rkey, None)

    def check(self, rkey: int, addr: int, length: int, *, write: bool) -> MemoryRegion | None:
        """The region an RDMA may touch, or None (bad key, right or bounds)."""
        mr = self._mrs.get(rkey)
        if mr is None or not (mr.remote_write if write else mr.remote_read):
            return None
        return mr if addr >= 0 and addr + length <= len(mr.buf) else None


__all__ = ["MemoryRegion", "ProtectionDomain"]
