"""The pytest plugin reports what happened, failures included (STYLE rule 15: LUTF's core defect
was results that could not fail). Each test runs a generated suite with ``pytester``.

The generated suites use a fake testbed (an object with ``nodes``, ``node()``, ``events()``)
where a real one is not the point, so these tests need no root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.pytest import trace

# generated files are named test_gen_* so that in-process pytester runs never clash with
# test modules the outer run already imported (e.g. tests/unit/test_sim.py)
pytest_plugins = ["pytester"]

#: A generated suite with one passing and one failing LNet assertion, both traced.
SUITE = '''
import pytest

class FakeNode:
    def __init__(self, name):
        self.name = name
    def lnetctl(self, cmd, timeout=60.0):
        class R:  # what NodeHandle.lnetctl returns
            rc, out, err = 0, f"net:\\n    - net type: tcp  # {cmd} on {self.name}\\n", ""
        return R()
    def yaml(self, cmd):
        return {"net": [{"net type": "tcp", "local NI(s)": [
            {"nid": "10.10.0.1@tcp", "health stats": {"health value": 1000}}]}]}

class FakeTestbed:
    name = "fake1"
    nodes = ["c1"]
    def node(self, name):
        return FakeNode(name)
    def events(self):
        return [{"kind": "link_down", "node": "c1", "iface": "eth1"}]

@pytest.fixture
def tb():
    return FakeTestbed()

@pytest.mark.requirement("dbg-035")
def test_health_is_full(tb):
    ni = tb.node("c1").yaml("net show -v 3")["net"][0]["local NI(s)"][0]
    assert ni["health stats"]["health value"] == 1000

@pytest.mark.requirement("snd-030", "snd-035")
def test_health_fell(tb):
    ni = tb.node("c1").yaml("net show -v 3")["net"][0]["local NI(s)"][0]
    assert ni["health stats"]["health value"] < 1000, "rail health did not fall"
'''


def test_failing_lnet_assertion_fails_the_run(pytester: pytest.Pytester) -> None:
    """A failing assertion gives ret 1 and '1 failed' (not a pass, not a crash)."""
    pytester.makepyfile(test_gen_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*1 failed, 1 passed*"])
    result.stdout.fnmatch_lines(["*rail health did not fall*"])


def test_failure_report_carries_lnetctl_state_and_events(pytester: pytest.Pytester) -> None:
    """The failing test's report holds each node's lnetctl state and the event log's tail."""
    pytester.makepyfile(test_gen_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "fell")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*lnet fake1/c1*",
        "*$ lnetctl net show -v 3*",
        "*$ lnetctl peer show -v 3*",
        "*$ lnetctl stats show*",
        "*lnet fake1 events (last 1)*",
        '*"kind": "link_down"*',
    ])


