"""pytest plugin ``lnet_testbed``: testbeds as fixtures that prove they left nothing behind.

Theory of operation (STYLE rules 12, 14, 15): a test asks for ``testbed_factory`` and calls it
to bring topologies up. Every testbed gets a name unique across the whole run and across xdist
workers (``t`` + 4 hex of the run uid + worker number + a counter, e.g. ``t3fa9w2n1``), so
``pytest -n auto`` never shares a name, a kernel interface or a socket. At teardown the factory
takes every testbed it made down, then *checks* with ``leftovers(name)`` that no process,
interface, link or run directory remains, and fails the test with the list if any does (as
pyzmq's ``term_context`` fails on open sockets).

Markers: ``mininet`` (needs root and Mininet; skipped with the reason otherwise), ``slow``,
``requirement(*ids)`` (traceability to requirement IDs), ``topology(name)``. A node daemon that
logged a Python traceback also fails the test (STYLE rule 12).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

MARKERS = (
    "mininet: needs root and Mininet (real namespaces, bridges, processes)",
    "slow: takes more than a few seconds (CI still runs it)",
    "requirement(*ids): the requirement IDs this test covers (e.g. 'snd-030')",
    "topology(name): the topology a test runs on (topologies/NAME.yaml)",
)

_UNSET = object()


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def mininet_unavailable() -> str | None:
    """Why tests needing root and Mininet cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "needs root (Mininet creates namespaces, veths and bridges)"
    try:
        import mininet.net  # noqa: F401
    except ImportError as exc:
        return f"needs Mininet (`import mininet` failed: {exc})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.get_closest_marker("mininet") is None:
            continue
        if reason is None:
            reason = mininet_unavailable() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _run_uid(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    if workerinput and workerinput.get("testrunuid"):
        return str(workerinput["testrunuid"])
    uid = getattr(config, "_lnet_testbed_uid", None)
    if uid is None:
        uid = uuid.uuid4().hex
        config._lnet_testbed_uid = uid  # type: ignore[attr-defined]
    return uid


def _worker_number(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    wid = str(workerinput.get("workerid", "")) if workerinput else ""
    digits = "".join(c for c in wid if c.isdigit())
    return digits or "m"


_COUNTER = itertools.count(1)  # per process: names also carry the worker number and run uid


def unique_name(config: pytest.Config) -> str:
    """A testbed name no other test of this run (any worker) uses, matching NAME_RE."""
    return f"t{_run_uid(config)[:4]}w{_worker_number(config)}n{next(_COUNTER)}"


@pytest.fixture
def testbed_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make(topology_path=None, **kw) -> Testbed``; all are downed and checked at teardown.

    ``kw`` goes to ``Testbed.up`` (``progress=``, ``root=``); ``name=`` is refused because
    names must be unique per run.
    """
    reason = mininet_unavailable()
    if reason:
        pytest.skip(reason)
    from testbed.api import Testbed

    made: list[tuple[str, Any]] = []  # (name, root), recorded before `up` is even tried

    def make(topology_path: str | os.PathLike[str] | None = None, **kw: Any) -> Any:
        if "name" in kw:
            raise pytest.UsageError("testbed_factory picks unique names itself; drop name=")
        name = unique_name(request.config)
        made.append((name, kw.get("root")))
        return Testbed.up(topology_path, name=name, **kw)

    yield make

    problems = []
    for name, root in made:
        problems += _teardown_one(name, root)
    if problems:
        pytest.fail("testbed leftovers after teardown:\n  " + "\n  ".join(problems),
                    pytrace=False)


def _teardown_one(name: str, root: Any) -> list[str]:
    """Down testbed ``name`` (if it is still there) and list what it left behind."""
    from testbed import runstate
    from testbed.api import Testbed, TestbedError, leftovers
    from testbed.clean import clean_testbed

    crashed = _daemon_tracebacks(runstate.rundir(name, root))
    try:
        Testbed(name, runstate.rundir(name, root), runstate.runroot(root)).down()
    except (TestbedError, OSError) as exc:
        clean_testbed(name, root)
        return [f"{name}: down failed: {exc}"]
    # processes may take a moment to be reaped after their namespace's last task ended
    deadline = time.monotonic() + 5.0
    left = leftovers(name, root)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = leftovers(name, root)
    if left:
        clean_testbed(name, root)
    return crashed + [f"{name}: {item}" for item in left]


def _daemon_tracebacks(rdir: Path) -> list[str]:
    """STYLE rule 12: a node daemon that logged a traceback fails the test that ran it."""
    found = []
    for log in sorted((rdir / "nodes").glob("*.log")):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        if "Traceback (most recent call last)" in text:
            tail = text[text.index("Traceback (most recent call last)"):][-1500:]
            found.append(f"{rdir.name}: node {log.stem} logged a traceback:\n{tail}")
    return found


def wait_for(check: Callable[[], Any], timeout: float, interval: float = 0.2,
             expected: Any = _UNSET, message: str = "") -> Any:
    """Poll ``check`` until it returns a truthy value (or ``== expected`` if given).

    Returns:
        The last value ``check`` returned.

    Raises:
        AssertionError: on timeout, showing the last value seen (and what was expected).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            error = None
        except Exception as exc:  # a getter that fails is a value too: show it
            value, error = None, exc
        ok = error is None and (bool(value) if expected is _UNSET else value == expected)
        if ok:
            return value
        if time.monotonic() >= deadline:
            want = "a truthy value" if expected is _UNSET else repr(expected)
            seen = f"raised {error!r}" if error is not None else f"returned {value!r}"
            prefix = f"{message}: " if message else ""
            raise AssertionError(f"{prefix}waited {timeout:g}s for {want}; last call {seen}")
        time.sleep(interval)
