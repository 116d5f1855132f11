"""``testbed events``: the event log, filtered, with times relative to bring-up (item 5).

Theory of operation: the run directory's ``events.jsonl`` (docs/events.md §1) is read as it
is now, filtered by node, kind and relative time, and printed one event per line as
``+SECONDS  NODE  KIND  key=value ...`` (``--json``: the raw line, unchanged, so scripts get
exactly what was logged). ``--follow`` keeps reading what is appended, as ``tail -f`` does,
until the run directory goes away (``down``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from testbed import runstate
from testbed.observe import eventlog

Event = dict[str, Any]
FOLLOW_INTERVAL = 0.2


def parse_set(values: list[str] | None) -> set[str] | None:
    """``--node a,b --node c`` -> {a, b, c}; None when the option was not given."""
    if not values:
        return None
    return {v.strip() for arg in values for v in arg.split(",") if v.strip()}


def _value(v: Any) -> str:
    if isinstance(v, str):
        return v if v and " " not in v else json.dumps(v)
    if isinstance(v, float):
        return f"{v:g}"
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def human(ev: Event, t0: float) -> str:
    """One event as a line: relative time, node, kind (``msg.send``...), then its fields."""
    rel = float(ev["t"]) - t0
    node = eventlog.node_of(ev) or "-"
    skip = {"t", "kind", "node"} | ({"event"} if ev["kind"] == "msg" else set())
    rest = " ".join(f"{k}={_value(v)}" for k, v in sorted(ev.items()) if k not in skip)
    return f"{rel:+12.6f}s  {node:<10} {eventlog.kind_name(ev):<16} {rest}".rstrip()


def _parsed(lines: Iterator[str]) -> Iterator[tuple[str, Event]]:
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and isinstance(ev.get("t"), int | float) \
                and isinstance(ev.get("kind"), str):
            yield line.rstrip("\n"), ev


def show(path: Path, out: TextIO, *, nodes: set[str] | None, kinds: set[str] | None,
         since: float | None, raw: bool, follow: bool,
         alive: Callable[[], bool] = lambda: True) -> int:
    """Print the events of ``path`` that pass the filters; returns how many were printed."""
    pos = 0
    t0: float | None = None
    printed = 0
    pending = ""
    while True:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
        except FileNotFoundError:
            if pos:
                return printed  # the testbed went down and its run directory with it
            raise
        text = pending + chunk
        lines = text.split("\n")
        pending = lines.pop()  # a line still being written
        batch = list(_parsed(iter(lines)))
        if t0 is None and batch:
            t0 = eventlog.origin(ev for _l, ev in batch)
        for line, ev in batch:
            if not next(eventlog.select([ev], nodes=nodes, kinds=kinds, since=since,
                                        t0=t0 or 0.0), None):
                continue
            out.write(line + "\n" if raw else human(ev, t0 or 0.0) + "\n")
            printed += 1
        out.flush()
        if not follow or not alive():
            return printed
        time.sleep(FOLLOW_INTERVAL)


def unknown_kinds(kinds: set[str] | None, path: Path) -> list[str]:
    """The ``--kind`` values that are neither a kind events are logged with
    (``eventlog.KNOWN_KINDS``) nor one found in this log: a typo would otherwise print
    nothing, as if no such event had happened."""
    odd = sorted((kinds or set()) - eventlog.KNOWN_KINDS)
    if odd:  # (a kind this code does not know of may still be in an older or newer log)
        with open(path, encoding="utf-8", errors="replace") as fh:
            seen = {eventlog.kind_name(ev) for _line, ev in _parsed(fh)}
        seen |= {k.partition(".")[0] for k in seen}
        odd = [k for k in odd if k not in seen]
    return odd


def events_path(rdir: Path) -> Path:
    return rdir / runstate.EVENTS_FILE
