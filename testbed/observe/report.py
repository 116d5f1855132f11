"""``testbed report``: an HTML page, PNG figures and a text summary of a run (issue 16 item 2).

Theory of operation: a report is made from what a run leaves behind, the event log and the
recorder files (docs/events.md), so it works while the testbed is up, from a run directory kept
after ``down``, and on the sim's in-memory log: ``make_report(out, events=..., recs=...)`` is
the core, ``report_rundir`` reads a run directory. ``Report.figures`` holds every series drawn
(from ``plots``), ``Report.summary`` the text (``summary``). The figures' time axis shows
the interesting span of the run unless told otherwise (``window``). matplotlib is the
``report`` extra of pyproject.toml; without it the summary and the page are still written and
``Report.skipped`` names the figures left out (``testbed report`` says so, and how to install
it).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.observe import eventlog, recfile, window
from testbed.observe.recfile import Rec
from testbed.observe.summary import Facts, gather, render

INDEX = "index.html"
SUMMARY = "summary.txt"


class ReportError(Exception):
    """The report cannot be made; one line for the user."""


@dataclass
class Report:
    out: Path
    summary: str
    facts: Facts
    t0: float
    figures: list[Any] = field(default_factory=list)
    #: the figures not drawn (no matplotlib here), and why
    skipped: list[str] = field(default_factory=list)
    why_skipped: str = ""
    #: the span the figures show, in seconds from the start of bring-up
    shown: tuple[float, float] = (0.0, 0.0)

    @property
    def series(self) -> dict[tuple[str, str], tuple[list[float], list[Any]]]:
        """Every plotted series: (figure file name, label) -> (times, values)."""
        return {(f.path.name, label): s for f in self.figures for label, s in f.series.items()}

    @property
    def pngs(self) -> list[Path]:
        return [f.path for f in self.figures]


def _plots() -> Any:
    try:
        from testbed.observe import plots  # matplotlib is optional (the `report` extra)
    except ImportError as exc:
        raise ReportError(f"testbed report needs matplotlib ({exc}): "
                          "pip install -e '.[report]' (make venv installs it)") from None
    return plots


def figure_names(rec: Rec) -> list[str]:
    """The PNGs ``plots.node_figures`` draws for one node (what is skipped without it)."""
    topics = ["health", "throughput", "credits"]
    if rec.objects("route") or rec.objects("gw"):
        topics.append("routes")
    return [f"{rec.node}-{t}.png" for t in topics]


def make_report(out: str | Path, *, events: list[dict[str, Any]], recs: dict[str, Rec],
                title: str = "testbed run",
                span: str | tuple[float | None, float | None] = window.AUTO) -> Report:
    """Write ``out``/index.html, summary.txt and the PNGs; return what was plotted. ``span``:
    what the time axis shows (``testbed.observe.window``)."""
    why = ""
    try:
        plots = _plots()
    except ReportError as exc:
        plots, why = None, str(exc)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = eventlog.origin(events)
    ends = [float(e["t"]) for e in events[-1:]] + [
        float(r.rows[-1]["t"]) for r in recs.values() if r.rows]  # type: ignore[arg-type]
    t_end = max(ends, default=t0)
    facts = gather(events, recs, t0)
    lo, hi = window.span(span, events, facts, t0, t_end)
    text = render(facts, t0, t_end)
    if recs and (lo, hi) != (t0, t_end):
        text += (f"figures show +{lo - t0:.3f}s to +{hi - t0:.3f}s of +0.000s to "
                 f"+{t_end - t0:.3f}s (the interesting span: --window all shows the whole run)\n"
                 if span == window.AUTO else
                 f"figures show +{lo - t0:.3f}s to +{hi - t0:.3f}s (--window)\n")
    rep = Report(out, text, facts, t0, shown=(lo - t0, hi - t0))
    for node in sorted(recs):
        if plots is None:
            rep.skipped += figure_names(recs[node])
        else:
            rep.figures += plots.node_figures(recs[node], facts, out, t0, t_end, (lo, hi))
    if rep.skipped:
        rep.why_skipped = why
    (out / SUMMARY).write_text(text)
    (out / INDEX).write_text(_html(title, text, rep, recs))
    return rep


def _html(title: str, text: str, rep: Report, recs: dict[str, Rec]) -> str:
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;"
             "padding:1em}img{max-width:100%}</style></head><body>",
             f"<h1>{esc(title)}</h1><h2>Summary</h2><pre>{esc(text)}</pre>"]
    if not recs:
        parts.append("<p>No recorder files (RUNDIR/nodes/NODE.rec): no figures.</p>")
    if rep.skipped:
        parts.append(f"<p>Figures not drawn ({esc(rep.why_skipped)}): "
                     f"{esc(', '.join(rep.skipped))}.</p>")
    for node in sorted(recs):
        parts.append(f"<h2>{esc(node)}</h2>")
        parts += [f"<p><img src='{esc(f.path.name)}' alt='{esc(f.title)}'></p>"
                  for f in rep.figures if f.path.name.startswith(f"{node}-")]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def report_rundir(rundir: str | Path, out: str | Path | None = None,
                  span: str | tuple[float | None, float | None] = window.AUTO) -> Report:
    """The report of a run directory (up, or kept after ``down``); ``out`` defaults to
    ``RUNDIR/report``.

    Raises:
        ReportError: the run directory has no readable log or recorder files are corrupt.
    """
    rundir = Path(rundir)
    try:
        loaded = eventlog.read_rundir(rundir)
        recs = recfile.read_dir(rundir)
    except (eventlog.LogError, recfile.RecError) as exc:
        raise ReportError(str(exc)) from None
    return make_report(out or rundir / "report", events=loaded.events, recs=recs,
                       title=f"testbed {rundir.name}", span=span)
