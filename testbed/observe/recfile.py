"""Reading recorder files (``lnet-rec/1``, docs/events.md §3; written by ``nodes/recorder.py``).

Theory of operation: a ``.rec`` file is concatenated gzip members of CSV. ``read`` inflates
member by member and stops at a truncated last member (a daemon killed mid-write), then parses
the CSV: ``meta`` rows fill ``Rec.meta``, every other row is one object's values at one time.
Rows are change-only, so ``series`` turns an object's rows into a step function: the times of
its rows and the value each row set (a value holds until the next row). A ``gone`` row ends
the object's series.
"""

from __future__ import annotations

import csv
import io
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from nodes.echo import shown_path
from nodes.recorder import COLUMNS, FORMAT

NUMERIC = frozenset({"health", "credits", "min_credits", "sends", "recvs", "drops",
                     "tx_bytes", "rx_bytes"})


class RecError(Exception):
    """The file is not a readable recorder file; one line for the user."""


@dataclass
class Rec:
    """One node's recorder file: metadata and rows (as dicts of column -> value)."""

    path: Path
    meta: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, object]] = field(default_factory=list)
    truncated: bool = False

    @property
    def node(self) -> str:
        return self.meta.get("node", self.path.stem)

    def objects(self, kind: str) -> list[str]:
        """Ids of the objects of ``kind`` (``ni``, ``lpni``, ``route``, ``gw``, ``node``),
        in order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.rows:
            if r["kind"] == kind:
                seen.setdefault(str(r["id"]), None)
        return list(seen)

    def series(self, kind: str, ident: str, column: str) -> tuple[list[float], list[object]]:
        """The step series of one column of one object: (times, values) of its rows, the
        value None after a ``gone`` row."""
        ts: list[float] = []
        vs: list[object] = []
        for r in self.rows:
            if r["kind"] == kind and r["id"] == ident:
                ts.append(float(r["t"]))  # type: ignore[arg-type]
                vs.append(None if r["state"] == "gone" else r[column])
        return ts, vs

    def peer_of(self, ident: str, kind: str = "lpni") -> str:
        """The ``peer`` column of an object: a peer NI's primary NID, an NI's interface."""
        return next((str(r["peer"]) for r in self.rows
                     if r["kind"] == kind and r["id"] == ident and r["peer"]), "")


def inflate(raw: bytes) -> tuple[bytes, bool]:
    """Every whole gzip member of ``raw`` inflated; True if a last member was cut short."""
    data, used = inflate_prefix(raw)
    return data, used < len(raw)


def inflate_prefix(raw: bytes) -> tuple[bytes, int]:
    """The whole gzip members at the start of ``raw`` inflated, and how many bytes of ``raw``
    they took: a reader following a growing file (``testbed ui``) reads on from there once
    the member cut short is complete."""
    out: list[bytes] = []
    used = 0
    while used < len(raw):
        d = zlib.decompressobj(wbits=31)
        try:
            member = d.decompress(raw[used:])
        except zlib.error:
            break
        if not d.eof:  # cut short: its rows are dropped whole, never half of one
            break
        out.append(member)
        used = len(raw) - len(d.unused_data)
    return b"".join(out), used


def row_of(line: list[str]) -> dict[str, object] | None:
    """One CSV row as column -> value; None for a header, a meta row or a malformed row."""
    if len(line) != len(COLUMNS) or line[1] == "meta" or line[0] == "t":
        return None
    try:
        return {c: _value(c, v) for c, v in zip(COLUMNS, line, strict=True)}
    except ValueError:
        return None


def _value(column: str, text: str) -> object:
    if column == "t":
        return float(text)
    if column in NUMERIC and text != "":
        try:
            return int(text)
        except ValueError:
            return float(text)
    return text if text != "" or column in ("peer", "state", "id") else None


def read(path: str | Path) -> Rec:
    """Read one recorder file.

    Raises:
        RecError: missing file, not gzip, or not ``lnet-rec/1`` CSV.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RecError(f"cannot read {shown_path(path)}: {exc.strerror or exc}") from None
    data, truncated = inflate(raw)
    if not data:
        raise RecError(f"{path}: not a recorder file (no whole gzip member)")
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")))
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise RecError(f"{path}: not a recorder file (header {header})")
    rec = Rec(path, truncated=truncated)
    for line in reader:
        if len(line) == len(COLUMNS) and line[1] == "meta":
            rec.meta[line[2]] = line[4]
        elif (row := row_of(line)) is not None:
            rec.rows.append(row)
    if rec.meta.get("format") != FORMAT:
        raise RecError(f"{path}: format {rec.meta.get('format')!r}, not {FORMAT}")
    return rec


def read_dir(rundir: str | Path) -> dict[str, Rec]:
    """Every ``nodes/*.rec`` of a run directory, by node."""
    out = {}
    for path in sorted((Path(rundir) / "nodes").glob("*.rec")):
        rec = read(path)
        out[rec.node] = rec
    return out
