"""Rate-limited, counted log lines for what a peer can make us say over and over.

Theory of operation: libcfs limits console messages (``CDEBUG_LIMIT`` / ``cfs_rate_limit``,
"Skipped N previous similar messages"); a probe that opened ~6,500 bad connections made the
old socklnd write 5,629 ERROR lines. Here every event is counted per kind (``counts``, what
``SockLND.stats()`` reports), and at most ``burst`` lines per kind are written per
``interval`` seconds; when a window with suppressed lines ends, one line says how many were
skipped. Pure: the caller passes ``now``.
"""

from __future__ import annotations

import logging
from collections import Counter


class RateLimitedLog:
    """Counted log lines, at most ``burst`` per ``interval`` seconds for each kind."""

    def __init__(self, logger: logging.Logger, *, burst: int = 5,
                 interval: float = 10.0) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self.counts: Counter[str] = Counter()  # every event, logged or not
        self.suppressed = 0  # lines not written, all kinds
        self._windows: dict[str, tuple[float, int, int]] = {}  # start, written, skipped

    def log(self, now: float, level: int, kind: str, msg: str) -> bool:
        """Count one ``kind`` event; write ``msg`` unless over the limit. True if written."""
        self.counts[kind] += 1
        start, written, skipped = self._windows.get(kind, (now, 0, 0))
        if now - start >= self.interval:
            if skipped:
                self.logger.log(level, "socklnd: Skipped %d previous similar messages (%s)",
                                skipped, kind)
            start, written, skipped = now, 0, 0
        ok = written < self.burst
        if ok:
            self.logger.log(level, "%s", msg)
            written += 1
        else:
            skipped += 1
            self.suppressed += 1
        self._windows[kind] = (start, written, skipped)
        return ok


__all__ = ["RateLimitedLog"]
