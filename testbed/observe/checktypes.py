"""Types of ``testbed check``: one invariant's outcome, violations with their proof, the result.

An ``Item`` is ``(index, event)``: the event's position in the log (0-based; the line number
minus one for a single file) and the event itself, so a violation prints the very events that
prove it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Item = tuple[int, dict[str, Any]]
#: the invariants only a message trace (kind ``msg``) can check (docs/events.md §2)
MSG_INVARIANTS = ("completion", "resend", "fatal_ni", "routing")
#: violations kept per invariant (the count goes on; a broken engine can break millions)
MAX_KEPT = 200


@dataclass
class Violation:
    text: str
    proof: list[Item]


@dataclass
class Inv:
    """One invariant: what it needs from the log, how many items it checked, what broke."""

    name: str
    title: str
    needs: str
    checked: int = 0
    count: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    why_not: str = ""

    def flag(self, text: str, proof: list[Item]) -> None:
        self.count += 1
        if len(self.violations) < MAX_KEPT:
            self.violations.append(Violation(text, list(proof)))

    @property
    def checkable(self) -> bool:
        return self.checked > 0 and not self.why_not


@dataclass
class Result:
    """What ``check_events`` found: ``ok`` unless an invariant was violated."""

    invariants: dict[str, Inv]
    events: int
    skipped: int = 0
    t_end: float | None = None
    #: message trace events (kind ``msg``) in the log: none means tracing was off
    traced: int = 0

    @property
    def untraced(self) -> list[str]:
        """The invariants left unchecked because the log has no message trace at all
        (``testbed up --no-trace``): what ``render`` warns of."""
        return [] if self.traced else [n for n in self.unchecked if n in MSG_INVARIANTS]

    @property
    def ok(self) -> bool:
        return all(inv.count == 0 for inv in self.invariants.values())

    @property
    def checked(self) -> list[str]:
        return [n for n, inv in self.invariants.items() if inv.checkable]

    @property
    def unchecked(self) -> list[str]:
        return [n for n, inv in self.invariants.items() if not inv.checkable]

    def render(self, max_violations: int = 20) -> str:
        """The report ``testbed check`` prints: a line per invariant, then each violation
        with its proof (at most ``max_violations`` per invariant)."""
        lines = [f"checked {self.events} events" + (f" ({self.skipped} unreadable lines "
                                                   "skipped)" if self.skipped else "")]
        for inv in self.invariants.values():
            if not inv.checkable:
                why = inv.why_not or f"the log has no {inv.needs}"
                lines.append(f"  NOT CHECKED {inv.name:<11} {inv.title}: {why}")
                continue
            verdict = f"{inv.count} VIOLATION{'S' if inv.count != 1 else ''}" if inv.count \
                else "ok"
            lines.append(f"  {verdict:<14} {inv.name:<11} {inv.title} ({inv.checked} checked)")
            lines += [f"      note: {n}" for n in inv.notes]
        for inv in self.invariants.values():
            for v in inv.violations[:max_violations]:
                lines.append(f"VIOLATION {inv.name}: {v.text}")
                lines += [f"    #{i} {json.dumps(ev, sort_keys=True)}" for i, ev in v.proof]
            if inv.count > max_violations:
                lines.append(f"VIOLATION {inv.name}: ... and {inv.count - max_violations} more")
        if self.untraced:  # loud, just above the verdict (issue 31 item 5)
            lines.append(f"WARN: {len(self.untraced)} of {len(self.invariants)} invariants NOT "
                         f"CHECKED ({', '.join(self.untraced)}): the log has no message trace "
                         "(tracing was off: `testbed up --no-trace`)")
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(lines) + "\n"
