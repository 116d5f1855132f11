"""The project on a guest or host: wheels built here from the checkout, installed over SSH.

Theory of operation (issue 15 item 1): guests and remote hosts reach no package registry and
share no folder with us. What they need from Debian is in the box (python3-zmq, -yaml, -scapy,
iptables...); what changes with the checkout goes in at each bring-up: ``pip wheel`` builds the
project's wheel here (and netfilterqueue's, which Debian lacks, once per version into the
cache), the wheels travel as a tar stream on the SSH channel, and the host's own pip installs
them with ``--no-index --no-deps --target`` into the testbed's directory on that host, which
goes away with it. ``--no-deps``: the dependencies are Debian's packages (python3-zmq 24 is
older than the pin in pyproject.toml; the control protocol needs nothing newer, and the host
agent checks CURVE support at start). Nothing is installed into the host's system Python.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from testbed.vagrant.boxes import CACHE_ROOT, locked
from testbed.vagrant.shell import Shell

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 600.0  # pip on an emulated guest takes its time


class DeployError(Exception):
    """Building or installing the wheels failed; one line."""


def _pip_wheel(args: list[str], out: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(out), *args], capture_output=True, text=True, timeout=600,
                          check=False, env=env)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-4:])
        raise DeployError(f"pip wheel {' '.join(args)}: {tail}")


def build_wheels(out: Path, cache_root: Path = CACHE_ROOT) -> list[Path]:
    """The project's wheel (from this checkout) and netfilterqueue's (cached) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    cache = cache_root / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    nfq = importlib.metadata.version("netfilterqueue")
    with locked(cache / "build.lock"):  # one setuptools build/ directory per checkout
        # the engine as pure Python: compiling it (setup.py) would add minutes to each
        # bring-up, and the guests' few nodes are no CPU bound
        _pip_wheel(["--no-build-isolation", str(PROJECT_ROOT)], out,
                   env={**os.environ, "LNET_TESTBED_PURE_PYTHON": "1"})
        if not list(cache.glob(f"netfilterqueue-{nfq}-*.whl")):
            _pip_wheel([f"netfilterqueue=={nfq}"], cache)
    wheels = sorted(out.glob("lnet_testbed-*.whl"))
    wheels += sorted(cache.glob(f"netfilterqueue-{nfq}-*.whl"))
    if len(wheels) != 2:
        raise DeployError(f"expected two wheels, found {[w.name for w in wheels]}")
    return wheels


def _tar(wheels: list[Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for whl in wheels:
            tar.add(whl, arcname=whl.name)
    return buf.getvalue()


def install(shell: Shell, hdir: str, wheels: list[Path]) -> str:
    """Install ``wheels`` on the host under ``hdir``; return the PYTHONPATH to use there.

    Raises:
        DeployError: with the host's output.
    """
    site, wdir = f"{hdir}/site", f"{hdir}/wheels"
    res = shell.run(["sh", "-c", 'umask 077; mkdir -p "$1" && tar -C "$1" -xf -', "sh", wdir],
                    input=_tar(wheels), timeout=120)
    if not res.ok:
        raise DeployError(f"{shell.name}: cannot unpack wheels: {res.err.strip()}")
    res = shell.run(["python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                     "--no-compile", "--disable-pip-version-check", "--target", site,
                     *[f"{wdir}/{w.name}" for w in wheels]], timeout=INSTALL_TIMEOUT)
    if not res.ok:
        raise DeployError(f"{shell.name}: pip install: {(res.err or res.out).strip()[-300:]}")
    check = shell.run(["env", f"PYTHONPATH={site}", "python3", "-c",
                       "import zmq, yaml, scapy, netfilterqueue, nodes.daemon.control, "
                       "testbed.vagrant.agent; assert zmq.has('curve'), 'libzmq without CURVE'"],
                      timeout=120)
    if not check.ok:
        raise DeployError(f"{shell.name}: the installed project does not import: "
                          f"{check.err.strip().splitlines()[-1:]}")
    return site
