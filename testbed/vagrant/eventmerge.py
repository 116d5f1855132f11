"""Every host's events on one clock, in one ordered log (pure: no sockets, no files).

Theory of operation (issue 15 item 4): each host's daemons append events stamped with *that
host's* clock. The orchestrator reads them in batches together with the host's clock (one
round trip, ``nodes/daemon/control.py`` ``events``), and estimates the host's offset as
NTP's client does: the remote reading lies between the local send time ``t0`` and receive
time ``t1``, so ``offset = remote - (t0 + t1) / 2`` within ``(t1 - t0) / 2``. It keeps the
estimate of the round trip with the shortest delay seen recently (NTP's clock filter: the
least delayed sample is the least wrong), and maps each event to ``t - offset``.

Order: an event is released to the log only once every host has been read past its time (the
*watermark*: the oldest "read up to" time among the hosts, on the orchestrator's clock), so the
log file itself is sorted, not just its readers' copies. The orchestrator's own events wait in
the same queue. A host that cannot be read (all its daemons down) stops holding the others
back after ``stale_after`` seconds.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

#: Seconds an offset estimate stays the reference unless a less delayed one comes.
FILTER_WINDOW = 30.0


@dataclass
class HostClock:
    """What is known of one host's clock and how far its log has been read."""

    offset: float | None = None
    delay: float = float("inf")
    measured_at: float = 0.0
    read_until: float = float("-inf")  # orchestrator time up to which its events are in

    def sample(self, t0: float, remote: float, t1: float) -> None:
        delay = max(0.0, t1 - t0)
        if self.offset is None or delay <= self.delay or t1 - self.measured_at > FILTER_WINDOW:
            self.offset = remote - (t0 + t1) / 2
            self.delay = delay
            self.measured_at = t1


@dataclass
class Merger:
    """Queue of events from several hosts, released in time order behind the watermark."""

    hosts: dict[str, HostClock] = field(default_factory=dict)
    stale_after: float = 10.0
    _heap: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def add_host(self, name: str) -> None:
        self.hosts.setdefault(name, HostClock())

    def batch(self, host: str, t0: float, remote_now: float, t1: float,
              events: list[dict[str, Any]]) -> None:
        """One read of ``host``'s log at remote time ``remote_now`` between ``t0`` and ``t1``."""
        clock = self.hosts.setdefault(host, HostClock())
        clock.sample(t0, remote_now, t1)
        assert clock.offset is not None
        for ev in events:
            out = dict(ev)
            out["t_host"] = ev["t"]
            out["t"] = round(ev["t"] - clock.offset, 6)
            out.setdefault("host", host)
            self.push(out)
        clock.read_until = t0  # every event stamped before t0 (our clock) was in this read

    def push(self, event: dict[str, Any]) -> None:
        """An event already on our clock (the orchestrator's own)."""
        heapq.heappush(self._heap, (float(event["t"]), next(self._seq), event))

    def watermark(self, now: float) -> float:
        live = [c.read_until for c in self.hosts.values()
                if now - c.read_until <= self.stale_after]
        return min(live) if live else now

    def release(self, now: float, everything: bool = False) -> list[dict[str, Any]]:
        """Events that can no longer be preceded by an unread one, oldest first."""
        limit = float("inf") if everything else self.watermark(now)
        out = []
        while self._heap and self._heap[0][0] <= limit:
            out.append(heapq.heappop(self._heap)[2])
        return out

    def offsets(self) -> dict[str, dict[str, float | None]]:
        return {h: {"offset": c.offset, "delay": c.delay} for h, c in self.hosts.items()}
