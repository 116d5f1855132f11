"""The pytest plugin's invariant check at testbed teardown (issue 16 item 4): every suite
becomes an invariant test.

The plugin (``testbed/pytest/plugin.py``, ``testbed/pytest/fixtures.py``, seam-owned) wires it
with two calls: ``addoption(group)`` in its ``pytest_addoption``, and
``teardown_problems(config, tb)`` when it releases a testbed, *before* ``down`` removes the
run directory; each string returned fails the test like a leftover does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.observe import eventlog
from testbed.observe.check import check_events

OPTION = "--lnet-no-check"
#: violations printed per invariant in a failure
MAX_SHOWN = 5


def addoption(group: Any) -> None:
    """``--lnet-no-check``: skip the teardown check (e.g. a suite that breaks LNet on purpose)."""
    group.addoption(OPTION, action="store_true", default=False,
                    help="do not run `testbed check` over each testbed's event log at teardown")


def events_of(tb: Any) -> list[dict[str, Any]]:
    """A testbed's whole log: its run directory's events and message traces when it has one
    (Mininet), else ``tb.events()`` (the sim's in-memory log)."""
    rdir = getattr(tb, "rundir", None)
    if isinstance(rdir, Path) and rdir.is_dir():
        try:
            return eventlog.read_rundir(rdir).events
        except eventlog.LogError:
            return []
    return list(tb.events())


def teardown_problems(config: Any, tb: Any, traced: bool = False) -> list[str]:
    """One line per violated invariant (with its proof) unless ``--lnet-no-check``.

    ``traced``: the testbed came up tracing messages, so a log whose workload moved messages
    must let check check the message invariants; if it does not, the trace is broken and the
    check would pass for want of evidence, which is a problem too."""
    if config.getoption(OPTION, False):
        return []
    events = events_of(tb)
    result = check_events(events)
    name = getattr(tb, "name", "testbed")
    problems = []
    if not result.ok:
        problems.append(f"{name}: invariant violated (testbed check; {OPTION} to skip):\n"
                        + result.render(max_violations=MAX_SHOWN))
    moved = any(e["kind"] == "traffic_end" and e.get("sent") for e in events)
    if traced and moved and "completion" not in result.checked:
        problems.append(f"{name}: testbed check could not check the message invariants: "
                        "traffic ran but the log has no message trace (kind msg)")
    return problems
