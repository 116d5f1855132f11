"""Fixtures and helpers of the ``lnet_testbed`` pytest plugin (``testbed/pytest/plugin.py``).

Theory of operation (STYLE rules 12, 14): ``testbed_factory`` and the ``topology`` /
``module_topology`` / ``session_topology`` fixtures bring testbeds up under names unique across
the run and its xdist workers, take them down at teardown and *check* that nothing is left (a
node daemon that logged a traceback fails the test too). ``wait_for`` polls state instead of
sleeping; ``Traffic`` is a background PUT generator; ``lnet_fault`` hands out a testbed's fault
API. The plugin module imports these names, so pytest registers the fixtures through it and
tests import them from ``testbed.pytest``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import backends
from testbed.base import TestbedError
from testbed.pytest import observing, trace

_UNSET = object()
#: fixtures that bring a test's topology up on ``--lnet-backend`` (on the sim they need no
#: root; ``explore_testbed``: the regressions ``testbed explore --out`` writes,
#: testbed/explore/testkit.py)
TOPOLOGY_FIXTURES = frozenset({"topology", "module_topology", "session_topology",
                               "explore_testbed"})
#: the testbeds a test made, for the evidence sections of its failure report
TESTBEDS = pytest.StashKey[list[Any]]()
#: the backends of the testbeds ``testbed_factory`` made for a test (trace report, issue 6)
FACTORY_BACKENDS = pytest.StashKey[set[str]]()


def lnet_backend(config: pytest.Config) -> backends.Backend:
    """The ``--lnet-backend`` a run brings its topologies up on (``testbed.backends``)."""
    name = config.getoption("--lnet-backend", backends.DEFAULT)
    try:
        return backends.get(name)
    except TestbedError as exc:
        raise pytest.UsageError(f"--lnet-backend={name}: {exc}") from None


def mininet_unavailable() -> str | None:
    """Why tests needing root and Mininet cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "needs root (Mininet creates namespaces, veths and bridges)"
    try:
        import mininet.net  # noqa: F401
    except ImportError as exc:
        return f"needs Mininet (`import mininet` failed: {exc})"
    return None



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
    mininet = backends.get("mininet")  # this factory's testbeds are Mininet's

    made: list[tuple[str, Any]] = []  # (name, root), recorded before `up` is even tried
    up: dict[str, Any] = {}  # name -> testbed, for the teardown check
    traced: dict[str, bool] = {}  # name -> it traced messages

    def make(topology_path: str | os.PathLike[str] | None = None, **kw: Any) -> Any:
        if "name" in kw:
            raise pytest.UsageError("testbed_factory picks unique names itself; drop name=")
        name = unique_name(request.config)
        made.append((name, kw.get("root")))
        request.node.stash.setdefault(FACTORY_BACKENDS, set()).add(str(kw.get("backend",
                                                                             "mininet")))
        for key, value in observing.up_kwargs(request.config).items():
            kw.setdefault(key, value)  # recorder and message trace (issue 16)
        tb = mininet.up(topology_path, name=name, **kw)
        up[name], traced[name] = tb, bool(kw["trace_messages"])
        request.node.stash.setdefault(TESTBEDS, []).append(tb)  # evidence on failure
        return tb

    yield make

    problems = []
    for name, root in made:
        if name in up:  # LNet's promises over its whole log, before down removes it
            problems += observing.teardown_problems(request.config, up[name],
                                                    traced=traced[name])
        problems += _teardown_one(name, root)
    if problems:
        pytest.fail("testbed problems at teardown:\n  " + "\n  ".join(problems),
                    pytrace=False)


def _teardown_one(name: str, root: Any) -> list[str]:
    """Down testbed ``name`` (if it is still there) and list what it left behind."""
    from testbed import runstate
    from testbed.base import TestbedError
    from testbed.clean import clean_testbed, leftovers

    crashed = _daemon_tracebacks(runstate.rundir(name, root))
    try:
        backends.get("mininet").attach(name, runstate.rundir(name, root),
                                       runstate.runroot(root)).down()
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
            found.append(f"{rdir.name}: node {log.stem} logged a traceback:\n"
                         f"{_first_traceback(text)}")
    return found


def _first_traceback(text: str, limit: int = 3000) -> str:
    """The first traceback of a log, up to its exception line (the log lines after it can be
    many: showing the log's tail instead hid the traceback itself)."""
    lines = text[text.index("Traceback (most recent call last)"):].splitlines()
    end = next((i for i, line in enumerate(lines[1:], 1) if not line.startswith(" ")),
               len(lines) - 1)
    return "\n".join(lines[:end + 1])[-limit:]


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


# -- topology fixtures ---------------------------------------------------------------------------


def resolve_topology(spec: str | os.PathLike[str] | None, base: Path | None = None) -> Path | None:
    """A ``topology`` marker argument as a file: a path (relative to ``base``, the test's
    directory), or a name of ``topologies/`` (``"default"`` -> topologies/default.yaml).

    Raises:
        pytest.UsageError: no such file.
    """
    if spec is None:
        return None
    p = Path(spec)
    candidates = [p] if p.is_absolute() else [*(([base / p]) if base else []), Path.cwd() / p]
    if p.suffix not in (".yaml", ".yml"):
        candidates += [trace.PROJECT_ROOT / "topologies" / f"{spec}.yaml"]
    for c in candidates:
        if c.is_file():
            return c
    raise pytest.UsageError(f"topology {str(spec)!r}: no such file (tried "
                            f"{', '.join(str(c) for c in candidates)})")


