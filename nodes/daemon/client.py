"""Client side of a node daemon's control socket (used by lnetctl, lctl and the orchestrator).

Protocol (JSON over a ZeroMQ REQ -> ROUTER pair on ``ipc://<rundir>/nodes/<node>.sock``):
request ``{"cmd": ..., ...}``, one JSON reply. Every wait is bounded (STYLE rule 11).

A daemon on another machine (testbed/vagrant/) is reached at ``tcp://ADDR:PORT`` with CURVE:
the caller passes :class:`CurveKeys` (its own pair and the server key it pins); plain TCP is
never used. A refusal by the server's ZAP handler is seen on a socket monitor and reported at
once as :class:`DaemonRefused`, instead of waiting out the timeout.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.utils.monitor

from nodes.limits import MAX_REQUEST_BYTES

#: Where a daemon registers itself by network-namespace inode, so a bare ``lnetctl`` run
#: inside that namespace (``ip netns exec``/``nsenter``, no env) finds its node.
BY_NETNS_DIR = Path(os.environ.get("LNET_TESTBED_RUNROOT", "/run/lnet-testbed")) / "by-netns"
ENV_CTL = "LNET_TESTBED_CTL"
#: How often a wait asks whether its server is still alive (``request``'s ``alive``).
ALIVE_POLL = 0.25


class DaemonUnreachable(Exception):
    """No daemon answered on the control socket in time."""


class DaemonRefused(DaemonUnreachable):
    """The daemon's CURVE/ZAP handshake refused our key (or our idea of its key)."""


class DaemonDead(DaemonUnreachable):
    """The daemon's process is gone: no answer can come (the message says how it is known)."""


class RequestTooLarge(DaemonUnreachable):
    """The request is larger than any control socket reads (``MAX_REQUEST_BYTES``): refused
    here, before sending, instead of dropped by the server's ZeroMQ and waited for in vain
    (issue 27 item 2). A ``DaemonUnreachable`` so that every caller reports it in one line."""


@dataclass(frozen=True)
class CurveKeys:
    """Client side of a CURVE control connection (Z85 keys): our pair, the pinned server key."""

    public: bytes
    secret: bytes
    server: bytes


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


def request(ctl_path: str, msg: dict[str, Any], timeout: float = 30.0,
            curve: CurveKeys | None = None, ctx: zmq.Context[Any] | None = None,
            alive: Callable[[], str | None] | None = None) -> dict[str, Any]:
    """Send one request and return the decoded reply; raise DaemonUnreachable on timeout.

    ``ctl_path`` is an ipc socket path, or ``tcp://ADDR:PORT`` together with ``curve``.
    ``ctx``: a context the caller keeps for many requests (the supervisor's thousands at a
    bring-up); by default one is made and ended for this request. ``alive``: says why the
    server is known gone (its process died), None while it may answer; asked before sending
    and every ``ALIVE_POLL`` seconds of the wait, so a dead daemon fails the call at once
    instead of at the deadline (issue 27 item 5).

    Raises:
        DaemonUnreachable: no reply in time (DaemonRefused: the CURVE handshake was refused;
            RequestTooLarge: ``msg`` is larger than ``MAX_REQUEST_BYTES``, nothing was sent).
        ValueError: a ``tcp://`` address without CURVE keys.
    """
    tcp = ctl_path.startswith("tcp://")
    if tcp and curve is None:
        raise ValueError(f"{ctl_path}: a TCP control endpoint needs CURVE keys")
    body = json.dumps(msg).encode()
    if len(body) > MAX_REQUEST_BYTES:
        raise RequestTooLarge(f"request of {len(body)} bytes is larger than "
                              f"{MAX_REQUEST_BYTES}, the most a control socket reads")
    gone = alive() if alive is not None else None
    if gone is not None:
        raise DaemonDead(gone)
    own = ctx is None
    if ctx is None:
        ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = None
    try:
        if tcp:
            assert curve is not None
            sock.curve_publickey = curve.public
            sock.curve_secretkey = curve.secret
            sock.curve_serverkey = curve.server
            monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                              | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
            sock.connect(ctl_path)
        else:
            sock.connect(f"ipc://{ctl_path}")
        sock.send(body)
        if not _wait_reply(sock, monitor, ctl_path, timeout, alive):
            raise DaemonUnreachable(f"no answer from {ctl_path} within {timeout:g}s")
        reply = json.loads(sock.recv())
        if not isinstance(reply, dict):
            raise DaemonUnreachable(f"malformed reply from {ctl_path}")
        return reply
    finally:
        if monitor is not None:
            sock.disable_monitor()
            monitor.close(0)
        sock.close(0)
        if own:
            ctx.term()


def _wait_reply(sock: zmq.Socket[bytes], monitor: zmq.Socket[bytes] | None, where: str,
                timeout: float, alive: Callable[[], str | None] | None = None) -> bool:
    """Poll for the reply (and, on TCP, for a handshake refusal; with ``alive``, for the
    server's death) until ``timeout``."""
    if monitor is None and alive is None:
        return bool(sock.poll(int(timeout * 1000)))
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    if monitor is not None:
        poller.register(monitor, zmq.POLLIN)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if alive is not None:
            left = min(left, ALIVE_POLL)
        ready = dict(poller.poll(int(left * 1000) + 1))
        if sock in ready:
            return True
        gone = alive() if alive is not None else None
        if gone is not None:
            raise DaemonDead(gone)
        if monitor is not None and monitor in ready:
            event = zmq.utils.monitor.recv_monitor_message(monitor)
            what = "refused our key" if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH \
                else "failed the CURVE handshake (wrong server key, or no CURVE)"
            raise DaemonRefused(f"{where} {what}")
    return False
