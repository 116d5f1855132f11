"""``testbed check``: LNet's promises checked over an event log (issue 16 item 4).

Theory of operation: one pass over the log in order (docs/events.md §2 lists the invariants,
the event kinds each needs and its exact rule). The log is cut into *instants*: runs of
consecutive events with the same ``t``. On the sim an instant of one node is one engine call,
whose actions (message trace) are logged before the notices drained after it, so an NI or
routing state that changes inside an instant excuses the sends of that instant (they may have
been chosen before or after the change); everything else is judged in log order. Every
handler is O(1) amortised per event and state is bounded by the nodes, NIs, routes and
messages in flight: linear time, as the issue's 1M-events-in-60-s target needs
(``benchmarks/check.py`` measures it).

``check_events(events) -> Result`` is what the pytest plugin calls at teardown;
``Result.render()`` is what the CLI prints; ``Result.ok`` is the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from testbed.observe import eventlog
from testbed.observe.check_health import HealthCheck
from testbed.observe.check_msg import MsgCheck
from testbed.observe.check_route import RouteCheck
from testbed.observe.check_state import Tracker
from testbed.observe.checktypes import Inv, Item, Result

#: name -> (title, what the log must hold to check it)
INVARIANTS = {
    "completion": ("every message ends in exactly one completion",
                   "message trace events (kind msg: send/resend/complete)"),
    "resend": ("resends <= retry_count, within the transaction deadline",
               "message trace events (kind msg with attempt, retry_count, deadline)"),
    "health": ("health in 0..1000, moving by sensitivity and recovery rules (spec §3)",
               "health events (ni_health, lpni_health, ni_error, lpni_error, *_status)"),
    "fatal_ni": ("never sent on a fatal NI while a healthy one could carry it",
                 "message trace sends with ni and fixed_ni"),
    "route_down": ("a route is down only when its gateway's NIs say so",
                   "route_state events"),
    "routing": ("no message forwarded by a node with routing off",
                "message trace sends with forwarded"),
}
_STATE_KINDS = frozenset({"ni_link", "ni_status", "ni_add", "ni_del", "routing"})
_ROUTE_KINDS = frozenset({"lpni_error", "lpni_status", "lpni_health", "notify_peer_down",
                          "peer_notify", "msg", "route_state"})
_HEALTH_KINDS = frozenset({"ni_health", "lpni_health", "ni_error", "lpni_error", "ni_status",
                           "lpni_status", "msg"})


def _changing(block: Sequence[Any]) -> set[tuple[str, str]]:
    """(node, nid) of NIs and (node, "routing") whose state changes within one instant."""
    out: set[tuple[str, str]] = set()
    for ev in block:
        if type(ev) is tuple:
            continue  # a compact record (``check_events``)
        kind = ev["kind"]
        if kind in _STATE_KINDS:
            node = str(ev.get("node"))
            out.add((node, "routing") if kind == "routing" else (node, str(ev.get("nid"))))
    return out


def _t(ev: Any) -> Any:
    return ev[1] if type(ev) is tuple else ev["t"]


def _instants(events: Iterable[Any]) -> Iterator[list[Any]]:
    """Runs of consecutive events with the same ``t``, as they come (one instant held)."""
    block: list[Any] = []
    t: Any = None
    for ev in events:
        et = ev[1] if type(ev) is tuple else ev["t"]
        if et != t and block:
            yield block
            block = []
        t = et
        block.append(ev)
    if block:
        yield block


def check_events(events: Iterable[Any], *, skipped: int | Callable[[], int] = 0) -> Result:
    """Check every invariant over ``events`` (in log order); never raises on odd events.
    An event is a dict, or a compact record of the simulator's fabric (a tuple ``kind, t,
    node, ...``: ``testbed/sim/sched.py``'s ``compact_log``: a message's send, recv,
    tx_done and md, which no invariant reads): it counts in the log's indices and instants.
    ``events`` may be a stream (a merged run directory, ``check_rundir``): one instant is
    held at a time, so memory is the checkers' state, not the log; ``skipped`` may be a
    function asked once the stream is read (the unreadable lines it met)."""
    invs = {name: Inv(name, title, needs) for name, (title, needs) in INVARIANTS.items()}
    tracker = Tracker()
    msgs = MsgCheck(invs, tracker)
    health = HealthCheck(invs["health"], tracker)
    routes = RouteCheck(invs["route_down"], tracker)
    k = 0
    traced = 0
    t_end: float | None = None
    for block in _instants(events):
        changing = _changing(block) if len(block) > 1 else set()
        for ev in block:
            k += 1
            if type(ev) is tuple:
                continue
            item: Item = (k - 1, ev)
            kind = ev["kind"]
            tracker.handle(item, msgs.on_restart)
            if kind == "msg":
                traced += 1
                msgs.handle(item, changing)
            if kind in _HEALTH_KINDS:
                health.handle(item)
            if kind in _ROUTE_KINDS:
                routes.handle(item)
        t = float(_t(block[0]))
        t_end = t if t_end is None else max(t_end, t)
    msgs.finish(t_end)
    _notes(invs, tracker, health, msgs)
    return Result(invs, k, skipped if isinstance(skipped, int) else skipped(), t_end, traced)


def _notes(invs: dict[str, Inv], tracker: Tracker, health: HealthCheck, msgs: MsgCheck) -> None:
    """Say what a partial log could not show, so nothing passes silently."""
    h = invs["health"]
    if h.checked and not health.steps:
        h.notes.append("no ni_health/lpni_health events: values checked for range only, "
                       "not their steps")
    sens = {name: f"{st.sensitivity} ({st.sens_from})" for name, st in tracker.nodes.items()
            if st.sensitivity is not None}
    if health.steps and sens:
        h.notes.append("health_sensitivity: " + ", ".join(f"{k} {v}"
                                                          for k, v in sorted(sens.items())))
    f = invs["fatal_ni"]
    if f.checked and not tracker.state_events:
        f.notes.append("no ni_link/ni_status events: every local NI was taken as up")
    if msgs.queued_on_fatal:
        f.notes.append(f"{msgs.queued_on_fatal} send(s) on an NI chosen before it went fatal "
                       "(queued for credits) not counted against it")
    if msgs.sends and not invs["resend"].checked:
        invs["resend"].why_not = "message trace sends carry no attempt field"


def check_file(path: str | Path) -> Result:
    """Check a JSON-lines event log file (``--events FILE``).

    Raises:
        eventlog.LogError: the file cannot be read.
    """
    loaded = eventlog.read_file(path)
    return check_events(loaded.events, skipped=loaded.skipped)


def check_rundir(rdir: str | Path) -> Result:
    """Check a run directory's events.jsonl merged with its nodes' message traces -- a live
    one, one kept after ``down`` or a copy: the merge is read as a stream
    (``eventlog.stream_rundir``), never held whole."""
    stream = eventlog.stream_rundir(rdir)
    return check_events(stream, skipped=lambda: stream.skipped)
