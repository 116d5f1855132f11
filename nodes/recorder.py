"""The recorder: a node's LNet state sampled at a fixed period into ``RUNDIR/nodes/NODE.rec``
(issue 16 item 1; the format is ``lnet-rec/1``, docs/events.md §3).

Theory of operation: the node driver (daemon or simulator) owns one ``Recorder`` per engine and
calls ``maybe_sample(now)`` after its engine calls, and again from a timer armed at
``next_sample()`` when that is not None (a change made inside a period is then sampled at the
period's end even if the node goes idle); the first call at or after each period boundary reads
the engine directly (no control round trip): per local NI and per peer NI health, state, tx
credits (now and lowest), messages sent/received/dropped, and, if the driver reports them
(``tx``/``rx``, one dict update per message), payload bytes; route and gateway states; the
node's routing state and global counters. A row is written only for an object that is new or
whose values moved (sample-and-hold; a vanished object gets one ``gone`` row), so an idle node
costs a scan and no output. Rows are buffered and appended as one gzip member per
``flush_period`` of samples (and at ``close``), each with a single ``O_APPEND`` write: a killed
daemon loses at most that much, and the file stays a valid gzip stream up to its last whole
member.

Time: ``t = now + clock_offset``, so a daemon whose ``now`` is the event loop's monotonic clock
passes ``clock_offset = time.time() - loop.time()`` and its rows line up with events.jsonl;
the simulator passes virtual time and offset 0 (``clock="virtual"``).

Sans-I/O engine, I/O at the edge: this module reads engine state and writes one file; it never
calls the engine's entry points, so sampling cannot change what the engine does.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
from pathlib import Path
from typing import Any

from nodes.lnet.engine import LNetEngine
from nodes.lnet.ni import LNET_NI_STATUS_UP
from nodes.lnet.nid import NID
from nodes.lnet.router import (
    ROUTING_DISABLED,
    ROUTING_ENABLED,
    ROUTING_STARTING,
    ROUTING_STOPPING,
)

FORMAT = "lnet-rec/1"
COLUMNS = ("t", "kind", "id", "peer", "state", "health", "credits", "min_credits", "sends",
           "recvs", "drops", "tx_bytes", "rx_bytes")
DEFAULT_PERIOD = 0.1
DEFAULT_FLUSH = 1.0
ROUTING_NAMES = {ROUTING_DISABLED: "disabled", ROUTING_STARTING: "starting",
                 ROUTING_ENABLED: "enabled", ROUTING_STOPPING: "stopping"}
Row = tuple[Any, ...]  # the columns after t, kind and id


def rec_path(rundir: str | Path, node: str) -> Path:
    """``RUNDIR/nodes/NODE.rec`` (testbed/runstate.py's layout; nodes/ does not import it)."""
    return Path(rundir) / "nodes" / f"{node}.rec"


class Recorder:
    """Samples one engine into one ``.rec`` file."""

    def __init__(self, engine: LNetEngine, path: str | Path, *, node: str,
                 period: float = DEFAULT_PERIOD, clock: str = "unix",
                 clock_offset: float = 0.0, flush_period: float = DEFAULT_FLUSH) -> None:
        if not period > 0:
            raise ValueError(f"recorder period must be > 0, not {period!r}")
        self.engine = engine
        self.path = Path(path)
        self.node = node
        self.period = float(period)
        self.clock_offset = clock_offset
        self.flush_period = flush_period
        self.samples = 0
        self._next = -math.inf
        self._pending = False
        self._flush_at = -math.inf
        self._last: dict[tuple[str, str], Row] = {}
        self._nid_text: dict[NID, str] = {}
        self._bytes: dict[NID, list[int]] = {}  # local NI or peer NI -> [tx, rx]
        self._rows: list[list[Any]] = []
        self._header: list[list[Any]] | None = [
            list(COLUMNS),
            *[[0, "meta", key, "", value] + [""] * 8 for key, value in (
                ("format", FORMAT), ("node", node), ("period", f"{self.period:g}"),
                ("clock", clock))]]

    # ------------------------------------------------------------------ driver hooks
    def tx(self, ni: NID, lpni: NID, nbytes: int) -> None:
        """A payload of ``nbytes`` handed to the LND from ``ni`` to ``lpni`` (Transmit)."""
        self._add(ni, lpni, 0, nbytes)

    def rx(self, ni: NID, peer: NID, nbytes: int) -> None:
        """A payload of ``nbytes`` received on ``ni`` from peer NI ``peer``."""
        self._add(ni, peer, 1, nbytes)

    def _add(self, ni: NID, peer: NID, side: int, nbytes: int) -> None:
        """(Once per message: the known pairs are counted here, ``_count`` adds a new one.)"""
        counts = self._bytes
        a, b = counts.get(ni), counts.get(peer)
        if a is None or b is None:
            self._count(ni, side, nbytes)
            self._count(peer, side, nbytes)
            return
        a[side] += nbytes
        b[side] += nbytes

    def _count(self, nid: NID, side: int, nbytes: int) -> None:
        pair = self._bytes.get(nid)
        if pair is None:
            pair = self._bytes[nid] = [0, 0]
        pair[side] += nbytes

    def next_sample(self) -> float | None:
        """When the driver must call ``maybe_sample`` again even if the engine stays idle (a
        call inside the current period left a change unsampled), else None. The daemon arms
        a loop timer there, the simulator a virtual one."""
        return self._next if self._pending else None

    def maybe_sample(self, now: float) -> bool:
        """Sample if a period boundary has passed since the last sample; True if it did.
        A call that does not sample marks the engine as possibly changed (``next_sample``)."""
        if now < self._next:
            self._pending = True
            return False
        self.sample(now)
        self._pending = False
        self._next = (math.floor(now / self.period) + 1) * self.period
        return True

    # ------------------------------------------------------------------ sampling
    def _nid(self, nid: NID) -> str:
        text = self._nid_text.get(nid)
        if text is None:
            text = self._nid_text[nid] = str(nid)
        return text

    def sample(self, now: float) -> None:
        """Read the engine once; queue the rows of what changed."""
        t = round(now + self.clock_offset, 6)
        seen: set[tuple[str, str]] = set()
        emit = self._emit
        eng = self.engine
        c = eng.counters.values
        emit(t, seen, "node", self.node, ("", ROUTING_NAMES.get(eng.router.state, "?"), "", "",
                                          "", c["send_count"], c["recv_count"],
                                          c["drop_count"], c["send_length"],
                                          c["recv_length"]))
        nobytes = (0, 0)
        for ni in eng.local_nis():
            if ni.is_lo:
                continue
            st = ni.stats
            b = self._bytes.get(ni.nid, nobytes)
            emit(t, seen, "ni", self._nid(ni.nid), (
                ni.interface, "fatal" if ni.fatal_error else ni.status_str, ni.healthv,
                ni.tx_credits, ni.min_tx_credits, st.sent.total(), st.received.total(),
                st.dropped.total(), b[0], b[1]))
        for peer in eng.peers.peers:
            prim = self._nid(peer.primary_nid)
            for pnet in peer.nets:
                for lpni in pnet.lpnis:
                    st = lpni.stats
                    b = self._bytes.get(lpni.nid, nobytes)
                    emit(t, seen, "lpni", self._nid(lpni.nid), (
                        prim, "up" if lpni.ns_status == LNET_NI_STATUS_UP else "down",
                        lpni.healthv, lpni.tx_credits, lpni.min_tx_credits, st.sent.total(),
                        st.received.total(), st.dropped.total(), b[0], b[1]))
        router = eng.router
        for route in router.all_routes():
            emit(t, seen, "route", f"{route.net} via {self._nid(route.nid)}",
                 ("", "up" if router.route_alive(route) else "down", "", "", "", "", "", "",
                  "", ""))
        for gw in router.gateways():
            emit(t, seen, "gw", self._nid(gw.primary_nid),
                 ("", "alive" if gw.alive else "dead", "", "", "", "", "", "", "", ""))
        if len(seen) != len(self._last):
            for key in [k for k in self._last if k not in seen]:
                del self._last[key]
                self._rows.append([t, key[0], key[1], "", "gone"] + [""] * 8)
        self.samples += 1
        if t >= self._flush_at:
            if self._flush_at != -math.inf:
                self.flush()
            self._flush_at = t + self.flush_period

    def _emit(self, t: float, seen: set[tuple[str, str]], kind: str, ident: str,
              row: Row) -> None:
        key = (kind, ident)
        seen.add(key)
        if self._last.get(key) != row:
            self._last[key] = row
            self._rows.append([t, kind, ident, *row])

    # ------------------------------------------------------------------ file
    def flush(self) -> None:
        """Append the queued rows as one gzip member (nothing to do when none is queued)."""
        rows = self._rows
        if self._header is not None:
            rows = self._header + rows
        if not rows:
            return
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        data = gzip.compress(buf.getvalue().encode(), compresslevel=6, mtime=0)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._header = None
        self._rows = []

    def close(self) -> None:
        """Write what is queued (the driver calls this when the node stops)."""
        self.flush()
