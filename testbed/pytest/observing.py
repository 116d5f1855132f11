"""What the ``lnet_testbed`` plugin observes of every testbed it brings up (issue 16).

Theory of operation: under pytest every testbed records (``--lnet-record-period``, default
100 ms: ``RUNDIR/nodes/NODE.rec``, the sim on virtual time) and traces every message
(``--lnet-no-msg-trace`` turns it off), so that at release, *before* ``down`` removes the run
directory, ``teardown_problems`` runs ``testbed check`` over the whole log: the writers are
first asked to write what they buffer, then every invariant violation fails the test that used
the testbed, as a leftover does (``--lnet-no-check`` skips it). A test that fails gets a
``testbed report`` of each of its testbeds (``failure_report``; the pages go under
``--lnet-report-dir``, default the run's pytest temporary directory) and the report's path in
its failure output, made while the testbed is still up.

The in-process sim has no run directory: its event log is in memory, and its recorder files go
to a temporary directory the plugin makes per testbed (``sim_record_dir``) and removes with it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from testbed.observe import pytest_check

RECORD_OPTION = "--lnet-record-period"
TRACE_OFF_OPTION = "--lnet-no-msg-trace"
REPORT_DIR_OPTION = "--lnet-report-dir"
DEFAULT_RECORD_MS = 100.0


def addoptions(group: Any) -> None:
    """The plugin's observation options (and ``--lnet-no-check``)."""
    pytest_check.addoption(group)
    group.addoption(RECORD_OPTION, type=float, default=DEFAULT_RECORD_MS, metavar="MS",
                    help="recorder period of every testbed's nodes in milliseconds "
                         "(default 100; 0: no recorder files)")
    group.addoption(TRACE_OFF_OPTION, action="store_true", default=False,
                    help="do not trace messages (the teardown check then cannot check the "
                         "message invariants)")
    group.addoption(REPORT_DIR_OPTION, default=None, metavar="DIR",
                    help="where the report of each testbed of a failing test goes "
                         "(default: the run's pytest temporary directory)")


def check_options(config: pytest.Config) -> None:
    """Bad option values are usage errors with the fix in the message."""
    ms = config.getoption(RECORD_OPTION, DEFAULT_RECORD_MS)
    if not 0 <= ms <= 3_600_000:
        raise pytest.UsageError(f"{RECORD_OPTION}={ms:g}: give 0..3600000 milliseconds "
                                "(0 turns the recorder off)")


def up_kwargs(config: pytest.Config) -> dict[str, Any]:
    """What a testbed brought up under pytest records and traces (``Testbed.up`` kwargs)."""
    return {"record_period": config.getoption(RECORD_OPTION, DEFAULT_RECORD_MS) / 1000.0,
            "trace_messages": not config.getoption(TRACE_OFF_OPTION, False)}


def sim_kwargs(config: pytest.Config, name: str) -> dict[str, Any]:
    """``up_kwargs`` for the in-process sim: recorder files in a directory of its own."""
    kw = up_kwargs(config)
    period = kw.pop("record_period")
    if period > 0:
        kw.update(record_dir=tempfile.mkdtemp(prefix=f"lnet-rec-{name}-"),
                  record_period=period)
    return kw


def release_sim(tb: Any) -> None:
    """After ``down`` of an in-process sim testbed: its recorder directory goes too."""
    rdir = getattr(tb, "record_dir", None)
    if isinstance(rdir, Path):
        shutil.rmtree(rdir, ignore_errors=True)


def flush(tb: Any) -> None:
    """Ask ``tb``'s writers to write what they buffer (traces, recorder rows)."""
    from testbed.observe import eventlog

    fabric = getattr(tb, "fabric", None)
    if fabric is not None and hasattr(fabric, "flush_recorders"):
        fabric.flush_recorders()
        return
    rdir = getattr(tb, "rundir", None)
    if isinstance(rdir, Path):
        eventlog.flush_writers(rdir)


def teardown_problems(config: pytest.Config, tb: Any, traced: bool | None = None) -> list[str]:
    """The teardown check of ``tb`` (before ``down``): one text per violated invariant, and
    one if ``tb`` traced messages (``traced``, default: the plugin's option) while the check
    found no trace to check the message invariants on."""
    if config.getoption(pytest_check.OPTION, False):
        return []
    rundir = getattr(tb, "rundir", None)
    if isinstance(rundir, Path) and not rundir.exists():
        return []  # the test took it down itself: nothing left to read
    try:
        flush(tb)
        if traced is None:
            traced = not config.getoption(TRACE_OFF_OPTION, False)
        return pytest_check.teardown_problems(config, tb, traced=traced)
    except Exception as exc:  # a check that cannot run says so; it never hides a leftover
        return [f"{getattr(tb, 'name', 'testbed')}: testbed check could not run: {exc!r}"]


def _report_root(config: pytest.Config) -> Path:
    given = config.getoption(REPORT_DIR_OPTION, None)
    if given:
        return Path(given)
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        return Path(factory.getbasetemp()) / "lnet-reports"
    return Path(tempfile.gettempdir()) / "lnet-reports"


def report_of(tb: Any, out: Path, title: str | None = None) -> Any:
    """``testbed report`` of a live testbed into ``out`` (writers flushed first): its run
    directory on Mininet or a sim server, the in-process sim's log and recorder directory.

    Raises:
        ReportError, RecError: no report can be made (matplotlib missing, a corrupt file).
    """
    from testbed.observe import recfile
    from testbed.observe.report import make_report, report_rundir

    flush(tb)
    fabric = getattr(tb, "fabric", None)
    if fabric is None:
        return report_rundir(tb.rundir, out)
    rdir = getattr(tb, "record_dir", None)
    recs = recfile.read_dir(rdir) if isinstance(rdir, Path) else {}
    return make_report(out, events=tb.events(), recs=recs,
                       title=title or f"testbed {getattr(tb, 'name', '')}")


def failure_report(config: pytest.Config, tb: Any, nodeid: str) -> tuple[str, str] | None:
    """A ``testbed report`` of ``tb`` for the failure of test ``nodeid``: (section title,
    text naming the page and the summary), or None for an object that is not a testbed of
    ours (a suite's fake)."""
    from testbed.observe import recfile
    from testbed.observe.report import ReportError

    name = str(getattr(tb, "name", "testbed"))
    rundir = getattr(tb, "rundir", None)
    fabric = getattr(tb, "fabric", None)
    if not isinstance(rundir, Path) and fabric is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-80:]
    out = _report_root(config) / f"{slug}-{name}"
    title = f"lnet {name} report"
    try:
        rep = report_of(tb, out, f"{name} ({nodeid})")
    except (ReportError, recfile.RecError, OSError) as exc:
        return title, f"no report: {exc}"
    except Exception as exc:  # the failure itself must still be reported
        return title, f"no report: {exc!r}"
    return title, f"{rep.out / 'index.html'}\n\n{rep.summary}"
