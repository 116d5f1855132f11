"""Issue 27's CLI defects on the simulator (no root), one regression test each: every refusal
is one line (``testbed: error: ...``), quotes a user's value through ``nodes/echo.py``
(README "Limits": its first 80 characters), and never shows a traceback.

One sim testbed serves the module (``up --backend sim --speed 0`` under a private RUNROOT);
each test runs the real ``testbed`` CLI as a user would, in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.echo import MAX_SHOWN_CHARS
from testbed import runstate

ROOT = Path(__file__).resolve().parents[2]
#: a value far past what an error may quote (issue 27 item 7: 100,000 characters were echoed)
LONG = "y" * 5000


def run(*args: str, env: dict[str, str], cwd: str = "/") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def refused(res: subprocess.CompletedProcess[str]) -> str:
    """The one ``testbed: error:`` line of a refusal (argparse's usage line may precede it)."""
    assert res.returncode in (1, 2), res
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith("testbed: error: "), res.stderr[:2000]
    return lines[0]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    base = tmp_path_factory.mktemp("cli-bounds")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LNET_TESTBED")}
    env[runstate.ENV_RUNROOT] = str(base / "run")
    env["PYTHONPATH"] = str(ROOT)
    if os.environ.get("LNET_TESTBED_PURE_PYTHON"):
        env["LNET_TESTBED_PURE_PYTHON"] = os.environ["LNET_TESTBED_PURE_PYTHON"]
    name = f"cb{uuid.uuid4().hex[:8]}"
    res = run("up", "--backend", "sim", "--speed", "0", "-n", name, env=env)
    assert res.returncode == 0, res
    yield name, env
    run("down", "-n", name, env=env)
    for left in runstate.list_testbeds(base / "run"):  # a failed test leaves nothing
        from testbed.clean import clean_testbed

        clean_testbed(left, base / "run")


def test_capture_into_a_missing_directory_is_one_line(sim: tuple[str, dict[str, str]],
                                                      tmp_path: Path) -> None:
    """Issue 27 item 3: ``capture ... -o no-such-dir/x.pcapng`` was a traceback (dumpcap's
    failure raised past the CLI; on the sim, a node without a namespace)."""
    name, env = sim
    line = refused(run("capture", "-n", name, "c1", "-o", "no-such-dir/x.pcapng", env=env,
                       cwd=str(tmp_path)))
    assert "cannot write 'no-such-dir/x.pcapng': no directory 'no-such-dir'" in line
    line = refused(run("capture", "-n", name, "c1", "-o", str(tmp_path), env=env))
    assert "it is a directory" in line
    line = refused(run("capture", "-n", name, "c1", "-o", str(tmp_path / "x.pcapng"),
                       env=env))
    assert "no network namespaces (sim backend)" in line
    assert not list(tmp_path.iterdir())


#: issue 27 item 7: the paths that echoed a user's value whole, each with a 5,000-character
#: value (``{L}``); -n alone was 303 characters in the probe, 100,000 for ``name=``
ECHOES = [
    "fault add -n {N} loss node=c1 rate=0.1 name={L}", "fault add -n {N} {L}",
    "fault add -n {N} loss node=c1 {L}=1", "fault add -n {N} loss node=c1 rate={L}",
    "fault del -n {N} {L}", "status -n {L}", "lnetctl -n {N} {L} net show",
    "link -n {N} c1 {L} down", "link -n {N} c1 eth0 {L}", "clock -n {N} advance {L}",
    "exec -n {N} c1 {L}", "lst -n {N} c1 {L}", "lnetctl -n {N} c1 {L}",
    "exec -n {N} c1 lctl {L}", "up --backend sim -n {N}x {L}", "check --events {L}",
    "capture --summary {L}", "traffic -n {N} c1 --to {L}",
]


@pytest.mark.parametrize("probe", ECHOES)
def test_a_long_value_is_echoed_80_characters_at_most(sim: tuple[str, dict[str, str]],
                                                      probe: str) -> None:
    """Issue 27 item 7 (README "Limits": a value quoted in an error, 80 characters then
    ``... (N characters)``): no output line carries more than 80 characters of the value."""
    name, env = sim
    res = run(*[w.format(N=name, L=LONG) for w in probe.split()], env=env)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    out = res.stdout + res.stderr
    assert "y" * (MAX_SHOWN_CHARS + 1) not in out, f"{probe}: {out[:300]}"
    # the length said (argparse's message counts the quotes it adds)
    assert re.search(rf"\(({len(LONG)}|{len(LONG) + 2}) characters\)", out), out[:300]
    assert max(len(line) for line in out.splitlines()) < 600, out[:300]


def test_fault_add_with_a_key_twice_is_refused_and_adds_nothing(
        sim: tuple[str, dict[str, str]]) -> None:
    """Issue 27 item 10, through the CLI: nothing is added, the error names the key."""
    name, env = sim
    line = refused(run("fault", "add", "-n", name, "loss", "node=c1", "rate=0.1", "rate=0.9",
                       env=env))
    assert "duplicate key 'rate': given twice" in line
    listed = run("fault", "list", "-n", name, "--json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed
