"""Requirement traceability: which tests prove which seed requirement, and how they last ended.

Theory of operation: ``docs/requirements.md`` (generated from the seeds by
``tools/gen_requirements.py``) is the one list of requirements: each is a ``### ID`` heading
followed by ``- class:``, ``- section:``, optional ``- note:`` / ``- applies: no — why`` lines and
the quoted text. Tests name what they prove with ``@pytest.mark.requirement("snd-030", ...)``.
The pytest plugin records, per test, its requirement IDs and its outcome (on the xdist
controller, from the reports workers send back), saves that as JSON (the *trace data*) and
renders the report here; ``testbed trace`` renders the same report from the saved data.

Nothing here imports pytest: the CLI uses it too.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The requirement list (generated from ../shared/seeds by tools/gen_requirements.py).
DEFAULT_REQUIREMENTS = PROJECT_ROOT / "docs" / "requirements.md"
#: Where ``make test`` leaves the trace data (``--lnet-trace=reports/trace.md``).
DEFAULT_DATA = PROJECT_ROOT / "reports" / "trace.json"
CLASSES = ("REQUIRED", "DESIRED", "NICE-TO-HAVE")

_HEADING = re.compile(r"^### ([a-z][a-z0-9-]*[a-z0-9])\s*$")
_FIELD = re.compile(r"^- (class|section|note|applies): (.*)$")


class TraceError(Exception):
    """Bad requirements file or trace data; the message is one line, fit for the user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """One seed requirement as docs/requirements.md states it."""

    id: str
    cls: str
    section: str
    text: str
    applies: bool = True
    why_not: str = ""


def load_requirements(path: str | Path | None = None) -> dict[str, Requirement]:
    """Parse the requirement list; keys in file order.

    Raises:
        TraceError: the file is missing, or a requirement lacks a class or is defined twice
            (the message names the file and line).
    """
    path = Path(path) if path is not None else DEFAULT_REQUIREMENTS
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"cannot read requirements {path}: {exc.strerror or exc}") from exc
    reqs: dict[str, Requirement] = {}
    cur: dict[str, Any] | None = None

    def close() -> None:
        if cur is None:
            return
        if cur.get("class") not in CLASSES:
            raise TraceError(f"{path}:{cur['line']}: requirement {cur['id']} has no valid "
                             f"'- class:' line (one of {', '.join(CLASSES)})")
        applies = cur.get("applies", "yes")
        reqs[cur["id"]] = Requirement(
            id=cur["id"], cls=cur["class"], section=cur.get("section", ""),
            text="\n".join(cur["text"]).strip(), applies=not applies.startswith("no"),
            why_not=applies.partition("—")[2].strip())

    for lineno, line in enumerate(lines, 1):
        m = _HEADING.match(line)
        if m:
            close()
            if m.group(1) in reqs:
                raise TraceError(f"{path}:{lineno}: requirement {m.group(1)} defined twice")
            cur = {"id": m.group(1), "line": lineno, "text": []}
            continue
        if cur is None:
            continue
        if line.startswith("## "):
            close()
            cur = None
            continue
        f = _FIELD.match(line)
        if f and not cur["text"]:
            cur[f.group(1)] = f.group(2).strip()
        elif line.startswith(">"):
            cur["text"].append(line[1:].removeprefix(" "))
    close()
    if not reqs:
        raise TraceError(f"{path}: no requirements found (expected '### ID' headings)")
    return reqs


# -- results ---------------------------------------------------------------------------------

#: How a test's phase reports combine into one result (worst wins).
_RANK = {"passed": 0, "xfailed": 1, "skipped": 2, "failed": 3, "error": 4}


def merge_outcome(previous: str | None, when: str, outcome: str, xfail: bool = False) -> str:
    """Fold one phase report (``when``: setup/call/teardown) into a test's result.

    A failing setup or teardown is an ``error``; a failing call ``failed``; a skip in setup
    ``skipped``; otherwise ``passed``.
    """
    if outcome == "failed":
        new = "failed" if when == "call" else "error"
    elif outcome == "skipped":
        new = "xfailed" if xfail else "skipped"
    else:
        new = "passed"
    if previous is None:
        return new
    return new if _RANK[new] > _RANK[previous] else previous


