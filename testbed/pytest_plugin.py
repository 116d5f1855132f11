"""pytest plugin ``lnet_testbed``: LUTF-style suites on pytest, with results that can fail.

Theory of operation (STYLE rules 12, 14, 15):

* **Testbeds.** ``testbed_factory`` brings topologies up; the ``topology`` (per test),
  ``module_topology`` and ``session_topology`` fixtures bring up the topology named by the
  closest ``@pytest.mark.topology(...)`` marker (``--lnet-topology`` for the session one).
  Every testbed gets a name unique across the whole run and across xdist workers (``t`` + 4
  hex of the run uid + worker number + a counter, e.g. ``t3fa9w2n1``), so ``pytest -n auto``
  never shares a name, a kernel interface or a socket. At teardown every testbed is taken down
  and *checked* with ``leftovers(name)``: anything left fails the test (as pyzmq's
  ``term_context`` fails on open sockets); a node daemon that logged a traceback does too.
* **Handles.** A testbed is a ``testbed.api.Testbed``: ``tb.node("c1")`` is a ``NodeHandle``
  (``.lnetctl()``, ``.yaml("net show -v 3")`` parsed, ``.lctl()``, ``.ping(nid)``, ``.put()``,
  ``.get()``), ``tb.events()`` the event log, ``tb.link()``. ``Traffic`` is a background PUT
  generator; ``lnet_fault`` passes through to ``tb.fault`` (skips while that API is absent).
* **Traceability.** ``@pytest.mark.requirement("snd-030", ...)`` names requirement IDs of
  docs/requirements.md (``testbed.trace``); an unknown ID is a collection error naming the test.
  IDs go into the JUnit XML as ``requirement`` properties and, with ``--lnet-trace=PATH``, into
  a traceability report written on the xdist controller from the reports workers send back.
* **Evidence on failure.** When a test that used testbeds fails, its report gets sections with
  each node's ``net show -v 3``, ``peer show -v 3``, ``stats show`` and the event log's tail.

Markers: ``mininet`` (needs root and Mininet; skipped with the reason otherwise; on
``--lnet-backend=sim`` tests using a topology fixture run on the simulator instead),
``mininet_only(reason)`` (needs the real network; skipped on sim), ``slow``,
``requirement(*ids)``, ``topology(name_or_path)``.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import trace

MARKERS = (
    "mininet: needs root and Mininet (real namespaces, bridges, processes)",
    "mininet_only(reason): needs the real network (wire faults, processes, wall-clock "
    "timing); skipped on --lnet-backend=sim with the reason",
    "slow: takes more than a few seconds (CI still runs it)",
    "requirement(*ids): the requirement IDs of docs/requirements.md this test proves "
    "(e.g. 'snd-030'); unknown IDs are a collection error",
    "topology(name_or_path): the topology the topology fixtures bring up "
    "(topologies/NAME.yaml or a path relative to the test file)",
)
BACKENDS = ("mininet", "sim")
#: How many events of the log a failure report shows.
EVENT_TAIL = 30
#: Bound on each lnetctl call made to document a failure.
EVIDENCE_TIMEOUT = 5.0

_UNSET = object()
_TOPOLOGY_FIXTURES = frozenset({"topology", "module_topology", "session_topology"})
_TESTBEDS = pytest.StashKey[list[Any]]()
_REQS = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lnet_testbed", "lnet-testbed (emulated LNet clusters)")
    group.addoption("--lnet-backend", default="mininet", metavar="BACKEND",
                    help="backend of the topology fixtures: mininet (default) or sim")
    group.addoption("--lnet-topology", default=None, metavar="NAME_OR_PATH",
                    help="topology of session_topology (default: topologies/default.yaml)")
    group.addoption("--lnet-trace", default=None, metavar="PATH",
                    help="write the requirement traceability report (Markdown) to PATH and "
                         "its data beside it (PATH with .json)")
    group.addoption("--lnet-requirements", default=None, metavar="PATH",
                    help="requirement list to check markers against "
                         "(default: docs/requirements.md of lnet-testbed)")


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    backend = config.getoption("--lnet-backend", "mininet")
    if backend not in BACKENDS:
        raise pytest.UsageError(f"--lnet-backend={backend}: unknown backend "
                                f"(choose one of: {', '.join(BACKENDS)})")
    if backend == "sim" and importlib.util.find_spec("testbed.sim") is None:
        raise pytest.UsageError("--lnet-backend=sim: the simulator (testbed/sim.py) is not "
                                "available yet; use --lnet-backend=mininet")
    config.pluginmanager.register(TraceCollector(config), f"lnet_trace_{id(config)}")


def _requirements(config: pytest.Config) -> dict[str, Any]:
    if _REQS not in config.stash:
        try:
            config.stash[_REQS] = trace.load_requirements(
                config.getoption("--lnet-requirements", None))
        except trace.TraceError as exc:
            raise pytest.UsageError(f"{exc} (set --lnet-requirements=PATH)") from exc
    return config.stash[_REQS]


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
    sim = config.getoption("--lnet-backend", "mininet") == "sim"
    for item in items:
        only = item.get_closest_marker("mininet_only")
        if sim and only is not None:
            why = only.args[0] if only.args else "needs the real network"
            item.add_marker(pytest.mark.skip(reason=f"mininet only: {why}"))
            continue
        if "module_topology" in getattr(item, "fixturenames", ()):
            # one module testbed per module, not one per worker: with --dist loadgroup
            item.add_marker(pytest.mark.xdist_group(f"lnet-{item.nodeid.split('::')[0]}"))
        for rid in _marker_ids(item):
            item.user_properties.append(("requirement", rid))  # JUnit <property>, trace data
        if item.get_closest_marker("mininet") is None:
            continue
        if sim and _TOPOLOGY_FIXTURES & set(getattr(item, "fixturenames", ())):
            continue  # runs on the simulator: no root, no Mininet needed
        if reason is None:
            reason = mininet_unavailable() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _marker_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("requirement"):
        ids += [a for a in mark.args if a not in ids]
    return ids


def _bad_requirements(item: pytest.Item) -> str | None:
    """Why ``item``'s requirement markers are wrong (None if they are fine)."""
    marks = list(item.iter_markers("requirement"))
    if not marks:
        return None
    known = _requirements(item.config)
    for mark in marks:
        if not mark.args or mark.kwargs:
            return (f"{item.nodeid}: @pytest.mark.requirement takes one or more requirement IDs "
                    "as positional strings, e.g. requirement(\"snd-030\")")
        bad = [a for a in mark.args if not isinstance(a, str) or a not in known]
        if bad:
            src = item.config.getoption("--lnet-requirements", None) or "docs/requirements.md"
            return (f"{item.nodeid}: unknown requirement ID {', '.join(map(repr, bad))} "
                    f"(not in {src}; IDs look like snd-030, hlth-lnt-decrement)")
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """An unknown requirement ID turns the collection of its module into an error."""
    outcome = yield
    rep = outcome.get_result()
    if rep.outcome != "passed":
        return
    errors = [why for item in rep.result if isinstance(item, pytest.Item)
              and (why := _bad_requirements(item))]
    if errors:
        rep.outcome = "failed"
        rep.longrepr = "\n".join(errors)
        rep.result = []


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
        tb = Testbed.up(topology_path, name=name, **kw)
        request.node.stash.setdefault(_TESTBEDS, []).append(tb)  # evidence on failure
        return tb

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
    backend = config.getoption("--lnet-backend", "mininet")
    name = unique_name(config)
    from testbed.api import Testbed

    if backend == "sim":  # pytest_configure refused it unless testbed.sim exists
        return Testbed.up(path, name=name, backend="sim"), name
    reason = mininet_unavailable()
    if reason:
        pytest.skip(reason)
    return Testbed.up(path, name=name), name


