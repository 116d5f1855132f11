"""Client side of a node daemon's control socket (used by lnetctl, lctl and the orchestrator).

Protocol (JSON over a ZeroMQ REQ -> ROUTER pair on ``ipc://<rundir>/nodes/<node>.sock``):
request ``{"cmd": ..., ...}``, one JSON reply. Every wait is bounded (STYLE rule 11).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import zmq

#: Where a daemon registers itself by network-namespace inode, so a bare ``lnetctl`` run
#: inside that namespace (``ip netns exec``/``nsenter``, no env) finds its node.
BY_NETNS_DIR = Path(os.environ.get("LNET_TESTBED_RUNROOT", "/run/lnet-testbed")) / "by-netns"
ENV_CTL = "LNET_TESTBED_CTL"


class DaemonUnreachable(Exception):
    """No daemon answered on the control socket in time."""


def netns_inode(pid: str = "self") -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def find_ctl_path() -> str | None:
    """The control socket of the node whose namespace we run in (env first, then netns map)."""
    env = os.environ.get(ENV_CTL)
    if env:
        return env
    link = BY_NETNS_DIR / str(netns_inode())
    try:
        return os.readlink(link)
    except OSError:
        return None


def request(ctl_path: str, msg: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one request and return the decoded reply; raise DaemonUnreachable on timeout."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"ipc://{ctl_path}")
        sock.send(json.dumps(msg).encode())
        if not sock.poll(int(timeout * 1000)):
            raise DaemonUnreachable(f"no answer from {ctl_path} within {timeout:g}s")
        reply = json.loads(sock.recv())
        if not isinstance(reply, dict):
            raise DaemonUnreachable(f"malformed reply from {ctl_path}")
        return reply
    finally:
        sock.close(0)
        ctx.term()