def test_passing_test_gets_no_evidence_sections(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gen_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", "-k", "full")
    assert result.ret == 0
    assert "lnetctl peer show" not in result.stdout.str()


def test_unknown_requirement_is_a_collection_error(pytester: pytest.Pytester) -> None:
    """An ID not in docs/requirements.md is a collection error naming the test."""
    pytester.makepyfile(test_gen_typo='''
import pytest

@pytest.mark.requirement("snd-030")
def test_fine():
    pass

@pytest.mark.requirement("snd-999")
def test_typo():
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*ERROR collecting test_gen_typo.py*",
        "*test_gen_typo.py::test_typo: unknown requirement ID 'snd-999'*",
        "*1 error*",
    ])


def test_requirement_marker_without_ids_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gen_empty='''
import pytest

@pytest.mark.requirement()
def test_nothing():
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_nothing: @pytest.mark.requirement takes one or more*"])


def test_requirements_go_into_junit_properties(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gen_suite=SUITE)
    pytester.runpytest("-p", "no:cacheprovider", "--junitxml=junit.xml")
    xml = (pytester.path / "junit.xml").read_text()
    assert '<property name="requirement" value="snd-030" />' in xml
    assert '<property name="requirement" value="dbg-035" />' in xml


def _trace_run(pytester: pytest.Pytester, *extra: str) -> tuple[str, dict]:
    pytester.makepyfile(test_gen_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--lnet-trace=out/trace.md", *extra)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*lnet-trace: out/trace.md: 2 tests with requirement markers,"
                                 "*REQUIRED requirements uncovered*"])
    report = (pytester.path / "out" / "trace.md").read_text()
    data = json.loads((pytester.path / "out" / "trace.json").read_text())
    return report, data


def test_trace_report_lists_covered_and_uncovered(pytester: pytest.Pytester) -> None:
    """Covered requirements show their tests and last result; uncovered REQUIRED are named."""
    report, data = _trace_run(pytester)
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in report.splitlines()
             if ln.startswith("| ")}
    assert "FAILING" in lines["snd-030"] and "test_health_fell` failed" in lines["snd-030"]
    assert "| passed (unit) |" in lines["dbg-035"]
    assert "test_health_is_full` passed (unit)" in lines["dbg-035"]
    assert "NOT COVERED" in lines["cfg-005"]
    assert "n/a" in lines["tst-005"]  # REQUIRED but not applicable: not listed as uncovered
    uncovered = report.split("## REQUIRED requirements no test covers")[1].split("##")[0]
    assert "- cfg-005 " in uncovered and "- snd-030 " not in uncovered
    assert "- tst-005 " not in uncovered
    assert data["tests"]["test_gen_suite.py::test_health_fell"] == {
        "requirements": ["snd-030", "snd-035"], "outcome": "failed", "backend": "unit"}


def test_trace_is_collected_on_the_xdist_controller(pytester: pytest.Pytester) -> None:
    """Under ``-n 2`` the controller writes the report from the workers' reports."""
    _report, data = _trace_run(pytester, "-n", "2")
    assert {k: v["outcome"] for k, v in data["tests"].items()} == {
        "test_gen_suite.py::test_health_fell": "failed",
        "test_gen_suite.py::test_health_is_full": "passed"}


