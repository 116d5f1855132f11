"""Payload buffers for bulk receive, reused once no view of them is left.

Theory of operation: ``framing.py`` receives a bulk payload (above ``DIRECT_MIN``) straight
into a buffer of its own and hands it on as a read-only view. Allocating that buffer fresh for
every 1 MiB message costs more than the copy it saves (the daemon's malloc maps every block
above 128 KiB afresh: 256 pages faulted in and zeroed per message, unmapped again when the
consumer drops it); so one LND keeps ``LNET_MTU`` buffers and gives one out again only when
nobody can read it any more.

Ownership is the buffer protocol's own: ``get(n)`` lends a buffer as a writable
``memoryview`` of it, and that view is the borrower's claim. The receiver writes through it
and hands the payload on as a read-only view derived from it (``toreadonly``, slices: every
view of a view holds the bytearray's export); consumers keep views or copy. A ``bytearray``
with a live export cannot be resized (``BufferError``), so ``_free`` tells a buffer that is
still claimed anywhere by trying a resize that changes nothing (``pop`` then ``append`` of the
same byte, no reallocation): no view of it, no reader, reusable. Nobody calls a release: a
claim ends when its last view is garbage (the receiver's own view when it drops it or its
connection goes, the consumer's when it is done), so a consumer cannot forget one, and no
reference count is read (``sys.getrefcount`` counted differently in compiled code, where
references are borrowed: a held buffer looked free; this module is compiled now). Only
views are handed out; the pool alone holds the bytearrays.

How many it keeps follows what its consumers hold at once, as the pages of a real node's MDs
do: a brw read client holds each bulk until its RPC completes, ``concurrency`` of them (lst
up to 64, ``lnet/selftest``), so a fixed handful was not enough and every further bulk was a
fresh mapping (py-spy, issue 13: 37 % of the read client's samples in ``bytearray(n)``). The
pool grows on demand up to ``limit`` buffers (beyond that, buffers are one-off) and gives
back the free ones above ``keep`` when ``trim()`` (the socklnd's once-a-tick monitor) finds
that no buffer was taken since its last call: a busy LND keeps its working set, an idle one
returns to ``keep``. The search for a free one starts after the buffer lent last (claims end
about in the order they were made: the oldest is tried first). Never a buffer someone can
still read.
"""

from __future__ import annotations

from nodes.lnet.hdr import LNET_MTU


def _free(b: bytearray) -> bool:
    """No view of ``b`` is left (a resize is refused while one is: ``BufferError``). The
    resize undoes itself: the last byte popped and appended again, within the allocation."""
    try:
        b.append(b.pop())
    except BufferError:
        return False
    return True


class BufferPool:
    """Preallocated payload buffers (``LNET_MTU`` each) shared by one LND's connections,
    lent as views and reused once no view of one is left (module doc): the kernel then
    writes into pages already mapped, instead of a fresh 1 MiB allocation faulting in 256
    pages per message. Grows up to ``limit`` while its consumers hold that many;
    ``trim()`` shrinks an idle pool back to ``keep``."""

    def __init__(self, keep: int = 8, limit: int = 256) -> None:
        self.keep = keep
        self.limit = max(keep, limit)
        self._bufs: list[bytearray] = []
        self._next = 0  # where the next search starts: after the buffer lent last
        self._taken = False  # a buffer was given out since the last trim()

    @property
    def size(self) -> int:
        """Buffers pooled (free or held)."""
        return len(self._bufs)

    def get(self, n: int) -> memoryview:
        """A writable view of ``n`` bytes of a buffer no view of which is left: the caller's
        claim on it, held as long as this view or one derived from it lives."""
        if n <= LNET_MTU:
            self._taken = True
            bufs = self._bufs
            count = len(bufs)
            start = self._next if self._next < count else 0
            for k in range(count):
                i = start + k
                if i >= count:
                    i -= count
                b = bufs[i]
                if _free(b):
                    self._next = i + 1
                    return memoryview(b)[:n]
            if count < self.limit:
                b = bytearray(LNET_MTU)
                bufs.append(b)
                self._next = count + 1
                return memoryview(b)[:n]
        return memoryview(bytearray(n))

    def trim(self) -> int:
        """If no buffer was taken since the last call, drop the free buffers above ``keep``
        (a held one stays: its holder still reads it). Returns how many were dropped."""
        if self._taken or len(self._bufs) <= self.keep:
            self._taken = False
            return 0
        kept: list[bytearray] = []
        dropped = 0
        for b in self._bufs:
            if len(kept) < self.keep or not _free(b):
                kept.append(b)
            else:
                dropped += 1
        self._bufs = kept
        self._next = 0
        return dropped


__all__ = ["BufferPool"]
