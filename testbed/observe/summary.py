"""What a run shows, in words: fault windows, health dips and recoveries, how long traffic took
to move, failures by hstatus (``testbed report``'s summary, issue 16 item 2).

Theory of operation: every figure here comes from the event log (docs/events.md §1) and the
recorder files (§3), never from a guess: a fault window is a ``fault_applied`` ->
``fault_reverted`` pair of one fault activation, or a ``link_down`` -> ``link_up`` pair of one
interface not made by a fault; a health dip is an NI or peer NI whose health went below 1000,
from the health notices when the log has them for that object (exact times: the engine
raises one per change), else from the recorder (times of samples); traffic moved when
another NI of the faulted node on the same net started carrying more messages after the
window opened; the workload is the ``traffic_end`` events' bursts per node and operation;
failures are message trace completions with a non-zero status (else, for logs without a
trace, the failures the health notices blamed).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE as MAX_HEALTH
from testbed.observe.recfile import Rec

Event = dict[str, Any]


@dataclass
class Window:
    """One fault window: applied (or link down) -> reverted (or link up, or end of log)."""

    kind: str
    node: str | None
    iface: str | None
    start: float
    end: float | None
    label: str

    def overlaps(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t <= self.end)


@dataclass
class Dip:
    """An NI or peer NI below full health: when it fell, how low, when it was back."""

    node: str
    what: str  # "ni X" / "lpni X"
    fell: float
    low: int
    back: float | None


@dataclass
class Facts:
    windows: list[Window] = field(default_factory=list)
    dips: list[Dip] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    failure_source: str = ""
    resends: int = 0
    resend_times: dict[str, list[float]] = field(default_factory=dict)
    failure_times: dict[str, list[float]] = field(default_factory=dict)
    #: (node, op) -> [bursts, messages sent, completed, failed] from the workload events
    workload: dict[tuple[str, str], list[int]] = field(default_factory=dict)


def windows(events: list[Event]) -> list[Window]:
    """Every fault window of the log, in order of opening."""
    out: list[Window] = []
    open_faults: dict[tuple[Any, Any], Window] = {}
    open_links: dict[tuple[Any, Any], Window] = {}
    for ev in events:
        kind, t = ev["kind"], float(ev["t"])
        if kind == "fault_applied":
            spec = ev.get("spec") if isinstance(ev.get("spec"), dict) else {}
            fk = str(ev.get("fault_kind") or spec.get("kind"))
            node, iface = spec.get("node"), spec.get("iface")
            target = "/".join(str(x) for x in (node, iface) if x) or ",".join(
                str(x) for x in (spec.get("a") or []) + (spec.get("b") or []))
            w = Window(fk, node, iface, t, None, f"{ev.get('id')} {fk} {target}".strip())
            open_faults[(ev.get("id"), ev.get("activation"))] = w
            out.append(w)
        elif kind == "fault_reverted":
            w = open_faults.pop((ev.get("id"), ev.get("activation")), None)
            if w is not None:
                w.end = t
        elif kind in ("link_down", "link_up") and ev.get("by") != "fault":
            key = (ev.get("node"), ev.get("iface") or ev.get("nid"))
            if kind == "link_down" and key not in open_links:
                w = Window("link", ev.get("node"), ev.get("iface"), t, None,
                           f"link down {key[0]} {key[1]}")
                open_links[key] = w
                out.append(w)
            elif kind == "link_up" and key in open_links:
                open_links.pop(key).end = t
    return out


def _dips_from_rec(rec: Rec) -> list[Dip]:
    out = []
    for kind in ("ni", "lpni"):
        for ident in rec.objects(kind):
            ts, vs = rec.series(kind, ident, "health")
            fell: float | None = None
            low = MAX_HEALTH
            for t, v in zip(ts, vs, strict=True):
                if not isinstance(v, int):
                    continue
                if v < MAX_HEALTH and fell is None:
                    fell, low = t, v
                elif fell is not None:
                    low = min(low, v)
                    if v >= MAX_HEALTH:
                        out.append(Dip(rec.node, f"{kind} {ident}", fell, low, t))
                        fell, low = None, MAX_HEALTH
            if fell is not None:
                out.append(Dip(rec.node, f"{kind} {ident}", fell, low, None))
    return out


_HEALTH_NOTICES = frozenset({"ni_error", "lpni_error", "ni_status", "lpni_status",
                             "ni_health", "lpni_health"})


def _dips_from_events(events: list[Event]) -> tuple[list[Dip], set[tuple[str, str]]]:
    """Dips from the health notices (``*_health``, ``*_error``, ``*_status``), and the
    objects (node, "ni|lpni NID") the notices cover."""
    out: list[Dip] = []
    covered: set[tuple[str, str]] = set()
    open_: dict[tuple[str, str], Dip] = {}
    for ev in events:
        kind = ev["kind"]
        if kind not in _HEALTH_NOTICES:
            continue
        side = kind.split("_")[0]
        key = (str(ev.get("node")), f"{side} {ev.get('nid')}")
        covered.add(key)
        value = ev.get("new", ev.get("health"))
        if not isinstance(value, int):
            continue
        t = float(ev["t"])
        dip = open_.get(key)
        if value < MAX_HEALTH:
            if dip is None:
                open_[key] = dip = Dip(key[0], key[1], t, value, None)
                out.append(dip)
            dip.low = min(dip.low, value)
        elif dip is not None:
            dip.back = t
            del open_[key]
    return out, covered


def _moves(wins: list[Window], recs: dict[str, Rec], t0: float) -> list[str]:
    out = []
    for w in wins:
        rec = recs.get(w.node or "")
        if rec is None or not w.iface:
            continue
        nis = {ident: rec.peer_of(ident, "ni") for ident in rec.objects("ni")}
        hit = [n for n, iface in nis.items() if iface == w.iface]
        if not hit:
            continue
        net = hit[0].rsplit("@", 1)[-1]
        others = [n for n in nis if n != hit[0] and n.rsplit("@", 1)[-1] == net]
        rises = [t for n in others if (t := _first_rise(rec, n, w.start)) is not None]
        if not rises:
            out.append(f"{w.label}: no other rail of {w.node} on {net} carried traffic "
                       f"after {w.start - t0:+.3f}s")
        else:
            moved = min(rises)
            out.append(f"{w.label}: traffic moved to the other rail(s) within "
                       f"{moved - w.start:.3f}s (at {moved - t0:+.3f}s)")
    return out


def _first_rise(rec: Rec, ni: str, start: float) -> float | None:
    """The first recorder time after ``start`` at which ``ni`` had sent more than at it."""
    ts, vs = rec.series("ni", ni, "sends")
    before = 0
    for t, v in zip(ts, vs, strict=True):
        if not isinstance(v, int):
            continue
        if t <= start:
            before = v
        elif v > before:
            return t
    return None


def gather(events: list[Event], recs: dict[str, Rec], t0: float) -> Facts:
    f = Facts(windows=windows(events))
    f.dips, covered = _dips_from_events(events)
    for rec in recs.values():  # objects no notice speaks of: the recorder's samples
        f.dips += [d for d in _dips_from_rec(rec) if (d.node, d.what) not in covered]
    f.dips.sort(key=lambda d: (d.fell, d.node, d.what))
    f.moves = _moves(f.windows, recs, t0)
    traced = False
    for ev in events:
        kind, node = ev["kind"], str(ev.get("node"))
        if kind == "traffic_end":
            w = f.workload.setdefault((node, str(ev.get("op"))), [0, 0, 0, 0])
            for i, key in enumerate(("sent", "completed", "failed"), 1):
                w[i] += int(ev.get(key) or 0)
            w[0] += 1
        if kind == "msg":
            traced = True
            if ev.get("event") == "resend":
                f.resends += 1
                f.resend_times.setdefault(node, []).append(float(ev["t"]))
            elif ev.get("event") == "complete" and ev.get("status"):
                f.failures[str(ev.get("hstatus"))] += 1
                f.failure_times.setdefault(node, []).append(float(ev["t"]))
    if traced:
        f.failure_source = "message completions with a non-zero status"
        return f
    for ev in events:
        if ev["kind"] in ("ni_error", "lpni_error"):
            f.failures[str(ev.get("hstatus"))] += 1
            f.failure_times.setdefault(str(ev.get("node")), []).append(float(ev["t"]))
    f.failure_source = "failures blamed on an NI or peer NI (ni_error, lpni_error; the log has " \
                       "no message trace)"
    return f


def render(f: Facts, t0: float, t_end: float) -> str:
    """The text summary."""
    def rel(t: float | None) -> str:
        return "end of log" if t is None else f"+{t - t0:.3f}s"

    lines = [f"run: {t_end - t0:.3f}s from the start of bring-up"]
    lines.append(f"fault windows: {len(f.windows)}")
    for w in f.windows:
        dur = f"{w.end - w.start:.3f}s" if w.end is not None else "still open"
        lines.append(f"  {w.label}: {rel(w.start)} -> {rel(w.end)} ({dur})")
    lines.append(f"health dips: {len(f.dips)}")
    for d in f.dips:
        back = f"back to {MAX_HEALTH} at {rel(d.back)} after {d.back - d.fell:.3f}s" \
            if d.back is not None else "not recovered by the end of the log"
        lines.append(f"  {d.node} {d.what}: fell at {rel(d.fell)} to {d.low}, {back}")
    lines.append("traffic moved:" + ("" if f.moves else " (no rail fault with recorded "
                                                        "traffic)"))
    lines += [f"  {m}" for m in f.moves]
    lines.append(f"workload: {sum(w[0] for w in f.workload.values())} burst(s)"
                 + ("" if f.workload else " logged (traffic_start/traffic_end)"))
    lines += [f"  {node} {op}: {w[0]} burst(s), {w[1]} sent, {w[2]} completed, {w[3]} failed"
              for (node, op), w in sorted(f.workload.items())]
    lines.append(f"resends: {f.resends}")
    total = sum(f.failures.values())
    lines.append(f"failures by hstatus ({f.failure_source}): {total}")
    lines += [f"  {h}: {n}" for h, n in f.failures.most_common()]
    return "\n".join(lines) + "\n"
