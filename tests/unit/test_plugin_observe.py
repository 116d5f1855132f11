"""The plugin makes every suite an invariant test (issue 16): testbeds come up recording and
tracing messages, ``testbed check`` runs at teardown before ``down`` and fails the test on a
violation (``--lnet-no-check`` turns it off), and a failing test carries the path of a
``testbed report`` of its testbed. Generated suites on the sim backend (no root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.observe import recfile

pytest.importorskip("matplotlib")  # the `report` extra (make venv installs it)
# imported here, not first inside a pytester run: numpy cannot be loaded twice per process
from testbed.observe import plots  # noqa: F401

pytest_plugins = ["pytester"]

#: one clean test, one whose log gains a health value out of range (a hand-made violation:
#: the engine would never write it), one that fails on its own; all on one topology
SUITE = '''
import pytest

pytestmark = pytest.mark.topology("default")

def test_clean(topology):
    c1 = topology.node("c1")
    assert c1.put(topology.node("s1").nids[0], count=30, size=1000)["completed"] == 30
    kinds = {e["kind"] for e in topology.events()}
    assert {"msg", "tunable", "traffic_start", "traffic_end"} <= kinds, kinds
    from testbed.pytest import observing

    observing.flush(topology)
    assert sorted(p.name for p in (topology.record_dir / "nodes").glob("*.rec")) == \\
        ["c1.rec", "s1.rec"]
    print("RECORD_DIR", topology.record_dir)

def test_broken_invariant(topology):
    topology.fabric.record("ni_error", "c1", nid="10.10.0.1@tcp", hstatus="LOCAL_DROPPED",
                           health=1234)

def test_fails(topology):
    topology.node("c1").put(topology.node("s1").nids[0], count=5, size=100)
    assert False, "an LNet assertion failed"
'''


@pytest.fixture
def run(pytester: pytest.Pytester, tmp_path: Path):  # type: ignore[no-untyped-def]
    pytester.makepyfile(test_gen_observe=SUITE)

    def go(*extra: str) -> pytest.RunResult:
        return pytester.runpytest("-p", "no:cacheprovider", "-s", "--lnet-backend=sim",
                                  f"--lnet-report-dir={tmp_path / 'reports'}", *extra)

    return go


def test_teardown_check_fails_a_violation_and_reports_a_failure(run, tmp_path: Path) -> None:
    result = run()
    out = result.stdout.str()
    result.assert_outcomes(passed=2, failed=1, errors=1)
    # the violation: an error at teardown of that test, naming the invariant and its proof
    assert "ERROR at teardown of test_broken_invariant" in out
    assert "invariant violated (testbed check; --lnet-no-check to skip)" in out
    assert "VIOLATION health: ni_error health 1234 outside 0..1000" in out
    # a clean test ran the message invariants (not passed for want of a trace)
    assert "ERROR at teardown of test_clean" not in out
    # the failing test carries its report: a page that exists, and its summary
    section = re.search(r"lnet \S+ report -+\n(\S+index\.html)", out)
    assert section, out
    page = Path(section.group(1))
    assert page.is_file() and page.is_relative_to(tmp_path / "reports")
    assert "fault windows: 0" in out
    assert len(list(page.parent.glob("*.png"))) == 6  # c1, s1: health, throughput, credits
    # the recorder directory of the in-process sim went with its testbed
    rdir = Path(re.search(r"RECORD_DIR (\S+)", out).group(1))  # type: ignore[union-attr]
    assert not rdir.exists()


def test_no_check_option_skips_it(run) -> None:
    result = run("--lnet-no-check")
    result.assert_outcomes(passed=2, failed=1)


def test_no_msg_trace_and_no_recorder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gen_notrace='''
import pytest

@pytest.mark.topology("default")
def test_plain(topology):
    topology.node("c1").put(topology.node("s1").nids[0], count=3, size=10)
    assert not any(e["kind"] == "msg" for e in topology.events())
    assert topology.record_dir is None
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--lnet-backend=sim",
                                "--lnet-no-msg-trace", "--lnet-record-period=0")
    result.assert_outcomes(passed=1)
    bad = pytester.runpytest("-p", "no:cacheprovider", "--lnet-record-period=-5")
    assert bad.ret != 0
    bad.stderr.fnmatch_lines(["*--lnet-record-period=-5: give 0..3600000 milliseconds*"])


def test_teardown_check_covers_the_message_invariants() -> None:
    """What the plugin runs at teardown, on a sim testbed brought up as the plugin does:
    the message invariants are among those checked."""
    import types

    from testbed.observe import pytest_check
    from testbed.pytest import observing
    from testbed.sim import SimTestbed

    opts = {observing.RECORD_OPTION: 100.0, observing.TRACE_OFF_OPTION: False,
            pytest_check.OPTION: False}
    config = types.SimpleNamespace(getoption=lambda name, default=None: opts.get(name,
                                                                                  default))
    kw = observing.sim_kwargs(config, "obsplug")  # type: ignore[arg-type]
    tb = SimTestbed.up(Path(__file__).parents[2] / "topologies" / "default.yaml",
                       name="obsplug", **kw)
    try:
        tb.node("c1").put(tb.node("s1").nids[0], count=10, size=10)
        tb.run(1.0)
        assert observing.teardown_problems(config, tb) == []  # type: ignore[arg-type]
        result = pytest_check.check_events(pytest_check.events_of(tb))
        assert {"completion", "resend", "fatal_ni", "routing"} <= set(result.checked)
        assert result.invariants["completion"].checked >= 10
        observing.flush(tb)
        assert recfile.read(tb.record_dir / "nodes" / "c1.rec").meta["clock"] == "virtual"
    finally:
        tb.down()
        observing.release_sim(tb)
    assert not tb.record_dir.exists()


def test_a_traced_testbed_without_a_trace_is_a_problem() -> None:
    """The check must not pass for want of evidence: a testbed that should trace but whose
    log has traffic and no message trace fails its teardown check."""
    import types

    from testbed.observe import pytest_check
    from testbed.pytest import observing
    from testbed.sim import SimTestbed

    config = types.SimpleNamespace(getoption=lambda name, default=None: default)
    tb = SimTestbed.up(Path(__file__).parents[2] / "topologies" / "default.yaml",
                       name="obsnotr")  # trace_messages off: the trace "broke"
    try:
        tb.node("c1").put(tb.node("s1").nids[0], count=3, size=10)
        problems = observing.teardown_problems(config, tb, traced=True)  # type: ignore[arg-type]
        assert len(problems) == 1 and "could not check the message invariants" in problems[0]
        assert pytest_check.teardown_problems(config, tb, traced=False) == []
    finally:
        tb.down()
