"""Requirement traceability: which tests prove which seed requirement, and how they last ended.

Theory of operation: ``docs/requirements.md`` (generated from the seeds by
``tools/gen_requirements.py``) is the one list of requirements: each is a ``### ID`` heading
followed by ``- class:``, ``- section:``, optional ``- note:`` / ``- applies: no — why`` lines and
the quoted text. Tests name what they prove with ``@pytest.mark.requirement("snd-030", ...)``.
The pytest plugin records, per test, its requirement IDs and its outcome (on the xdist
controller, from the reports workers send back), saves that as JSON (the *trace data*) and
renders the report here; ``testbed trace`` renders the same report from the saved data.

Each result also records the *backend* the test ran on (issue 6: a requirement counts as
covered only by a passing test on the Mininet backend): ``mininet`` or ``sim`` when it used a
testbed of the plugin's fixtures, ``unit`` when it used none. The report shows it beside each
result and lists the REQUIRED requirements (and, apart, every seed-003 requirement) that no
passing Mininet test covers. Saved data of several runs (a Mininet run, a sim run) merge:
``load_data("a.json:b.json")`` (``os.pathsep``-separated, as ``testbed trace --data`` takes).

Nothing here imports pytest: the CLI uses it too.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The requirement list (generated from ../shared/seeds by tools/gen_requirements.py).
DEFAULT_REQUIREMENTS = PROJECT_ROOT / "docs" / "requirements.md"
#: Where ``make test`` leaves the trace data (``--lnet-trace=reports/trace.md``).
DEFAULT_DATA = PROJECT_ROOT / "reports" / "trace.json"
CLASSES = ("REQUIRED", "DESIRED", "NICE-TO-HAVE")
#: What a result records as its backend (``unknown``: data saved before backends were).
BACKENDS = ("mininet", "sim", "unit", "unknown")
#: Issue 6 requires every requirement of this seed, whatever its class, covered on Mininet.
ALL_CLASSES_SEED = "003"

_HEADING = re.compile(r"^### ([a-z][a-z0-9-]*[a-z0-9])\s*$")
_FIELD = re.compile(r"^- (class|section|note|applies): (.*)$")
_SEED = re.compile(r"^## .*\(seed (\d{3})\b")


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
    seed: str = ""  # "000", "003", "002": from the ``## ... (seed NNN ...)`` section heading


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
    seed = ""

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
            why_not=applies.partition("—")[2].strip(), seed=cur["seed"])

    for lineno, line in enumerate(lines, 1):
        m = _HEADING.match(line)
        if m:
            close()
            if m.group(1) in reqs:
                raise TraceError(f"{path}:{lineno}: requirement {m.group(1)} defined twice")
            cur = {"id": m.group(1), "line": lineno, "text": [], "seed": seed}
            continue
        if line.startswith("## "):
            close()
            cur = None
            sm = _SEED.match(line)
            seed = sm.group(1) if sm else ""
            continue
        if cur is None:
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
    """The saved trace data of the last run; ``path`` may name several data files separated
    by ``os.pathsep`` (e.g. a Mininet run's and a sim run's), merged by ``merge_data``.

    Raises:
        TraceError: no data there yet, or it is not trace data.
    """
    if path is not None and os.pathsep in str(path):
        return merge_data([_load_one(p) for p in str(path).split(os.pathsep) if p])
    return _load_one(path)


def _load_one(path: str | Path | None) -> dict[str, Any]:
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


def merge_data(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One data set of several runs: one result per (test, backend), a later run's result
    replacing an earlier one of the same test on the same backend. A test that ran on
    several backends is keyed ``"NODEID [BACKEND]"`` and keeps its node id in ``nodeid``."""
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        for key, test in run["tests"].items():
            nodeid, backend = str(test.get("nodeid", key)), backend_of(test)
            results[(nodeid, backend)] = {**test, "nodeid": nodeid, "backend": backend}
    seen: dict[str, int] = {}
    for nodeid, _ in results:
        seen[nodeid] = seen.get(nodeid, 0) + 1
    tests = {(n if seen[n] == 1 else f"{n} [{b}]"): t for (n, b), t in sorted(results.items())}
    return {"version": 1, "started": ", ".join(str(r.get("started", "?")) for r in runs),
            "tests": tests}


def data_path_for(report_path: str | Path) -> Path:
    """The JSON trace data saved beside a report (``trace.md`` -> ``trace.json``)."""
    p = Path(report_path)
    return p.with_suffix(".json") if p.suffix != ".json" else p.with_suffix(".data.json")


# -- report ----------------------------------------------------------------------------------


class Result(NamedTuple):
    """One test's last result for a requirement, and the backend it ran on."""

    test: str
    outcome: str
    backend: str


def backend_of(test: dict[str, Any]) -> str:
    backend = test.get("backend")
    return backend if backend in BACKENDS else "unknown"


def coverage(reqs: dict[str, Requirement], data: dict[str, Any]) -> dict[str, list[Result]]:
    """requirement ID -> [Result(test node id, result, backend)] for every requirement
    (empty if uncovered)."""
    cov: dict[str, list[Result]] = {rid: [] for rid in reqs}
    for key, test in sorted(data["tests"].items()):
        result = Result(str(test.get("nodeid", key)), str(test.get("outcome", "unknown")),
                        backend_of(test))
        for rid in test.get("requirements", []):
            cov.setdefault(rid, []).append(result)
    return cov