def _topology_of(node: pytest.Item | pytest.Collector) -> Path | None:
    mark = node.get_closest_marker("topology")
    if mark is None:
        return None
    if len(mark.args) != 1 or mark.kwargs:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.topology takes one topology "
                                "name or path")
    return resolve_topology(mark.args[0], Path(str(node.path)).parent)


def _bring_up(config: pytest.Config, path: Path | None) -> tuple[Any, str]:
    """Bring up ``path`` on the configured backend; returns (testbed, name)."""
    kind = lnet_backend(config)
    name = unique_name(config)
    if kind.in_process is not None:  # the sim: in this process, recorder files kept apart
        kw = observing.sim_kwargs(config, name)
        try:
            return kind.up(path, name=name, **kw), name
        except BaseException:
            if kw.get("record_dir"):
                shutil.rmtree(kw["record_dir"], ignore_errors=True)
            raise
    kw = observing.up_kwargs(config)
    if kind.providers:  # guests (testbed/vagrant/)
        kw["provider"] = config.getoption("--lnet-provider", "lxc")
    if kind.needs_root:
        reason = mininet_unavailable()
        if reason:
            pytest.skip(reason)
    return kind.up(path, name=name, **kw), name


def _release(config: pytest.Config, tb: Any, name: str) -> list[str]:
    """The teardown check (issue 16: before ``down``), then down and the leftovers."""
    problems = observing.teardown_problems(config, tb)
    if lnet_backend(config).in_process is not None:
        tb.down()
        observing.release_sim(tb)
        return problems
    return problems + _teardown_one(name, None)


def _lifetime(request: pytest.FixtureRequest, path: Path | None,
              evidence: bool = False) -> Iterator[Any]:
    """Up ``path`` on the configured backend, hand it out, down it and check the leftovers."""
    tb, name = _bring_up(request.config, path)
    if evidence:
        request.node.stash.setdefault(TESTBEDS, []).append(tb)
    yield tb
    problems = _release(request.config, tb, name)
    if problems:
        pytest.fail("testbed problems at teardown:\n  " + "\n  ".join(problems),
                    pytrace=False)


@pytest.fixture
def topology(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A testbed of this test alone: the closest ``topology`` marker (default topology)."""
    yield from _lifetime(request, _topology_of(request.node), evidence=True)


@pytest.fixture(scope="module")
def module_topology(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One testbed shared by the tests of a module (the module's ``topology`` marker).

    For tests that only read state or leave it as they found it: each bring-up costs ~0.7 s.
    """
    yield from _lifetime(request, _topology_of(request.node))


@pytest.fixture(scope="session")
def session_topology(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One testbed per xdist worker for the whole run (``--lnet-topology``, else default)."""
    yield from _lifetime(request, resolve_topology(request.config.getoption("--lnet-topology",
                                                                            None)))


class FaultHandle:
    """Thin pass-through to a testbed's fault API (``tb.fault``), for suites and reports."""

    def __init__(self, testbed: Any) -> None:
        self.testbed = testbed
        self.api = testbed.fault

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


@pytest.fixture
def lnet_fault() -> Callable[[Any], FaultHandle]:
    """``lnet_fault(tb)`` -> the fault API of ``tb``; skips while the API does not exist."""

    def handle(tb: Any) -> FaultHandle:
        if getattr(type(tb), "fault", None) is None:
            pytest.skip("this testbed has no fault API")
        return FaultHandle(tb)

    return handle


class Traffic:
    """A background traffic generator: bursts of ``burst`` PUTs (``op="get"``: GETs) from
    ``node`` to ``dst`` until stopped; totals of what was sent, completed and failed (with
    the failure kinds).

    Use as a context manager: ``with Traffic(c1, nid) as t: ...; t.totals()``.
    """

    def __init__(self, node: Any, dst: str, burst: int = 20, size: int = 4096,
                 op: str = "put") -> None:
        if op not in ("put", "get"):
            raise ValueError(f"Traffic: op must be 'put' or 'get', not {op!r}")
        self.node, self.dst, self.burst, self.size, self.op = node, dst, burst, size, op
        self.sent = self.completed = self.failed = 0
        self.errors: dict[str, int] = {}
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"traffic-{node.name}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reply = getattr(self.node, self.op)(self.dst, count=self.burst,
                                                    size=self.size, timeout=60.0)
            except Exception as exc:  # recorded and shown by totals()
                self.problems.append(repr(exc))
                return
            if not reply.get("ok"):
                self.problems.append(str(reply.get("error", reply)))
                return
            self.sent += int(reply["sent"])
            self.completed += int(reply["completed"])
            self.failed += int(reply["failed"])
            for kind, n in (reply.get("errors") or {}).items():
                self.errors[kind] = self.errors.get(kind, 0) + int(n)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def stop(self, timeout: float = 90.0) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout)
        return self.totals()

    def totals(self) -> dict[str, Any]:
        return {"sent": self.sent, "completed": self.completed, "failed": self.failed,
                "errors": dict(self.errors), "problems": list(self.problems)}

    def __enter__(self) -> Traffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