def test_testbed_trace_cli_renders_the_last_run(pytester: pytest.Pytester,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from testbed import cli

    _trace_run(pytester)
    rc = cli.main(["trace", "--data", str(pytester.path / "out" / "trace.json")])
    out = capsys.readouterr().out
    assert rc == 1  # a failing requirement
    assert "| snd-030 | REQUIRED | FAILING (unit) |" in out
    rc = cli.main(["trace", "--data", str(pytester.path / "nowhere.json")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "no trace data at" in err


#: One test per backend class: no testbed (unit), the topology fixture on --lnet-backend=sim,
#: testbed_factory (here a stand-in: the plugin tells Mininet tests by the fixture they use),
#: and a mininet_only test the sim run skips.
BACKEND_SUITE = '''
import pytest

@pytest.fixture
def testbed_factory():
    return lambda *a, **kw: None

@pytest.mark.requirement("cfg-005")
def test_no_testbed():
    pass

@pytest.mark.requirement("cfg-010", "hlth-lnd-dev-fail-detect")
@pytest.mark.topology("default")
def test_on_the_sim(topology):
    assert topology.status()["backend"] == "sim"

@pytest.mark.requirement("cfg-015", "hlth-lnd-dev-fail-report")
def test_on_mininet(testbed_factory):
    pass

@pytest.mark.requirement("cfg-020")
@pytest.mark.mininet_only("a real socket")
def test_wire_only(topology):
    pass
'''


def test_trace_records_each_tests_backend_and_mininet_gaps(pytester: pytest.Pytester) -> None:
    """Issue 6: only a passing Mininet test covers a requirement. Each result records its
    backend (data, report cells, JUnit property); the report lists REQUIRED requirements
    without a passing Mininet test (covered on unit/sim only, or skipped there) and, apart,
    seed-003 requirements of any class without one."""
    import importlib.util

    if importlib.util.find_spec("testbed.sim") is None:
        pytest.skip("testbed/sim.py is not there")
    pytester.makepyfile(test_gen_backends=BACKEND_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--lnet-backend=sim",
                                "--lnet-trace=out/trace.md", "--junitxml=junit.xml")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*lnet-trace: out/trace.md: 4 tests with requirement markers,"
                                 "*, * not covered by a passing Mininet test*",
                                 "*3 passed, 1 skipped*"])
    data = json.loads((pytester.path / "out" / "trace.json").read_text())
    assert {k.split("::")[1]: (v["outcome"], v["backend"]) for k, v in data["tests"].items()} == {
        "test_no_testbed": ("passed", "unit"), "test_on_the_sim": ("passed", "sim"),
        "test_on_mininet": ("passed", "mininet"), "test_wire_only": ("skipped", "sim")}
    report = (pytester.path / "out" / "trace.md").read_text()
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in report.splitlines()
            if ln.startswith("| ")}
    assert "| passed (unit) |" in rows["cfg-005"] and "test_no_testbed` passed (unit)" in rows[
        "cfg-005"]
    assert "| passed (sim) |" in rows["cfg-010"]
    assert "| passed (mininet) |" in rows["cfg-015"]
    assert "| skipped (sim) |" in rows["cfg-020"]

    def section(title: str) -> str:
        return report.split(f"## {title}\n")[1].split("\n## ")[0]

    gaps = section("REQUIRED requirements not covered by a passing Mininet test")
    for rid in ("cfg-005", "cfg-010", "cfg-020"):  # passed on unit, sim; skipped on sim
        assert f"- {rid} " in gaps, rid
    assert "- cfg-005 (REQUIRED, Local Network Configuration): " in gaps
    assert "[now: passed (sim)]" in gaps.split("- cfg-010 ")[1].splitlines()[0]
    assert "- cfg-015 " not in gaps and "- cfg-025 " not in gaps  # mininet; not applicable
    assert "- hlth-lnd-dev-fail-detect " not in gaps  # DESIRED: not in the REQUIRED list
    seed003 = section("Seed 003 requirements (any class) not covered by a passing Mininet test")
    assert "- hlth-lnd-dev-fail-detect (DESIRED, " in seed003  # on the sim only
    assert "- hlth-lnd-dev-fail-report " not in seed003  # passed on mininet
    assert "- hlth-cfg-retry (REQUIRED, " in seed003 and "- cfg-005 " not in seed003
    assert "- hlth-lnd-degrade-detect " not in seed003  # does not apply to an emulator
    xml = (pytester.path / "junit.xml").read_text()
    assert xml.count('<property name="backend" value="sim" />') == 2
    assert xml.count('<property name="backend" value="mininet" />') == 1
    assert '<property name="requirement" value="cfg-015" />' in xml