#: which outcomes make each status, worst first
_STATUS_OUTCOMES = {"FAILING": ("failed", "error"), "passed": ("passed",),
                    "skipped": ("skipped", "xfailed")}


def status_of(req: Requirement | None, tests: list[Result]) -> str:
    if not tests:
        return "n/a" if req is not None and not req.applies else "NOT COVERED"
    outcomes = {t[1] for t in tests}
    for status, which in _STATUS_OUTCOMES.items():
        if outcomes & set(which):
            return status
    return "skipped"


def status_cell(req: Requirement | None, tests: list[Result]) -> str:
    """``status_of`` with the backends behind it: ``passed (mininet, sim)``, or
    ``FAILING (sim); passed (mininet)`` when results differ."""
    parts = []
    for status, which in _STATUS_OUTCOMES.items():
        backends = sorted({t.backend for t in tests if t.outcome in which})
        if backends:
            parts.append(f"{status} ({', '.join(backends)})")
    return "; ".join(parts) or status_of(req, tests)


def passed_on_mininet(tests: list[Result]) -> bool:
    """Issue 6's bar: at least one passing test on the Mininet backend."""
    return any(t.outcome == "passed" and t.backend == "mininet" for t in tests)


def uncovered_required(reqs: dict[str, Requirement], data: dict[str, Any]) -> list[str]:
    """REQUIRED requirements that apply and that no test (run or skipped) covers."""
    cov = coverage(reqs, data)
    return [rid for rid, r in reqs.items()
            if r.cls == "REQUIRED" and r.applies and not cov[rid]]


def uncovered_on_mininet(reqs: dict[str, Requirement], data: dict[str, Any], *,
                         seed: str | None = None) -> list[str]:
    """Requirements that apply and that no *passing Mininet* test covers (issue 6): the
    REQUIRED ones, or with ``seed`` every requirement of that seed whatever its class."""
    cov = coverage(reqs, data)
    return [rid for rid, r in reqs.items()
            if r.applies and (r.seed == seed if seed else r.cls == "REQUIRED")
            and not passed_on_mininet(cov[rid])]


def render(reqs: dict[str, Requirement], data: dict[str, Any]) -> str:
    """The traceability report (Markdown): every requirement, its tests, their results and
    backends; the REQUIRED (and seed-003) requirements no passing Mininet test covers."""
    cov = coverage(reqs, data)
    tests = data["tests"]
    counts: dict[str, int] = {}
    for t in tests.values():
        key = f"{t.get('outcome', 'unknown')} ({backend_of(t)})"
        counts[key] = counts.get(key, 0) + 1
    statuses = {rid: status_of(reqs.get(rid), cov[rid]) for rid in cov}
    unknown = sorted(rid for rid in cov if rid not in reqs)
    missing = uncovered_required(reqs, data)
    no_mininet = uncovered_on_mininet(reqs, data)
    seed_gap = uncovered_on_mininet(reqs, data, seed=ALL_CLASSES_SEED)
    out = [
        "# Requirement traceability",
        "",
        f"Run started {data.get('started', '?')}: {len(tests)} tests carry requirement markers "
        f"({', '.join(f'{n} {o}' for o, n in sorted(counts.items())) or 'none ran'}).",
        f"{sum(1 for r in reqs if cov[r])} of {len(reqs)} requirements covered; "
        f"{sum(1 for s in statuses.values() if s == 'FAILING')} failing; "
        f"{len(missing)} REQUIRED requirements not covered by any test; "
        f"{len(no_mininet)} REQUIRED requirements not covered by a passing Mininet test; "
        f"{len(seed_gap)} seed-{ALL_CLASSES_SEED} requirements not covered by a passing "
        "Mininet test.",
        "",
        "## REQUIRED requirements no test covers",
        "",
    ]
    out += _listing(reqs, missing)
    out += ["", "## REQUIRED requirements not covered by a passing Mininet test", ""]
    out += _listing(reqs, no_mininet, cov)
    out += ["", f"## Seed {ALL_CLASSES_SEED} requirements (any class) not covered by a passing "
            "Mininet test", ""]
    out += _listing(reqs, seed_gap, cov)
    if unknown:
        out += ["", "## Requirement IDs used by tests but not in the requirement list", ""]
        out += [f"- {rid}: {', '.join(t.test for t in cov[rid])}" for rid in unknown]
    out += ["", "## All requirements", "",
            "| ID | class | status | tests (last result, backend) |", "|---|---|---|---|"]
    for rid, r in reqs.items():
        cell = "<br>".join(f"`{t.test}` {t.outcome} ({t.backend})" for t in cov[rid])
        if not r.applies:
            cell = cell or f"not applicable: {r.why_not}"
        out.append(f"| {rid} | {r.cls} | {status_cell(r, cov[rid])} | {cell} |")
    return "\n".join(out) + "\n"


def _listing(reqs: dict[str, Requirement], rids: list[str],
             cov: dict[str, list[Result]] | None = None) -> list[str]:
    """Bullet lines ``- ID (section): text``, with what covers it elsewhere if anything."""
    lines = []
    for rid in rids:
        r = reqs[rid]
        line = f"- {rid} ({r.cls}, {r.section}): {_first_line(r.text)}"
        if cov and cov[rid]:
            line += f" [now: {status_cell(r, cov[rid])}]"
        lines.append(line)
    return lines or ["- (none)"]


def _first_line(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"
