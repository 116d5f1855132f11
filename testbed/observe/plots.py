"""The figures of ``testbed report``: one PNG per node and topic, fault windows shaded across
all of them, resends and failures marked (issue 16 item 2).

Theory of operation: each figure is drawn from series taken as they are from the recorder file
(``Rec.series``: the times and values of an object's rows, a step function that holds until
the next row), and every series drawn is returned with its figure, so a test can compare what
was plotted with the file. Times are shown relative to the start of bring-up. Throughput per
rail is a rate derived from the NI's cumulative payload bytes (tx + rx; messages when the
driver reported no bytes): a row's increase over the period before it, because the recorder
writes a row in the first sample after a change (docs/events.md §3). matplotlib's Agg backend
draws to files, without a display.

The time axis shows the span ``report`` chose (``testbed.observe.window``: by default the
interesting part of the run), the series drawn whole. Series that lie on top of each other
(every NI at health 1000, credits that never moved) stay apart (issue 31 item 4): each series
of a figure has its own colour and dash pattern, and the earlier ones are drawn wider and
below, so a later one covering it leaves its edges and the gaps of its dashes showing;
``Figure.styles`` records what each got.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from testbed.observe.recfile import Rec
from testbed.observe.summary import Facts

Series = tuple[list[float], list[Any]]
FIGSIZE = (10.0, 3.6)
DPI = 100
FAULT_COLOURS = ("#f4a582", "#92c5de", "#c2a5cf", "#a6dba0", "#fddbc7")
LINE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")
#: dash patterns (matplotlib's (offset, (on, off, ...))), one per series after the first
DASHES: tuple[Any, ...] = ("solid", (0, (6, 3)), (0, (2, 2)), (0, (8, 3, 2, 3)),
                           (0, (1, 3)), (0, (4, 2, 1, 2, 1, 2)), (0, (10, 4)))
Style = tuple[str, Any, float]  # colour, dash pattern, line width


@dataclass
class Figure:
    path: Path
    title: str
    series: dict[str, Series] = field(default_factory=dict)
    styles: dict[str, Style] = field(default_factory=dict)
    #: the time axis as drawn (seconds from the start of bring-up)
    shown: tuple[float, float] = (0.0, 0.0)

    def style(self, label: str) -> dict[str, Any]:
        """The next series' look (module doc): colour and dash pattern unique within the
        figure, wider first; recorded in ``styles``."""
        k = len(self.styles)
        colour = LINE_COLOURS[k % len(LINE_COLOURS)]
        dash = DASHES[(k + k // len(LINE_COLOURS)) % len(DASHES)]
        width = max(1.0, 3.0 - 0.4 * k)
        self.styles[label] = (colour, dash, width)
        return {"color": colour, "linestyle": dash, "lw": width, "zorder": 2 + k * 0.01}


def _shade(ax: Any, facts: Facts, t0: float, t_end: float) -> None:
    kinds: dict[str, str] = {}
    for w in facts.windows:
        colour = kinds.setdefault(w.kind, FAULT_COLOURS[len(kinds) % len(FAULT_COLOURS)])
        end = w.end if w.end is not None else t_end
        ax.axvspan(w.start - t0, end - t0, color=colour, alpha=0.35, lw=0,
                   label=f"fault: {w.kind}" if kinds[w.kind] == colour and w.kind not in
                   ax.get_legend_handles_labels()[1] else None)


def _marks(ax: Any, facts: Facts, node: str, t0: float) -> None:
    for times, style, label in ((facts.resend_times.get(node, []), "v", "resend"),
                                (facts.failure_times.get(node, []), "x", "failure")):
        if times:
            ax.plot([t - t0 for t in times], [1.0] * len(times), style, ms=5,
                    transform=ax.get_xaxis_transform(), clip_on=False, label=label,
                    color="#b2182b" if style == "x" else "#2166ac")


def _steps(ax: Any, f: Figure, s: Series, t0: float, t_end: float, label: str) -> None:
    ts, vs = s
    pts = [(t - t0, v) for t, v in zip(ts, vs, strict=True) if isinstance(v, int | float)]
    if not pts:
        return
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    xs.append(max(t_end - t0, xs[-1]))
    ys.append(ys[-1])
    ax.step(xs, ys, where="post", label=label, **f.style(label))


def _finish(fig: Any, ax: Any, f: Figure, title: str, ylabel: str,
            shown: tuple[float, float]) -> None:
    ax.set_xlim(*shown)
    path = f.path
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("seconds from the start of bring-up")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    handles, _labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    lo, hi = ax.get_xlim()
    f.shown = (float(lo), float(hi))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _rate(rec: Rec, ni: str, period: float) -> tuple[Series, str]:
    """Throughput of one rail: (times, rate) steps, and the unit."""
    unit = "bytes/s"
    tx, txv = rec.series("ni", ni, "tx_bytes")
    _rx, rxv = rec.series("ni", ni, "rx_bytes")
    totals = [(a or 0) + (b or 0) for a, b in zip(txv, rxv, strict=True)]  # type: ignore[operator]
    if not any(totals):
        unit = "messages/s"
        _s, sv = rec.series("ni", ni, "sends")
        _r, rv = rec.series("ni", ni, "recvs")
        totals = [(a or 0) + (b or 0) for a, b in zip(sv, rv, strict=True)]  # type: ignore[operator]
    ts: list[float] = []
    vs: list[float] = []
    prev_t, prev = None, None
    for t, v in zip(tx, totals, strict=True):
        if prev is not None and prev_t is not None and v > prev:
            span = min(period, t - prev_t) or period
            ts += [t - span, t]
            vs += [(v - prev) / span, 0.0]
        prev_t, prev = t, v
    return (ts, vs), unit


def node_figures(rec: Rec, facts: Facts, out: Path, t0: float, t_end: float,
                 span: tuple[float, float] | None = None) -> list[Figure]:
    """Health, throughput, credits (and routes, if the node has any) of one node; the time
    axis shows ``span`` (the log's clock; default: the whole run)."""
    node = rec.node
    lo, hi = span or (t0, t_end)
    shown = (lo - t0, hi - t0)
    figs: list[Figure] = []
    nis, lpnis = rec.objects("ni"), rec.objects("lpni")

    fig, ax = plt.subplots(figsize=FIGSIZE)
    f = Figure(out / f"{node}-health.png", f"{node}: health per NI and per peer NI")
    for kind, ids in (("ni", nis), ("lpni", lpnis)):
        for ident in ids:
            s = rec.series(kind, ident, "health")
            if kind == "lpni" and all(v == 1000 or v is None for v in s[1]) and len(ids) > 8:
                continue  # many always-healthy peer NIs: leave them out of the legend
            f.series[f"{kind} {ident}"] = s
            _steps(ax, f, s, t0, t_end, f"{kind} {ident}")
    ax.set_ylim(-50, 1050)
    _shade(ax, facts, t0, t_end)
    _marks(ax, facts, node, t0)
    _finish(fig, ax, f, f.title, "health", shown)
    figs.append(f)

    period = float(rec.meta.get("period", "0.1"))
    fig, ax = plt.subplots(figsize=FIGSIZE)
    f = Figure(out / f"{node}-throughput.png", f"{node}: throughput per rail")
    unit = "bytes/s"
    for ni in nis:
        s, unit = _rate(rec, ni, period)
        f.series[f"ni {ni}"] = s
        if s[0]:
            ax.plot([t - t0 for t in s[0]], s[1], drawstyle="steps-post", label=ni,
                    **f.style(f"ni {ni}"))
    _shade(ax, facts, t0, t_end)
    _marks(ax, facts, node, t0)
    _finish(fig, ax, f, f.title + f" ({unit}, tx + rx)", unit, shown)
    figs.append(f)

    fig, ax = plt.subplots(figsize=FIGSIZE)
    f = Figure(out / f"{node}-credits.png", f"{node}: NI tx credits (now and lowest)")
    for ni in nis:
        for col in ("credits", "min_credits"):
            s = rec.series("ni", ni, col)
            f.series[f"ni {ni} {col}"] = s
            _steps(ax, f, s, t0, t_end, f"{ni} {col}")
    _shade(ax, facts, t0, t_end)
    _finish(fig, ax, f, f.title, "credits", shown)
    figs.append(f)

    routes, gws = rec.objects("route"), rec.objects("gw")
    if routes or gws:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        f = Figure(out / f"{node}-routes.png", f"{node}: route and gateway state (1 = up)")
        for kind, ids, up in (("route", routes, "up"), ("gw", gws, "alive")):
            for ident in ids:
                ts, vs = rec.series(kind, ident, "state")
                s = (ts, [None if v is None else int(v == up) for v in vs])
                f.series[f"{kind} {ident}"] = s
                _steps(ax, f, s, t0, t_end, f"{kind} {ident}")
        ax.set_ylim(-0.1, 1.1)
        _shade(ax, facts, t0, t_end)
        _finish(fig, ax, f, f.title, "state", shown)
        figs.append(f)
    return figs
