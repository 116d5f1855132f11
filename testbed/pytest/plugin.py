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
* **Handles.** A testbed is a ``testbed.Testbed`` (any backend): ``tb.node("c1")`` is a
  ``NodeHandle`` (``.lnetctl()``, ``.yaml("net show -v 3")`` parsed, ``.lctl()``,
  ``.ping(nid)``, ``.put()``, ``.get()``), ``tb.events()`` the event log, ``tb.link()``.
  ``Traffic`` is a background PUT generator; ``lnet_fault`` passes through to ``tb.fault``.
* **Traceability.** ``@pytest.mark.requirement("snd-030", ...)`` names requirement IDs of
  docs/requirements.md (``testbed.pytest.trace``); an unknown ID is a collection error naming
  the test. IDs go into the JUnit XML as ``requirement`` properties and, with
  ``--lnet-trace=PATH``, into a traceability report written on the xdist controller from the
  reports workers send back.
* **Evidence on failure.** When a test that used testbeds fails, its report gets sections with
  each node's ``net show -v 3``, ``peer show -v 3``, ``stats show``, the event log's tail and
  the path and summary of a ``testbed report`` of each testbed (``--lnet-report-dir``).
* **Every suite is an invariant test** (issue 16, ``testbed/pytest/observing.py``): testbeds
  come up recording (``--lnet-record-period``) and tracing messages (``--lnet-no-msg-trace``
  turns it off); at teardown, before ``down``, ``testbed check`` runs over the whole log and a
  violated invariant fails the test (``--lnet-no-check`` skips it).

Modules: hooks, options and markers here; fixtures, ``wait_for`` and ``Traffic`` in
``testbed/pytest/fixtures.py``; failure evidence and the traceability collector in
``testbed/pytest/report.py``. Every public name stays importable from this module.

Markers: ``mininet`` (needs root and Mininet; skipped with the reason otherwise; on
``--lnet-backend=sim`` tests using a topology fixture run on the simulator instead),
``mininet_only(reason)`` (needs the real network; skipped on sim), ``slow``,
``requirement(*ids)``, ``topology(name_or_path)``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.pytest import observing
from testbed.pytest.fixtures import (
    TOPOLOGY_FIXTURES,
    FaultHandle,
    Traffic,
    lnet_backend,
    lnet_fault,
    mininet_unavailable,
    module_topology,
    resolve_topology,
    session_topology,
    testbed_factory,
    topology,
    unique_name,
    wait_for,
)
from testbed.pytest.report import (
    EVENT_TAIL,
    EVIDENCE_TIMEOUT,
    TraceCollector,
    lnet_evidence,
    pytest_runtest_makereport,
    requirements_of,
)

#: fixtures and the report hook are registered through this module (pytest scans its names)
__all__ = ["EVENT_TAIL", "EVIDENCE_TIMEOUT", "FaultHandle", "TraceCollector", "Traffic",
           "lnet_evidence", "lnet_fault", "mininet_unavailable", "module_topology",
           "pytest_runtest_makereport", "resolve_topology", "session_topology",
           "testbed_factory", "topology", "unique_name", "wait_for"]

MARKERS = (
    "mininet: needs root and Mininet (real namespaces, bridges, processes)",
    "mininet_only(reason): needs the real network (wire faults, processes, wall-clock "
    "timing); skipped on --lnet-backend=sim with the reason",
    "namespace_only(reason): needs what only a namespace on this machine gives (the NFQUEUE "
    "interposer, qdiscs); skipped on --lnet-backend=vagrant|hosts with the reason",
    "slow: takes more than a few seconds (CI still runs it)",
    "requirement(*ids): the requirement IDs of docs/requirements.md this test proves "
    "(e.g. 'snd-030'); unknown IDs are a collection error",
    "topology(name_or_path): the topology the topology fixtures bring up "
    "(topologies/NAME.yaml or a path relative to the test file)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lnet_testbed", "lnet-testbed (emulated LNet clusters)")
    group.addoption("--lnet-backend", default="mininet", metavar="BACKEND",
                    help="backend of the topology fixtures: mininet (default) or sim")
    group.addoption("--lnet-provider", default="lxc", choices=("lxc", "libvirt"),
                    help="guests of --lnet-backend=vagrant: lxc (default) or libvirt")
    group.addoption("--lnet-topology", default=None, metavar="NAME_OR_PATH",
                    help="topology of session_topology (default: topologies/default.yaml)")
    group.addoption("--lnet-trace", default=None, metavar="PATH",
                    help="write the requirement traceability report (Markdown) to PATH and "
                         "its data beside it (PATH with .json)")
    group.addoption("--lnet-requirements", default=None, metavar="PATH",
                    help="requirement list to check markers against "
                         "(default: docs/requirements.md of lnet-testbed)")
    observing.addoptions(group)  # recorder, message trace, teardown check, reports (issue 16)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    lnet_backend(config)  # an unknown one: a usage error now
    observing.check_options(config)
    config.pluginmanager.register(TraceCollector(config), f"lnet_trace_{id(config)}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    kind = lnet_backend(config)
    sim, remote = kind.virtual_time, kind.remote
    for item in items:
        for rid in _marker_ids(item):  # (skipped tests too: the trace shows them skipped)
            item.user_properties.append(("requirement", rid))  # JUnit <property>, trace data
        only = item.get_closest_marker("mininet_only")
        if sim and only is not None:
            why = only.args[0] if only.args else "needs the real network"
            item.add_marker(pytest.mark.skip(reason=f"mininet only: {why}"))
            continue
        ns_only = item.get_closest_marker("namespace_only")
        if remote and ns_only is not None:
            why = ns_only.args[0] if ns_only.args else "needs a namespace on this machine"
            item.add_marker(pytest.mark.skip(reason=f"namespace only: {why}"))
            continue
        if "module_topology" in getattr(item, "fixturenames", ()):
            # one module testbed per module, not one per worker: with --dist loadgroup
            item.add_marker(pytest.mark.xdist_group(f"lnet-{item.nodeid.split('::')[0]}"))
        if item.get_closest_marker("mininet") is None:
            continue
        if (sim or remote) and TOPOLOGY_FIXTURES & set(getattr(item, "fixturenames", ())):
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
    known = requirements_of(item.config)
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
