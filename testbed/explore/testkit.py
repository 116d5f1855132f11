"""What the pytest files ``testbed explore`` writes need: a testbed fixture and two checks.

Theory of operation (issue 17 item 2): an emitted test module sets ``TOPOLOGY`` (the topology
with the schedule's tunables, written beside it) and ``SIM_SEED``, imports ``explore_testbed``
and plays its steps through ``Replay``. The fixture turns the engines' message trace on
(``trace_messages=True``: the sim's fabric, or ``--trace-messages`` of every daemon) and
brings the topology up on the backend of ``--lnet-backend``: on the sim in this process with
``SIM_SEED`` (so the steps replay what ``explore`` ran, event for event), on Mininet through
the plugin's ``testbed_factory`` (unique names, teardown and leftover checks). A planted bug
(``LNET_TESTBED_PLANTED_BUG``) comes from the environment pytest runs in, so one file fails
with the bug and passes without it.

``assert_safe`` fails with ``testbed check``'s first violation and its events;
``assert_live`` heals, waits the liveness bound of the topology's tunables and fails with
every liveness problem (``liveness.problems``) and the bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import testbed
from testbed.explore import liveness, runner
from testbed.explore.model import Schedule
from testbed.explore.replay import Replay
from testbed.explore.topo import load
from testbed.pytest.fixtures import unique_name


@pytest.fixture
def explore_testbed(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The module's ``TOPOLOGY`` up on ``--lnet-backend`` with message traces on."""
    module = request.module
    path = Path(module.TOPOLOGY)
    if request.config.getoption("--lnet-backend", "mininet") == "sim":
        tb = testbed.up(path, backend="sim", name=unique_name(request.config),
                        seed=int(getattr(module, "SIM_SEED", 0)), trace_messages=True)
        yield tb
        tb.down()
        return
    make = request.getfixturevalue("testbed_factory")
    yield make(path, trace_messages=True)


def assert_safe(replay: Replay) -> None:
    """``testbed check``'s invariants hold over the log so far (else its first violation)."""
    replay.join()
    found = runner.first_violation(replay.check(), "safety")
    if found is not None:
        pytest.fail("\n".join(found.render(max_proof=12)), pytrace=False)


def assert_live(replay: Replay, topology: str | Path) -> None:
    """Heal, wait the liveness bound, then every node whole (``liveness.problems``)."""
    replay.join()
    tp = load(topology)
    bound, eff = runner.bound_of(tp, Schedule(0, 0.0))  # the tunables are the file's
    replay.heal()
    problems = liveness.wait_whole(replay, bound, eff, tp.probes())
    found = runner.first_violation(replay.check(), "liveness")
    lines = [] if found is None else found.render(max_proof=12)
    for p in problems:
        lines.append(f"liveness: {p.what}: {p.text}")
    if lines:
        pytest.fail("\n".join([*lines, f"liveness {bound.render()}"]), pytrace=False)

