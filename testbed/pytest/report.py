"""Evidence and traceability of the ``lnet_testbed`` pytest plugin (``testbed/pytest/plugin.py``).

Theory of operation (STYLE rule 15): when a test that used testbeds fails, its report gets
sections with each node's ``net show -v 3``, ``peer show -v 3``, ``stats show``, the event
log's tail and the path and summary of a ``testbed report`` made while the testbed is still
up (``observing.failure_report``); ``pytest_runtest_makereport`` is re-exported by the
plugin module so pluggy registers it once. ``TraceCollector`` gathers the outcome of every
test carrying requirement markers (on the xdist controller: from the workers' reports) and
writes the ``--lnet-trace`` report.
Each test's report carries a ``backend`` user property (``backend_of_item``; also a JUnit
property): ``mininet``/``sim`` when it used the plugin's testbed fixtures on that backend,
``unit`` when it used none, so the report can tell coverage on Mininet apart (issue 6).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.pytest import observing, trace
from testbed.pytest.fixtures import FACTORY_BACKENDS, TESTBEDS, TOPOLOGY_FIXTURES

#: How many events of the log a failure report shows.
EVENT_TAIL = 30
#: Bound on each lnetctl call made to document a failure.
EVIDENCE_TIMEOUT = 5.0

_REQS = pytest.StashKey[dict[str, Any]]()


def requirements_of(config: pytest.Config) -> dict[str, Any]:
    if _REQS not in config.stash:
        try:
            config.stash[_REQS] = trace.load_requirements(
                config.getoption("--lnet-requirements", None))
        except trace.TraceError as exc:
            raise pytest.UsageError(f"{exc} (set --lnet-requirements=PATH)") from exc
    return config.stash[_REQS]



# -- evidence on failure -------------------------------------------------------------------------


def _testbeds_of(item: pytest.Item) -> list[Any]:
    """The testbeds a test used: made through its fixtures, or handed to it as arguments."""
    found = list(item.stash.get(TESTBEDS, []))
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


def backend_of_item(item: pytest.Item) -> str:
    """The backend ``item`` ran on: that of the topology fixtures (``--lnet-backend``) if it
    uses one, ``mininet`` for ``testbed_factory`` (unless it made only sim testbeds),
    ``unit`` if it used no testbed fixture at all."""
    names = set(getattr(item, "fixturenames", ()))
    found = set(item.stash.get(FACTORY_BACKENDS, set()))
    if names & TOPOLOGY_FIXTURES:
        found.add(str(item.config.getoption("--lnet-backend", "mininet")))
    if "testbed_factory" in names and not found:
        found.add("mininet")
    return "mininet" if "mininet" in found else "sim" if found else "unit"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    if call.when in ("setup", "teardown"):  # teardown: testbed_factory's testbeds are known
        props = [p for p in item.user_properties if p[0] != "backend"]
        item.user_properties[:] = [*props, ("backend", backend_of_item(item))]
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        for tb in _testbeds_of(item):
            for title, text in lnet_evidence(tb):
                report.sections.append((title, text))
            made = observing.failure_report(item.config, tb, item.nodeid)  # issue 16
            if made is not None:
                report.sections.append(made)


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
        backends = [v for k, v in report.user_properties if k == "backend"]
        if backends:
            test["backend"] = backends[-1]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = self.config.getoption("--lnet-trace", None)
        if not path or hasattr(self.config, "workerinput"):
            return  # workers send their reports to the controller, which writes the report
        writer = self.config.get_terminal_writer()
        try:
            reqs = requirements_of(self.config)
            trace.save_data(self.data, trace.data_path_for(path))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(trace.render(reqs, self.data))
        except (OSError, pytest.UsageError) as exc:
            writer.line(f"lnet-trace: cannot write {path}: {exc}", red=True)
            return
        missing = trace.uncovered_required(reqs, self.data)
        no_mininet = trace.uncovered_on_mininet(reqs, self.data)
        self.summary = (f"lnet-trace: {path}: {len(self.data['tests'])} tests with requirement "
                        f"markers, {len(missing)} REQUIRED requirements uncovered, "
                        f"{len(no_mininet)} not covered by a passing Mininet test")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary:
            terminalreporter.write_line(self.summary)