def _release(config: pytest.Config, tb: Any, name: str) -> list[str]:
    if config.getoption("--lnet-backend", "mininet") == "sim":
        tb.down()
        return []
    return _teardown_one(name, None)


@pytest.fixture
def topology(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A testbed of this test alone: the closest ``topology`` marker (default topology)."""
    tb, name = _bring_up(request.config, _topology_of(request.node))
    request.node.stash.setdefault(_TESTBEDS, []).append(tb)
    yield tb
    problems = _release(request.config, tb, name)
    if problems:
        pytest.fail("testbed leftovers after teardown:\n  " + "\n  ".join(problems),
                    pytrace=False)


@pytest.fixture(scope="module")
def module_topology(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One testbed shared by the tests of a module (the module's ``topology`` marker).

    For tests that only read state or leave it as they found it: each bring-up costs ~0.7 s.
    """
    tb, name = _bring_up(request.config, _topology_of(request.node))
    yield tb
    problems = _release(request.config, tb, name)
    if problems:
        pytest.fail("testbed leftovers after teardown:\n  " + "\n  ".join(problems),
                    pytrace=False)


@pytest.fixture(scope="session")
def session_topology(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One testbed per xdist worker for the whole run (``--lnet-topology``, else default)."""
    path = resolve_topology(request.config.getoption("--lnet-topology", None))
    tb, name = _bring_up(request.config, path)
    yield tb
    problems = _release(request.config, tb, name)
    if problems:
        pytest.fail("testbed leftovers after teardown:\n  " + "\n  ".join(problems),
                    pytrace=False)


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
            pytest.skip("the fault API (testbed.api.Testbed.fault) is not available yet")
        if tb.status().get("backend") == "sim":
            pytest.skip("wire faults need the mininet backend (the sim has link state only)")
        return FaultHandle(tb)

    return handle


class Traffic:
    """A background PUT generator: bursts of ``burst`` PUTs from ``node`` to ``dst`` until
    stopped; totals of what was sent, completed and failed (with the failure kinds).

    Use as a context manager: ``with Traffic(c1, nid) as t: ...; t.totals()``.
    """

    def __init__(self, node: Any, dst: str, burst: int = 20, size: int = 4096) -> None:
        self.node, self.dst, self.burst, self.size = node, dst, burst, size
        self.sent = self.completed = self.failed = 0
        self.errors: dict[str, int] = {}
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"traffic-{node.name}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reply = self.node.put(self.dst, count=self.burst, size=self.size, timeout=60.0)
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


# -- evidence on failure -------------------------------------------------------------------------


def _testbeds_of(item: pytest.Item) -> list[Any]:
    """The testbeds a test used: made through its fixtures, or handed to it as arguments."""
    found = list(item.stash.get(_TESTBEDS, []))
    for value in getattr(item, "funcargs", {}).values():
        if hasattr(value, "events") and hasattr(value, "node") and value not in found:
            found.append(value)
    return found


def lnet_evidence(tb: Any) -> list[tuple[str, str]]:
    """(title, text) sections: each node's lnetctl state and the event log's tail."""
    sections = []
    try:
        nodes = list(tb.nodes)
    except Exception as exc:
        return [(f"lnet {tb.name}", f"cannot list nodes: {exc}")]
    for node in nodes:
        parts = []
        try:
            handle = tb.node(node)
            for cmd in ("net show -v 3", "peer show -v 3", "stats show"):
                res = handle.lnetctl(cmd, timeout=EVIDENCE_TIMEOUT)
                parts.append(f"$ lnetctl {cmd}   (rc {res.rc})\n{res.out}{res.err}")
        except Exception as exc:
            parts.append(f"node {node} did not answer: {exc}")
        sections.append((f"lnet {tb.name}/{node}", "\n".join(parts)))
    try:
        import json

        events = tb.events()[-EVENT_TAIL:]
        sections.append((f"lnet {tb.name} events (last {len(events)})",
                         "\n".join(json.dumps(e, sort_keys=True) for e in events)))
    except Exception as exc:
        sections.append((f"lnet {tb.name} events", f"cannot read the event log: {exc}"))
    return sections


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        for tb in _testbeds_of(item):
            for title, text in lnet_evidence(tb):
                report.sections.append((title, text))


# -- traceability --------------------------------------------------------------------------------


class TraceCollector:
    """Per-run collector of requirement results (one per ``pytest.Config``, so a pytester
    run inside a run keeps its own). On the xdist controller it sees every worker's reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.data = trace.new_data()
        self.summary = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        ids = [v for k, v in report.user_properties if k == "requirement"]
        if not ids:
            return
        test = self.data["tests"].setdefault(report.nodeid,
                                             {"requirements": ids, "outcome": None})
        test["outcome"] = trace.merge_outcome(test["outcome"], report.when, report.outcome,
                                              xfail=hasattr(report, "wasxfail"))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = self.config.getoption("--lnet-trace", None)
        if not path or hasattr(self.config, "workerinput"):
            return  # workers send their reports to the controller, which writes the report
        writer = self.config.get_terminal_writer()
        try:
            reqs = _requirements(self.config)
            trace.save_data(self.data, trace.data_path_for(path))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(trace.render(reqs, self.data))
        except (OSError, pytest.UsageError) as exc:
            writer.line(f"lnet-trace: cannot write {path}: {exc}", red=True)
            return
        missing = trace.uncovered_required(reqs, self.data)
        self.summary = (f"lnet-trace: {path}: {len(self.data['tests'])} tests with requirement "
                        f"markers, {len(missing)} REQUIRED requirements uncovered")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary:
            terminalreporter.write_line(self.summary)
