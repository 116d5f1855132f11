"""``make demo``: the main job, end to end, with the commands a user would type.

Brings up the default topology (seed 000 Figure 2: a client and a server with two NIs each on
net ``tcp`` over two L2 segments), shows both nodes' ``lnetctl net show``, pings every server
NID, sends a burst of PUTs and shows that both rails carried them, takes one client link down
and shows that the path behind it fails while the other rail still answers, then tears down.
Every step runs the real ``testbed`` CLI, printed before it runs, so the demo doubles as a
tutorial. The testbed is always torn down, also on failure or Ctrl-C.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import yaml

NAME = "demo"
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


def main() -> int:
    subprocess.run([_testbed(), "down", "-n", NAME], capture_output=True, check=False)
    try:
        banner("1. bring up the default topology (2 nodes x 2 rails on net tcp)")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
