"""A node's LNet debug log: what ``lctl dk`` prints and ``lnetctl debug peer`` writes to.

Theory of operation: real LNet writes CDEBUG/CERROR lines into the libcfs trace buffer that
``lctl dk`` dumps and clears (``jt_dbg_debug_kernel``), and D_WARNING and more severe ones also
to the console. Here the buffer of one node holds the engine's log lines -- on a node daemon
the ``lnet`` logger's records, in the simulator the fabric's log of that node -- plus lines the
front end adds (``debug peer``), bounded to ``MAX_LINES``. Lines are printed in libcfs's
header format ``mask:subsystem:cpu:seconds.micro:0:pid:0:(source) text``; the source is
``lnet`` instead of ``file:line:function()`` (docs/differences.md).

A daemon's own lines are kept as libcfs keeps its trace buffer: in pages of their own, not as
objects (:class:`_Ring`: packed records in anonymous ``mmap`` chunks, the oldest chunk
dropped whole, at most :data:`MAX_BYTES`). As 10,000 Python tuples of a float, an int and a
string they were ~3 MB of small objects that lived for minutes among the event loop's
transient ones and pinned pymalloc's arenas: the soak's daemons grew by 8 MB of arenas for
4 MB of live objects (issue 11, ``benchmarks/soak.py --memprobe``).
"""

from __future__ import annotations

import collections
import logging
import mmap
import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime

MAX_LINES = 10000
#: a daemon's own lines: bytes kept (~10,000 lines of ~100 characters), in chunks of CHUNK
MAX_BYTES, CHUNK = 1 << 20, 1 << 18
_REC = struct.Struct("<dII")  # created, mask, length of the UTF-8 text that follows
_PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS  # the process's own pages, not shared memory
#: libcfs.h S_LNET subsystem mask, D_WARNING / D_NET debug masks
S_LNET, D_WARNING, D_NET, D_ERROR = 0x00000400, 0x00000400, 0x00000200, 0x00020000



class _Ring:
    """Lines packed into anonymous ``mmap`` chunks of :data:`CHUNK` bytes: appended to the
    newest, the oldest unmapped whole once more than :data:`MAX_BYTES` are kept."""

    def __init__(self) -> None:
        self.chunks: collections.deque[tuple[mmap.mmap, list[int]]] = collections.deque()

    def append(self, line: tuple[float, int, str]) -> None:
        text = line[2].encode("utf-8", "surrogateescape")[:CHUNK - _REC.size]
        size = _REC.size + len(text)
        if not self.chunks or self.chunks[-1][1][0] + size > CHUNK:
            self.chunks.append((mmap.mmap(-1, CHUNK, flags=_PRIVATE), [0]))
            while len(self.chunks) * CHUNK > MAX_BYTES:
                self.chunks.popleft()[0].close()
        buf, used = self.chunks[-1]
        _REC.pack_into(buf, used[0], line[0], line[1], len(text))
        buf[used[0] + _REC.size:used[0] + size] = text
        used[0] += size

    def __iter__(self) -> Iterator[tuple[float, int, str]]:
        for buf, used in list(self.chunks):
            at = 0
            while at < used[0]:
                t, mask, n = _REC.unpack_from(buf, at)
                at += _REC.size
                yield t, mask, buf[at:at + n].decode("utf-8", "surrogateescape")
                at += n


_daemon_lines = _Ring()
#: per node (``Runtime.dlc_state``): the front end's own lines, and the time of the last dump
_FRONT, _CLEARED = "dk_front_lines", "dk_cleared"
#: a simulated node's engine lines the sim server moved out of the fabric's log to its file,
#: at most SIM_KEPT_LINES per node (a 1,000-node server keeps ~150 MB at worst)
_KEPT, SIM_KEPT_LINES = "dk_kept_lines", 1000


class _Capture(logging.Handler):
    """Keeps the ``lnet`` logger's records of this daemon process."""

    def emit(self, record: logging.LogRecord) -> None:
        mask = D_ERROR if record.levelno >= logging.ERROR else \
            D_WARNING if record.levelno >= logging.WARNING else D_NET
        _daemon_lines.append((record.created, mask, record.getMessage()))


def install() -> None:
    """Capture the ``lnet`` logger (called once by the node daemon's command modules)."""
    logger = logging.getLogger("lnet")
    if not any(isinstance(h, _Capture) for h in logger.handlers):
        logger.addHandler(_Capture(level=logging.DEBUG))  # at the logger's own level


def add(rt: Runtime, text: str, mask: int = D_WARNING) -> None:
    """A line written by the front end (``CDEBUG(mask, ...)``)."""
    rt.dlc_state.setdefault(_FRONT, collections.deque(maxlen=MAX_LINES)).append(
        (rt.host.debug_clock(), mask, text))


def keep(rt: Runtime, t: float, text: str) -> None:
    """A simulated node's engine line at virtual time ``t``, leaving the fabric's log (the
    long-lived sim server writes that to a file): kept, bounded, for the next ``lctl dk``."""
    rt.dlc_state.setdefault(_KEPT, collections.deque(maxlen=SIM_KEPT_LINES)).append(
        (t, D_NET, text))


def _engine_lines(rt: Runtime) -> list[tuple[float, int, str]]:
    kept = rt.host.engine_log()
    if kept is not None:  # the runtime keeps its engine's log (the simulator's fabric)
        return [(t, D_NET, text) for t, text in kept]
    return list(_daemon_lines)  # a daemon: this process's ``lnet`` logger, captured


def dump_and_clear(rt: Runtime) -> str:
    """``lctl dk``: every line since the last dump, oldest first, then forget them."""
    state = rt.dlc_state
    since: float = state.get(_CLEARED, float("-inf"))
    front, kept = state.get(_FRONT), state.get(_KEPT)
    lines = [x for x in list(kept or ()) + _engine_lines(rt) + list(front or ()) if x[0] > since]
    lines.sort(key=lambda x: x[0])
    state[_CLEARED] = max([since, rt.host.debug_clock()] + [x[0] for x in lines])
    for done in (front, kept):
        if done is not None:
            done.clear()
    pid = os.getpid()
    return "".join(f"{S_LNET:08x}:{mask:08x}:0.0:{t:.6f}:0:{pid}:0:(lnet) {text}\n"
                   for t, mask, text in lines)
