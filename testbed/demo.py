"""``make demo``: the main job, end to end, with the commands a user would type.

Brings up the default topology (seed 000 Figure 2: a client and a server with two NIs each on
net ``tcp`` over two L2 segments), shows both nodes' ``lnetctl net show``, pings every server
NID, sends a burst of PUTs and shows that both rails carried them, takes one client link down
and shows that the path behind it fails while the other rail still answers, then tears down.
Every step runs the real ``testbed`` CLI, printed before it runs, so the demo doubles as a
tutorial. The testbed is always torn down, also on failure or Ctrl-C.

One line first says which engine runs (issue 31 item 1): the compiled modules when they are
built for these sources, else the pure-Python ones for the whole run (``LNET_TESTBED_PURE_PYTHON``
set for every process the demo starts, so a build finishing meanwhile changes nothing). The
closing note times the run and its parts (``LNET_DEMO_TIMES``: when ``make demo`` started and
when apt was done, set by the Makefile).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import yaml

from nodes import native

NAME = os.environ.get("LNET_DEMO_NAME", "demo")  # another name: beside a testbed called demo
BURST = 1000


def _testbed() -> str:
    exe = Path(sysconfig.get_path("scripts")) / "testbed"
    return str(exe) if exe.exists() else "testbed"


def sh(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [_testbed(), *args]
    print(f"\n$ testbed {shlex.join(args)}", flush=True)
    res = subprocess.run(argv, text=True, capture_output=True, check=False)
    if not quiet:
        sys.stdout.write(res.stdout)
    sys.stdout.write(res.stderr)
    sys.stdout.flush()
    if check and res.returncode != 0:
        raise SystemExit(f"demo: step failed with exit status {res.returncode}")
    return res


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def send_counts() -> dict[str, int]:
    res = sh("lnetctl", "-n", NAME, "c1", "net", "show", "--net", "tcp", "-v", quiet=True)
    doc = yaml.safe_load(res.stdout)
    return {ni["interfaces"][0]: ni["statistics"]["send_count"]
            for net in doc["net"] for ni in net["local NI(s)"]}


def engine() -> str:
    """Which engine the demo runs, as one line; the pure-Python one for every process the demo
    starts unless the compiled modules match the sources now."""
    if os.environ.get(native.PURE_ENV):
        return f"engine: pure Python ({native.PURE_ENV} is set)"
    if native.built_for_sources("nodes.lnet"):
        return "engine: compiled with mypyc"
    os.environ[native.PURE_ENV] = "1"
    return ("engine: pure Python (the compiled modules are not built for these sources yet: "
            "`make native`; the next run uses them)")


class Clock:
    """The parts of the run, in wall seconds (module doc)."""

    def __init__(self, times: str | None) -> None:
        self.start = time.time()
        self.make_start = self.apt_done = self.start
        with contextlib.suppress(ValueError):  # not run by make: no apt, no venv part
            self.make_start, self.apt_done = (float(t) for t in (times or "").split())
        self.first_step: float | None = None

    def step(self) -> None:
        if self.first_step is None:
            self.first_step = time.time()
            print(f"    (first step {self.first_step - self.apt_done:.0f} s after apt was done)",
                  flush=True)

    def note(self) -> str:
        end = time.time()
        first = (self.first_step or end) - self.apt_done
        apt = self.apt_done - self.make_start
        return (f"timing: {end - self.make_start:.0f} s in all: apt {apt:.0f} s, "
                f"venv {self.start - self.apt_done:.0f} s, first step {first:.0f} s after apt, "
                f"demo {end - self.start:.0f} s")


def main() -> int:
    clock = Clock(os.environ.get("LNET_DEMO_TIMES"))
    print(engine(), flush=True)
    subprocess.run([_testbed(), "down", "-n", NAME], capture_output=True, check=False)
    try:
        banner("1. bring up the default topology (2 nodes x 2 rails on net tcp)")
        clock.step()
        sh("up", "-n", NAME)
        banner("2. each node's NIs")
        sh("lnetctl", "-n", NAME, "c1", "net", "show")
        sh("lnetctl", "-n", NAME, "s1", "net", "show")
        banner("3. ping every server NID from the client")
        for nid in ("10.10.0.2@tcp", "10.11.0.2@tcp"):
            sh("lnetctl", "-n", NAME, "c1", "ping", nid)
        banner(f"4. {BURST} PUTs from c1 to s1: Multi-Rail spreads them over both rails")
        before = send_counts()
        sh("traffic", "-n", NAME, "c1", "--to", "s1", "--count", str(BURST), "--size", "65536")
        after = send_counts()
        for iface in sorted(after):
            print(f"    c1 {iface}: send_count {after[iface] - before.get(iface, 0)}")
        if not all(after[i] > before.get(i, 0) for i in after):
            raise SystemExit("demo: one rail carried no traffic")
        banner("5. take c1's eth1 down: the path behind it fails, the other rail answers")
        sh("link", "-n", NAME, "c1", "eth1", "down")
        bad = sh("lnetctl", "-n", NAME, "c1", "ping", "--source", "10.11.0.1@tcp",
                 "--timeout", "3", "10.11.0.2@tcp", check=False)
        print(f"    -> exit status {bad.returncode} (expected: non-zero)")
        sh("lnetctl", "-n", NAME, "c1", "ping", "--source", "10.10.0.1@tcp", "--timeout", "3",
           "10.10.0.2@tcp")
        if bad.returncode == 0:
            raise SystemExit("demo: the ping through the downed link unexpectedly succeeded")
        sh("link", "-n", NAME, "c1", "eth1", "up")
    finally:
        banner("6. tear down")
        sh("down", "-n", NAME, check=False)
    print("\ndemo finished: every step behaved as expected")
    print(clock.note())
    return 0


if __name__ == "__main__":
    sys.exit(main())
