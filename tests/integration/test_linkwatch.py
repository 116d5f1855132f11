"""The daemon's link watcher hears the kernel's link notifications (hlt-005; real ksocklnd's
netdev notifier, ``ksocknal_handle_link_state_change``): in a network namespace of its own,
with a veth pair, a watcher whose poll would come only after an hour reports each
``ip link set`` at once, so nothing but an rtnetlink notification can have told it."""

from __future__ import annotations

import select
import subprocess
import sys
import uuid

from itkit import PROJECT_ROOT, pytestmark  # noqa: F401  (the marks)

WATCHER = """
import asyncio, sys
from nodes.daemon.linkwatch import LinkWatch
from nodes.lnet.nid import NID

nid = NID.parse("10.99.0.1@tcp")
watch = LinkWatch(nis=lambda: {nid: "d0"}, interval=3600.0,
                  on_change=lambda n, up: print("up" if up else "down", flush=True))

async def main():
    watch.poll()  # d0 starts down: "down"
    task = asyncio.get_running_loop().create_task(watch.run())
    await asyncio.sleep(0.2)  # (the netlink socket is bound once run() has started)
    print("ready", flush=True)
    await task

asyncio.run(main())
"""


def _line(proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"watcher said nothing in {timeout} s"
    return proc.stdout.readline().strip()


def test_link_changes_reach_the_watcher_without_waiting_for_its_poll() -> None:
    ns = f"tblw{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    proc = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name",
                        "d1"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "d1", "up"], check=True)  # d0's carrier
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", WATCHER],
                                cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True)
        assert _line(proc) == "down"
        assert _line(proc) == "ready"
        for state in ("up", "down", "up"):
            subprocess.run(["ip", "-n", ns, "link", "set", "d0", state], check=True)
            assert _line(proc) == state
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