def test_trace_merges_runs_on_several_backends(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A Mininet run's and a sim run's data merge (``testbed trace --data A:B``): one result
    per test and backend, the later run's replacing an earlier one on the same backend; the
    Mininet gap list counts only passing Mininet results."""
    import os

    from testbed import cli

    t = "tests/lutf/test_x.py::test_"
    runs = [
        {"started": "run1", "tests": {
            f"{t}a": {"requirements": ["cfg-005"], "outcome": "failed", "backend": "mininet"},
            f"{t}b": {"requirements": ["cfg-010"], "outcome": "passed", "backend": "mininet"}}},
        {"started": "run2", "tests": {
            f"{t}a": {"requirements": ["cfg-005"], "outcome": "passed", "backend": "sim"},
            f"{t}b": {"requirements": ["cfg-010"], "outcome": "passed", "backend": "mininet"},
            f"{t}c": {"requirements": ["cfg-015"], "outcome": "passed"}}},  # saved before
    ]
    paths = []
    for i, run in enumerate(runs):
        paths.append(tmp_path / f"run{i}.json")
        trace.save_data(run, paths[-1])
    data = trace.load_data(os.pathsep.join(map(str, paths)))
    assert {k: (v["outcome"], v["backend"]) for k, v in data["tests"].items()} == {
        f"{t}a [mininet]": ("failed", "mininet"), f"{t}a [sim]": ("passed", "sim"),
        f"{t}b": ("passed", "mininet"), f"{t}c": ("passed", "unknown")}
    reqs = trace.load_requirements()
    cov = trace.coverage(reqs, data)
    assert cov["cfg-005"] == [(f"{t}a", "failed", "mininet"), (f"{t}a", "passed", "sim")]
    assert trace.status_cell(reqs["cfg-005"], cov["cfg-005"]) == (
        "FAILING (mininet); passed (sim)")
    gaps = trace.uncovered_on_mininet(reqs, data)
    assert "cfg-005" in gaps and "cfg-015" in gaps and "cfg-010" not in gaps
    rc = cli.main(["trace", "--data", os.pathsep.join(map(str, paths))])
    out = capsys.readouterr().out
    assert rc == 1  # cfg-005 fails on Mininet
    assert "| cfg-010 | REQUIRED | passed (mininet) |" in out
    assert "Run started run1, run2:" in out


def test_unknown_backend_and_missing_sim_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gen_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--lnet-backend=vmware")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--lnet-backend=vmware: unknown backend*"])
    import importlib.util

    if importlib.util.find_spec("testbed.sim") is None:
        result = pytester.runpytest("-p", "no:cacheprovider", "--lnet-backend=sim")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*simulator (testbed/sim.py) is not available yet*"])


def test_requirements_file_parses_every_seed_requirement() -> None:
    """docs/requirements.md holds seed 000's IDs as written and the IDs defined for 003/002."""
    reqs = trace.load_requirements()
    for rid in ("cfg-005", "cfg-170", "snd-045", "dyn-065", "dbg-115", "hlt-025", "bck-030",
                "tst-010", "doc-015", "hlth-cfg-retry", "hlth-lnt-decrement", "rtr-route-down"):
        assert rid in reqs, rid
    assert reqs["snd-030"].cls == "REQUIRED" and "transmit queue credits" in reqs["snd-030"].text
    assert reqs["cfg-030"].cls == "NICE-TO-HAVE"
    assert not reqs["tst-005"].applies and "acceptance" in reqs["tst-005"].why_not
    assert len([r for r in reqs if r[:3] in ("cfg", "snd", "dyn", "dbg", "hlt", "bck", "tst",
                                             "doc") and "-" in r[:4]]) == 104


def test_bad_requirements_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "req.md"
    bad.write_text("### snd-030\n- section: x\n\n> text\n")
    with pytest.raises(trace.TraceError, match=r"req.md:1: requirement snd-030 has no valid"):
        trace.load_requirements(bad)


def test_module_topology_on_the_sim_backend(pytester: pytest.Pytester) -> None:
    """``--lnet-backend=sim`` brings the marker's topology up in-process (no root needed),
    once for the module, and node handles answer lnetctl as on Mininet."""
    import importlib.util

    if importlib.util.find_spec("testbed.sim") is None:
        pytest.skip("testbed/sim.py is not there")
    pytester.makepyfile(test_gen_sim='''
import pytest

pytestmark = pytest.mark.topology("default")
SEEN = []

@pytest.mark.requirement("cfg-045")
@pytest.mark.parametrize("node", ["c1", "s1"])
def test_nis(module_topology, node):
    SEEN.append(module_topology)
    nis = module_topology.node(node).yaml("net show")["net"][1]["local NI(s)"]
    assert len(nis) == 2
    assert module_topology.status()["backend"] == "sim"

def test_same_testbed_for_the_module():
    assert len(SEEN) == 2 and SEEN[0] is SEEN[1]
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--lnet-backend=sim")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*3 passed*"])
