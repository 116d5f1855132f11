"""A node's LNet debug log: what ``lctl dk`` prints and ``lnetctl debug peer`` writes to.

Theory of operation: real LNet writes CDEBUG/CERROR lines into the libcfs trace buffer that
``lctl dk`` dumps and clears (``jt_dbg_debug_kernel``), and D_WARNING and more severe ones also
to the console. Here the buffer of one node holds the engine's log lines -- on a node daemon
the ``lnet`` logger's records, in the simulator the fabric's log of that node -- plus lines the
front end adds (``debug peer``), bounded to ``MAX_LINES``. Lines are printed in libcfs's
header format ``mask:subsystem:cpu:seconds.micro:0:pid:0:(source) text``; the source is
``lnet`` instead of ``file:line:function()`` (docs/differences.md).
"""

from __future__ import annotations

import collections
import logging
import os
import time
import weakref
from typing import Any

MAX_LINES = 10000
#: libcfs.h S_LNET subsystem mask, D_WARNING / D_NET debug masks
S_LNET, D_WARNING, D_NET, D_ERROR = 0x00000400, 0x00000400, 0x00000200, 0x00020000

_daemon_lines: collections.deque[tuple[float, int, str]] = collections.deque(maxlen=MAX_LINES)
_front_lines: weakref.WeakKeyDictionary[Any, collections.deque[tuple[float, int, str]]] = \
    weakref.WeakKeyDictionary()
_cleared: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


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


def add(rt: Any, text: str, mask: int = D_WARNING) -> None:
    """A line written by the front end (``CDEBUG(mask, ...)``)."""
    _front_lines.setdefault(rt, collections.deque(maxlen=MAX_LINES)).append(
        (_now(rt), mask, text))


def _now(rt: Any) -> float:
    sim = getattr(rt, "sim", None)
    return float(sim.fabric.now) if sim is not None else time.time()


def _engine_lines(rt: Any) -> list[tuple[float, int, str]]:
    sim = getattr(rt, "sim", None)
    if sim is not None:  # the simulator keeps every node's engine log
        return [(t, D_NET, text) for t, name, text in sim.fabric.log if name == rt.name]
    return list(_daemon_lines)


def dump_and_clear(rt: Any) -> str:
    """``lctl dk``: every line since the last dump, oldest first, then forget them."""
    since = _cleared.get(rt, float("-inf"))
    lines = [x for x in _engine_lines(rt) + list(_front_lines.get(rt, ())) if x[0] > since]
    lines.sort(key=lambda x: x[0])
    _cleared[rt] = max([since, _now(rt)] + [x[0] for x in lines])
    if rt in _front_lines:
        _front_lines[rt].clear()
    pid = os.getpid()
    return "".join(f"{S_LNET:08x}:{mask:08x}:0.0:{t:.6f}:0:{pid}:0:(lnet) {text}\n"
                   for t, mask, text in lines)
