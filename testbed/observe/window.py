"""The span of time ``testbed report``'s figures show (issue 31 item 4).

Theory of operation: a run is mostly quiet (bring-up, then a burst, a fault, recovery, and a
long tail of nothing), and a figure scaled to the whole run squeezes what happened into a few
pixels. By default the time axis shows the *interesting span*: from the first to the last
event that changes something a figure draws (a fault window opening or closing, a link, NI or
peer NI state or health change, a route changing, a node dying, a burst of traffic starting
or ending, a resend or a failed message), padded on both sides by a tenth of its length (at
least ``PAD`` seconds), within the run. ``--window START:END`` (seconds from the start of
bring-up, either side may be left out) chooses the span (what bring-up itself changes, before
the ``up`` event, does not count); ``--window all`` shows the whole run.
Only the axis is zoomed: every series is drawn whole (the figures' data stay the recorder's).
"""

from __future__ import annotations

from typing import Any

from testbed.observe.summary import Facts

#: event kinds that change what a figure draws (docs/events.md §1)
INTERESTING = frozenset({
    "link_down", "link_up", "fault_applied", "fault_reverted", "fault_failed", "node_died",
    "node_restarted", "ni_error", "lpni_error", "ni_link", "ni_status", "lpni_status",
    "ni_health", "lpni_health", "route_state", "routing", "ni_add", "ni_del",
    "traffic_start", "traffic_end"})
PAD = 1.0  # seconds, at least, either side of the interesting span
AUTO = "auto"


class WindowError(ValueError):
    """A ``--window`` that is not ``all``, ``auto`` or ``START:END``; one line."""


def parse(text: str) -> tuple[float | None, float | None] | str:
    """``all``, ``auto``, or ``START:END`` (seconds from the start of bring-up; a side left
    out is the run's start or end)."""
    text = text.strip()
    if text in ("all", AUTO):
        return text
    lo_s, sep, hi_s = text.partition(":")
    try:
        if not sep:
            raise ValueError
        lo = float(lo_s) if lo_s.strip() else None
        hi = float(hi_s) if hi_s.strip() else None
    except ValueError:
        raise WindowError(f"--window {text!r}: expected all, auto or START:END in seconds "
                          "from the start of bring-up (e.g. 10:25, 10:, :25)") from None
    if lo is not None and hi is not None and hi <= lo:
        raise WindowError(f"--window {text!r}: END must be after START")
    return lo, hi


def interesting(events: list[dict[str, Any]], facts: Facts) -> tuple[float, float] | None:
    """(first, last) time of what changed (module doc), or None for a run where nothing did."""
    ups = [float(e["t"]) for e in events if e.get("kind") == "up"]
    ready = ups[0] if ups else None  # bring-up's own NI and route changes are not news
    times = [float(e["t"]) for e in events if e.get("kind") in INTERESTING
             and (ready is None or float(e["t"]) > ready)]
    times += [w.start for w in facts.windows] + [w.end for w in facts.windows if w.end]
    for per_node in (facts.resend_times, facts.failure_times):
        times += [t for ts in per_node.values() for t in ts]
    return (min(times), max(times)) if times else None


def span(spec: str | tuple[float | None, float | None], events: list[dict[str, Any]],
         facts: Facts, t0: float, t_end: float) -> tuple[float, float]:
    """The (start, end) the figures show, in the log's clock (``t0``: bring-up's start)."""
    if spec == "all":
        return t0, t_end
    if isinstance(spec, tuple):
        lo, hi = spec
        return (t0 + lo if lo is not None else t0, t0 + hi if hi is not None else t_end)
    found = interesting(events, facts)
    if found is None:
        return t0, t_end
    pad = max(PAD, (found[1] - found[0]) / 10)
    lo, hi = max(t0, found[0] - pad), min(t_end, found[1] + pad)
    return (lo, hi) if hi > lo else (t0, t_end)
