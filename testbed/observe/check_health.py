"""The health invariant: health values in 0..1000 moving by the sensitivity and recovery
rules (spec §3.1/§3.2/§3.5 arithmetic).

Theory of operation: ``HealthCheck`` is fed every event (``handle``) after the ``Tracker``
(``check_state.py``) and checks each ``ni_health``/``lpni_health`` step against the one before
it on the same NI and against the rule of its cause, with the node's health sensitivity (from
the events, a ``tunable`` event, or inferred from the first unambiguous step); every health
value an event carries is in range. O(1) per event.
"""

from __future__ import annotations

from typing import Any

from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE as MAX_HEALTH
from testbed.observe.check_state import NodeState, Tracker
from testbed.observe.checktypes import Inv, Item


class HealthCheck:
    """Health values in 0..1000 moving by the sensitivity and recovery rules (spec §3)."""

    def __init__(self, inv: Inv, tracker: Tracker) -> None:
        self.inv = inv
        self.tracker = tracker
        self.last: dict[tuple[str, str, str], Item] = {}  # (node, ni|lpni, nid) -> event
        self.steps = 0

    def handle(self, item: Item) -> None:
        _idx, ev = item
        kind = ev["kind"]
        if kind in ("ni_health", "lpni_health"):
            self._step(item)
        elif kind in ("ni_error", "lpni_error", "ni_status", "lpni_status"):
            self._range(item, ev.get("health"), kind)
        elif kind == "msg" and isinstance(ev.get("health"), dict):
            for side, value in ev["health"].items():
                self._range(item, value, f"msg health.{side}")

    def _range(self, item: Item, value: Any, what: str) -> None:
        if not isinstance(value, int):
            return
        self.inv.checked += 1
        if not 0 <= value <= MAX_HEALTH:
            self.inv.flag(f"{what} health {value} outside 0..{MAX_HEALTH}", [item])

    def _step(self, item: Item) -> None:
        idx, ev = item
        node, nid = str(ev.get("node")), str(ev.get("nid"))
        side = "ni" if ev["kind"] == "ni_health" else "lpni"
        old, new, cause = ev.get("old"), ev.get("new"), ev.get("cause")
        self.inv.checked += 1
        self.steps += 1
        if not isinstance(old, int) or not isinstance(new, int):
            self.inv.flag(f"{side} {nid} on {node}: health change without integer old/new",
                          [item])
            return
        if not (0 <= old <= MAX_HEALTH and 0 <= new <= MAX_HEALTH):
            self.inv.flag(f"{side} {nid} on {node}: health {old} -> {new} outside "
                          f"0..{MAX_HEALTH}", [item])
            return
        key = (node, side, nid)
        prev = self.last.get(key)
        self.last[key] = item
        # a NI or peer NI made afresh starts at 1000; 0@lo at 0 after each `lnet configure`
        # (api-ni.c lnet_startup_lndni skips the LOLND's ni_healthv, E17)
        fresh = MAX_HEALTH if nid != "0@lo" else 0
        if prev is not None and prev[1].get("new") != old and old not in (MAX_HEALTH, fresh):
            self.inv.flag(f"{side} {nid} on {node}: health was {prev[1].get('new')}, the next "
                          f"change starts from {old}", [prev, item])
        st = self.tracker.node(node)
        if isinstance(ev.get("sensitivity"), int):
            st.sensitivity, st.sens_from = ev["sensitivity"], "the events' sensitivity field"
        why = self._rule(side, old, new, str(cause), st, idx)
        if why:
            self.inv.flag(f"{side} {nid} on {node}: {cause} moved health {old} -> {new}: {why}",
                          [item])

    @staticmethod
    def _rule(side: str, old: int, new: int, cause: str, st: NodeState, idx: int) -> str:
        """Why ``old -> new`` breaks the rule of ``cause`` ('' if it does not)."""
        if cause == "manual":
            return ""
        if cause == "reset":
            return "" if new == MAX_HEALTH else f"a reset sets {MAX_HEALTH}"
        if cause not in ("error", "ok", "recovery"):
            return f"unknown cause {cause!r} (error, ok, recovery, manual, reset)"
        down = cause == "error"
        if down and new >= old:
            return "an error must lower health"
        if not down and new <= old:
            return f"{cause} must raise health"
        if not down and side == "lpni" and new == MAX_HEALTH:
            return ""  # router rule / never-heard peer NI set straight to 1000 (spec §3.1)
        step = old - new if down else new - old
        ambiguous = new == (0 if down else MAX_HEALTH)
        if st.sensitivity is None:
            if ambiguous:
                return ""
            st.sensitivity, st.sens_from = step, f"inferred from event #{idx}"
            return ""
        s = st.sensitivity
        want = max(old - s, 0) if down else min(old + s, MAX_HEALTH)
        if new != want:
            return (f"expected {want} with health_sensitivity {s} "
                    f"({st.sens_from})")
        return ""
