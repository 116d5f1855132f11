"""brw data patterns: what ``check=simple|full`` writes and verifies (lnet/selftest/brw_test.c).

Theory of operation: a brw bulk of ``length`` bytes at ``offset`` into its first page is a
list of page segments (``srpc_init_bulk``). The side that sends the data fills each segment
with a 64-bit magic (``brw_fill_page``): ``full`` every 8 bytes, ``simple`` the first and
the last 8 bytes of each segment, ``none``/``discard`` nothing; the receiving side checks
the same words (``brw_check_page``). The sender of good data uses ``BRW_MAGIC``; a buffer
about to be written by the peer is poisoned with ``BRW_POISON`` first, so data that never
arrived cannot pass the check. Words are little-endian, as an x86 node stores a ``__u64``.

Patterns are immutable ``bytes`` built once per (length, offset, check, magic) and shared
(``pattern``): a 1 MiB ``full`` buffer costs one allocation, then none. ``verify`` compares
whole buffers with one memcmp for ``full`` and two words per page for ``simple``.
"""

from __future__ import annotations

import functools
import struct

PAGE_SIZE = 4096
BRW_MSIZE = 8  # sizeof(__u64)
BRW_MAGIC = 0xEEB0EEB1EEB2EEB3
BRW_POISON = 0xBEEFBEEFBEEFBEEF
LST_BRW_READ = 1
LST_BRW_WRITE = 2
CHECK_NONE = 1
CHECK_SIMPLE = 2
CHECK_FULL = 3
CHECK_DISCARD = 4
CHECKS = {CHECK_NONE: "none", CHECK_SIMPLE: "simple", CHECK_FULL: "full",
          CHECK_DISCARD: "discard"}
_WORD = struct.Struct("<Q")


def segments(offset: int, length: int) -> list[tuple[int, int]]:
    """(start in the buffer, nob) of each page segment (``srpc_init_bulk``)."""
    out: list[tuple[int, int]] = []
    pos, off = 0, offset
    while length > 0:
        nob = min(off + length, PAGE_SIZE) - off
        out.append((pos, nob))
        pos += nob
        length -= nob
        off = 0
    return out


def valid_layout(offset: int, length: int) -> bool:
    """``brw_fill_page``/``brw_check_page`` want 8-byte aligned segments (a real node
    LASSERTs; here the test is refused with -EINVAL instead)."""
    return all(s % BRW_MSIZE == 0 and n % BRW_MSIZE == 0
               for s, n in segments(offset % PAGE_SIZE, length)) and offset % BRW_MSIZE == 0


@functools.lru_cache(maxsize=8)
def pattern(length: int, offset: int, check: int, magic: int) -> bytes:
    """The bulk a sender of ``check`` data holds (``brw_fill_bulk``)."""
    if check == CHECK_FULL:
        return _WORD.pack(magic) * (length // BRW_MSIZE) + bytes(length % BRW_MSIZE)
    buf = bytearray(length)
    if check == CHECK_SIMPLE:
        word = _WORD.pack(magic)
        for start, nob in segments(offset % PAGE_SIZE, length):
            buf[start:start + BRW_MSIZE] = word
            if nob > BRW_MSIZE:
                buf[start + nob - BRW_MSIZE:start + nob] = word
    return bytes(buf)


def verify(data: bytes | memoryview, offset: int, check: int, magic: int = BRW_MAGIC
           ) -> int | None:
    """None if ``data`` carries ``check``'s pattern, else the first bad word's value
    (``brw_check_bulk``: "Bad data in page ...: %#llx, %#llx expected")."""
    length = len(data)
    if check not in (CHECK_SIMPLE, CHECK_FULL):
        return None
    if check == CHECK_FULL:  # memcmp: a memoryview compared to bytes goes word by word
        if (data if isinstance(data, bytes) else bytes(data)) == pattern(length, offset,
                                                                          check, magic):
            return None
        for pos in range(0, length - BRW_MSIZE + 1, BRW_MSIZE):
            (word,) = _WORD.unpack_from(data, pos)
            if word != magic:
                return int(word)
        return None
    for start, nob in segments(offset % PAGE_SIZE, length):
        for pos in ((start, start + nob - BRW_MSIZE) if nob > BRW_MSIZE else (start,)):
            (word,) = _WORD.unpack_from(data, pos)
            if word != magic:
                return int(word)
    return None
