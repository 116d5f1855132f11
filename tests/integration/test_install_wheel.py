"""Issue 18 acceptance: the wheel alone, in a clean venv, is a working ``testbed``.

The wheel is built from this checkout and installed into a venv without system
site-packages and without the ``faults`` extra; there ``netfilterqueue`` and ``mininet``
cannot be imported, and as ``nobody`` (setpriv) a built-in topology is brought up on the
simulator by name, its status read, traffic moved, and taken down; the Mininet backend
says in one line what it lacks (root as nobody, Mininet as root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setpriv to nobody needs root")


@pytest.fixture(scope="module")
def venv() -> Iterator[Path]:
    """A clean venv with only the wheel (and its pip dependencies) in it."""
    d = Path(tempfile.mkdtemp(prefix="tb-install-"))
    d.chmod(0o755)  # nobody runs the venv's programs
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT),
                        "-w", str(d / "dist")], check=True, timeout=600,
                       capture_output=True)
        wheel = next((d / "dist").glob("lnet_testbed-*.whl"))
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(d / "venv")], check=True,
                       timeout=120)
        subprocess.run([str(d / "venv/bin/pip"), "install", "-q", str(wheel)], check=True,
                       timeout=600, capture_output=True)
        (d / "run").mkdir()
        shutil.chown(d / "run", "nobody")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run(d: Path, *argv: str, nobody: bool = True) -> subprocess.CompletedProcess[str]:
    env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", f"LNET_TESTBED_RUNROOT={d / 'run'}"]
    pre = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if nobody else []
    return subprocess.run([*pre, *env, *argv], capture_output=True, text=True, timeout=120,
                          check=False)


def test_wheel_in_a_clean_venv_runs_a_builtin_topology_as_nobody(venv: Path) -> None:
    py, tb = str(venv / "venv/bin/python"), str(venv / "venv/bin/testbed")
    for mod in ("netfilterqueue", "mininet"):  # no faults extra, no system site-packages
        res = _run(venv, py, "-c", f"import {mod}")
        assert res.returncode == 1 and "ModuleNotFoundError" in res.stderr
    for cmd in ("testbed", "lnetctl", "lctl"):  # console scripts
        assert (venv / "venv/bin" / cmd).is_file()
    # the engine compiled by the wheel's build (setup.py: mypyc, gcc and Python's headers are
    # here, `make deps`), and used
    native = _run(venv, py, "-c", "import nodes.lnet as n, nodes.lnet.engine as e; "
                  "print(n.NATIVE, e.__file__.endswith('.so'))")
    assert native.stdout.split() == ["True", "True"], native.stderr
    version = _run(venv, tb, "--version")
    assert version.returncode == 0 and version.stdout.startswith("testbed ")
    assert _run(venv, py, "-m", "testbed", "--version").stdout == version.stdout
    completion = _run(venv, tb, "completion", "bash")
    assert completion.returncode == 0 and "routed" in completion.stdout
    name = f"inst{uuid.uuid4().hex[:6]}"
    up = _run(venv, tb, "up", "routed", "--backend", "sim", "-n", name, "--json")
    assert up.returncode == 0, up.stderr
    try:
        nodes = json.loads(up.stdout)["nodes"]
        assert sorted(nodes) == ["c1", "c2", "r1", "r2", "s1", "s2"]
        assert "/site-packages/testbed/topologies/routed.yaml" in \
            _run(venv, tb, "status", "-n", name).stdout  # package data, found by name
        st = json.loads(_run(venv, tb, "status", "-n", name, "--json").stdout)
        (only,) = st["testbeds"]
        assert {ni["health"] for n in only["nodes"].values()
                for nid, ni in n["lnet"]["nis"].items() if nid != "0@lo"} == {1000}
        assert {r["state"] for r in only["nodes"]["c1"]["lnet"]["routes"]} == {"up"}
        moved = _run(venv, tb, "traffic", "-n", name, "c1", "--to", "s1", "--count", "10",
                     "--json")
        assert json.loads(moved.stdout)["completed"] == 10, moved.stderr
    finally:
        down = _run(venv, tb, "down", "-n", name)
    assert down.returncode == 0 and f"testbed {name} is down" in down.stdout
    assert "sim server" in down.stdout and not (venv / "run" / name).exists()
    # the Mininet backend says what it lacks, in one line, and leaves nothing
    for nobody, lacks in ((True, "needs root"), (False, "needs Mininet")):
        res = _run(venv, tb, "up", "--backend", "mininet", "-n", name, nobody=nobody)
        assert res.returncode == 1 and lacks in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert sorted(p.name for p in (venv / "run").iterdir()) in ([], ["by-netns"])
