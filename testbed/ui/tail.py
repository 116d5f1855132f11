"""Following a live run directory's files as they grow: the event log and recorder files.

Theory of operation: ``testbed ui`` polls, it does not re-read. ``JsonlTail`` keeps the byte
offset it has read ``events.jsonl`` up to and the half line a writer had not finished, and
parses only whole new lines (docs/events.md §1: one ``O_APPEND`` write per line, so a line is
whole once its newline is there). ``RecTail`` does the same for a recorder file
(docs/events.md §3): concatenated gzip members, one per recorder flush, read from the first
member not yet inflated; a member still being written is left for the next poll
(``recfile.inflate_prefix``). Each poll reads at most ``MAX_READ`` bytes, so a huge log is
taken in slices and a poll stays bounded. A file that shrank was replaced: read from 0 again.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from nodes.recorder import COLUMNS
from testbed.observe import recfile

#: most bytes one poll reads from one file
MAX_READ = 4 << 20
#: event kinds the view does not show one by one (per message: the sim fabric's wire log and
#: the message trace); a line naming one is skipped before it is parsed
BULK_KINDS = ("msg", "send", "recv", "tx_done", "md")
_BULK_MARKS = tuple(f'"kind": "{k}"'.encode() for k in BULK_KINDS)


class JsonlTail:
    """New whole lines of one JSON-lines file, as events (``{"t", "kind", ...}``)."""

    def __init__(self, path: Path, skip_bulk: bool = True) -> None:
        self.path = path
        self.offset = 0
        self.skip_bulk = skip_bulk
        self.skipped = 0  # lines that were not an event
        self.bulk = 0  # per-message lines passed over unparsed

    def read(self) -> list[dict[str, Any]]:
        raw = _read_from(self, MAX_READ)
        end = raw.rfind(b"\n") + 1
        if end == 0 and len(raw) == MAX_READ:  # one line longer than a slice: not an event
            self.offset += len(raw)
            self.skipped += 1
            return []
        self.offset += end
        out = []
        for line in raw[:end].splitlines():
            if self.skip_bulk and any(m in line for m in _BULK_MARKS):
                self.bulk += 1
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                self.skipped += 1
                continue
            if isinstance(ev, dict) and isinstance(ev.get("t"), int | float) \
                    and isinstance(ev.get("kind"), str):
                out.append(ev)
            else:
                self.skipped += 1
        return out


class RecTail:
    """New rows of one recorder file (``lnet-rec/1``), with its metadata."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.meta: dict[str, str] = {}

    @property
    def period(self) -> float:
        try:
            return float(self.meta.get("period", "0.1"))
        except ValueError:
            return 0.1

    def read(self) -> list[dict[str, object]]:
        raw = _read_from(self, MAX_READ)
        data, used = recfile.inflate_prefix(raw)
        self.offset += used
        rows = []
        for line in csv.reader(io.StringIO(data.decode("utf-8", errors="replace"))):
            if len(line) == len(COLUMNS) and line[1] == "meta":
                self.meta[line[2]] = line[4]
            elif (row := recfile.row_of(line)) is not None:
                rows.append(row)
        return rows


def _read_from(tail: JsonlTail | RecTail, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``tail.path`` from ``tail.offset`` (from 0 again, with the
    reader's state, if the file is now shorter: it was replaced); b"" for a missing file."""
    try:
        with open(tail.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < tail.offset:
                tail.offset = 0
            f.seek(tail.offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""