def new_data() -> dict[str, Any]:
    return {"version": 1, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tests": {}}


def save_data(data: dict[str, Any], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def load_data(path: str | Path | None = None) -> dict[str, Any]:
    """The saved trace data of the last run.

    Raises:
        TraceError: no data there yet, or it is not trace data.
    """
    path = Path(path) if path is not None else DEFAULT_DATA
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise TraceError(f"no trace data at {path}: run `pytest --lnet-trace=reports/trace.md` "
                         "(or `make test`) first") from exc
    except (OSError, ValueError) as exc:
        raise TraceError(f"cannot read trace data {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tests"), dict):
        raise TraceError(f"{path}: not lnet-testbed trace data")
    return data


def data_path_for(report_path: str | Path) -> Path:
    """The JSON trace data saved beside a report (``trace.md`` -> ``trace.json``)."""
    p = Path(report_path)
    return p.with_suffix(".json") if p.suffix != ".json" else p.with_suffix(".data.json")


# -- report ----------------------------------------------------------------------------------


def coverage(reqs: dict[str, Requirement], data: dict[str, Any]
             ) -> dict[str, list[tuple[str, str]]]:
    """requirement ID -> [(test node id, result)] for every requirement (empty if uncovered)."""
    cov: dict[str, list[tuple[str, str]]] = {rid: [] for rid in reqs}
    for nodeid, test in sorted(data["tests"].items()):
        for rid in test.get("requirements", []):
            cov.setdefault(rid, []).append((nodeid, str(test.get("outcome", "unknown"))))
    return cov


def status_of(req: Requirement | None, tests: list[tuple[str, str]]) -> str:
    if not tests:
        return "n/a" if req is not None and not req.applies else "NOT COVERED"
    outcomes = {o for _, o in tests}
    if outcomes & {"failed", "error"}:
        return "FAILING"
    if "passed" in outcomes:
        return "passed"
    return "skipped"


def uncovered_required(reqs: dict[str, Requirement], data: dict[str, Any]) -> list[str]:
    """REQUIRED requirements that apply and that no test (run or skipped) covers."""
    cov = coverage(reqs, data)
    return [rid for rid, r in reqs.items()
            if r.cls == "REQUIRED" and r.applies and not cov[rid]]


def render(reqs: dict[str, Requirement], data: dict[str, Any]) -> str:
    """The traceability report (Markdown): every requirement, its tests and their results."""
    cov = coverage(reqs, data)
    tests = data["tests"]
    counts: dict[str, int] = {}
    for t in tests.values():
        counts[t.get("outcome", "unknown")] = counts.get(t.get("outcome", "unknown"), 0) + 1
    statuses = {rid: status_of(reqs.get(rid), cov[rid]) for rid in cov}
    unknown = sorted(rid for rid in cov if rid not in reqs)
    missing = uncovered_required(reqs, data)
    out = [
        "# Requirement traceability",
        "",
        f"Run started {data.get('started', '?')}: {len(tests)} tests carry requirement markers "
        f"({', '.join(f'{n} {o}' for o, n in sorted(counts.items())) or 'none ran'}).",
        f"{sum(1 for r in reqs if cov[r])} of {len(reqs)} requirements covered; "
        f"{sum(1 for s in statuses.values() if s == 'FAILING')} failing; "
        f"{len(missing)} REQUIRED requirements not covered by any test.",
        "",
        "## REQUIRED requirements no test covers",
        "",
    ]
    out += [f"- {rid} ({reqs[rid].section}): {_first_line(reqs[rid].text)}" for rid in missing]
    out += ["- (none)"] if not missing else []
    if unknown:
        out += ["", "## Requirement IDs used by tests but not in the requirement list", ""]
        out += [f"- {rid}: {', '.join(n for n, _ in cov[rid])}" for rid in unknown]
    out += ["", "## All requirements", "", "| ID | class | status | tests (last result) |",
            "|---|---|---|---|"]
    for rid, r in reqs.items():
        cell = "<br>".join(f"`{n}` {o}" for n, o in cov[rid])
        if not r.applies:
            cell = cell or f"not applicable: {r.why_not}"
        out.append(f"| {rid} | {r.cls} | {statuses[rid]} | {cell} |")
    return "\n".join(out) + "\n"


def _first_line(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"
