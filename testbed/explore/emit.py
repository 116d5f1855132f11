"""Writing a shrunk schedule out as a pytest file with explicit steps (issue 17 item 2).

Theory of operation: ``write(out_dir, ...)`` writes two files: the topology with the
schedule's tunables in its ``global:`` block (``topo.with_tunables``), and
``test_explore_<topology>_seed<S>_<invariant>.py``, one test whose body is the schedule's
timeline as ``Replay`` calls (``r.at(t)`` then the step), then ``assert_safe``, and, for a
failure found in the liveness phase, ``assert_live`` (``testkit.py``). The calls are the
runner's own (``runner.play``), so on ``--lnet-backend=sim`` the test replays the exploration
run exactly; on Mininet the same steps run on wall-clock time. The docstring says where it was
found (backend, command, planted bug), what broke, how far it was shrunk, how to run it.

A safety failure's test keeps its faults on until the last one ends (``safety_end``), not
only until the shrunk run proved it: the shrinker ends the safety phase as early as the
failure shows on the sim, but on Mininet each daemon's timers (monitor tick, router checker,
recovery pings) run from its own start, so which fault cycle meets them right varies from
run to run (fatal-ni-by-health seed 5: with the bring-up 2-3.5 s longer than usual it showed
only in the next flap cycle, 2 s after the shrunk end). On the sim the extra time follows the
exploration run; a planted bug's test then fails as early as before.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from testbed.explore.model import Schedule
from testbed.explore.runner import Violation
from testbed.explore.shrink import SHIFT
from testbed.explore.topo import Topo, with_tunables


def _args(*pos: Any, **kw: Any) -> str:
    parts = [repr(p) for p in pos] + [f"{k}={v!r}" for k, v in kw.items()]
    return ", ".join(parts)


def safety_end(sch: Schedule, violation: Violation) -> float:
    """Where the written test ends its safety phase (module doc): the last fault's end for
    a safety failure, if later than the shrunk schedule's; else the schedule's own end (a
    liveness failure heals where it was found)."""
    if violation.phase != "safety":
        return sch.time
    return max(sch.time, round(max((f.end for f in sch.faults), default=0.0), 3))


def steps(sch: Schedule, end: float | None = None) -> list[str]:
    """The test body's step lines (what ``runner.play`` does, as code); ``end``: where the
    safety phase ends (default: the schedule's own end)."""
    lines = []
    for t, what, item in sch.actions():
        lines.append(f"r.at({t!r})")
        if what == "fault":
            spec = {k: v for k, v in item.spec.items() if k != "kind"}
            lines.append(f"r.fault({_args(item.kind, **spec)})")
        elif what in ("rule_add", "rule_del"):
            argv = item.add if what == "rule_add" else item.delete
            lines.append(f"r.lctl({_args(item.node, *argv)})")
        else:
            args = _args(item.node, item.op, item.dst, every=item.every, count=item.count,
                         size=item.size)
            lines.append(f"r.stream({args})")
    if end is None or end <= sch.time:
        lines.append(f"r.at({sch.time!r})  # the end of the safety phase")
    else:
        lines.append(f"r.at({end!r})  # the end of the safety phase: the last fault's end "
                     f"(shrunk: {sch.time!r})")
    return lines


def write(out_dir: Path, topo: Topo, sch: Schedule, violation: Violation, *,
          original: Schedule, runs: int, planted: str | None = None,
          robust: int = 0) -> Path:
    """Write the test (and its topology) under ``out_dir``; returns the test's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    topo_file = with_tunables(topo, sch.tunables, out_dir)
    if topo_file == topo.path:  # no tunables: a copy beside the test all the same
        topo_file = out_dir / topo.path.name
        topo_file.write_text(topo.path.read_text())
    inv = re.sub(r"[^a-z0-9]+", "_", violation.invariant.lower()).strip("_")
    name = f"test_explore_{topo.path.stem.replace('-', '_')}_seed{sch.seed}_{inv}"
    path = out_dir / f"{name}.py"
    cmd = f"testbed explore {topo.name} --seed {sch.seed}"
    if planted:
        cmd += f" --planted-bug {planted}"
    end = safety_end(sch, violation)
    body = [f"    {line}" for line in steps(sch, end)]
    body.append("    assert_safe(r)")
    if violation.phase != "safety":
        body.append("    assert_live(r, TOPOLOGY)")
    bug = (f"\nFound with the planted bug {planted!r} (nodes/planted.py): it fails with\n"
           f"LNET_TESTBED_PLANTED_BUG={planted} in the environment and passes without it.\n"
           if planted else "")
    doc = "\n".join([
        f'"""Found by `{cmd}` on the sim backend (testbed explore, issue 17).',
        bug,
        "What broke (on the sim):",
        *[f"    {line}" for line in violation.render(max_proof=6)],
        "",
        f"Shrunk from {len(original.faults)} faults and {len(original.streams)} workload "
        f"streams to {len(sch.faults)} and {len(sch.streams)}",
        f"({runs} re-runs); tunables: {sch.tunables or 'as the topology sets them'}.",
        (f"Every re-run kept also failed with its steps moved by up to {SHIFT:g} s, "
         f"messages jittered\nand the engines' timers at another phase ({robust} perturbed "
         "runs), so it does not need one exact\ninterleaving." if robust else
         "It was not checked against timing perturbations: on Mininet it may fail only by "
         "chance."),
        "",
        *([f"The faults stay on until the last one ends ({end:g} s; the shrunk run proved "
           f"it by {sch.time:g} s):",
           "on Mininet the daemons' timers run from their own start, so which fault cycle",
           "shows the failure varies from run to run.", ""] if end > sch.time else []),
        "Run it on the simulator (the exploration run, event for event):",
        f"    pytest {path.name} --lnet-backend=sim",
        "and on Mininet (root; the same steps on wall-clock time, waits included):",
        f"    pytest {path.name}",
        '"""',
    ])
    text = "\n".join([
        doc, "",
        "from pathlib import Path", "",
        "import pytest", "",
        "from testbed.explore.replay import Replay",
        "from testbed.explore.testkit import "
        + ("assert_safe" if violation.phase == "safety" else "assert_live, assert_safe")
        + ", explore_testbed", "",
        "__all__ = [\"explore_testbed\"]  # the fixture, found by pytest through this module",
        "# Mininet by default; on --lnet-backend=sim the simulator (no root needed)",
        "pytestmark = [pytest.mark.mininet, pytest.mark.slow]",
        f"TOPOLOGY = Path(__file__).parent / {topo_file.name!r}",
        "SIM_SEED = 0", "", "",
        f"def {name}(explore_testbed):",
        "    r = Replay(explore_testbed)",
        *body, "",
    ])
    path.write_text(text)
    return path
