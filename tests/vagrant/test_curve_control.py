"""The networked control plane: a node daemon's CURVE TCP socket admits only the testbed's key.

A real ``python -m nodes.daemon`` serves on loopback through a listener this test makes and
hands over (``--ctl-fd``, as the host agent does across network namespaces). Issue 15 item 3:
keys generated per testbed, server keys pinned, unauthenticated or wrongly keyed clients
refused, the control port bound to one address only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nodes.daemon.client import CurveKeys, DaemonRefused, DaemonUnreachable, request
from testbed.vagrant.curve import TestbedKeys

PROJECT = Path(__file__).resolve().parents[2]


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], endpoint: str, ipc: Path,
                 keys: TestbedKeys, log: Path) -> None:
        self.proc, self.endpoint, self.ipc, self.keys, self.log = proc, endpoint, ipc, keys, log


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    keys = TestbedKeys(tmp_path)
    keys.generate(["n1"])
    cdir = tmp_path / "guest-curve"
    for rel, text in keys.node("n1").files().items():
        (cdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (cdir / rel).write_text(text)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    endpoint = f"tcp://127.0.0.1:{lsock.getsockname()[1]}"
    env = dict(os.environ, LNET_TESTBED_RUNROOT=str(tmp_path / "root"),
               PYTHONPATH=str(PROJECT))
    env.pop("LNET_TESTBED_RUNDIR", None)
    log = tmp_path / "n1.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodes.daemon", "--testbed", "t", "--node", "n1",
             "--rundir", str(tmp_path / "run"), "--ctl-tcp", endpoint,
             "--ctl-fd", str(lsock.fileno()), "--curve-dir", str(cdir)],
            pass_fds=(lsock.fileno(),), stdout=out, stderr=subprocess.STDOUT, env=env,
            cwd="/")
    lsock.close()  # the daemon holds it now
    ipc = tmp_path / "run" / "nodes" / "n1.sock"
    deadline = time.monotonic() + 20
    while not ipc.exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "daemon did not start"
        time.sleep(0.05)
    yield Daemon(proc, endpoint, ipc, keys, log)
    proc.terminate()
    proc.wait(timeout=10)


def test_pinned_keys_get_answers_over_tcp(daemon: Daemon) -> None:
    reply = request(daemon.endpoint, {"cmd": "hello"}, timeout=10,
                    curve=daemon.keys.client("n1"))
    assert reply["ok"] and reply["node"] == "n1"
    out = request(daemon.endpoint, {"cmd": "lnetctl", "argv": ["lnet", "configure"]},
                  timeout=10, curve=daemon.keys.client("n1"))
    assert out["rc"] == 0, out


def test_ipc_stays_as_it_was(daemon: Daemon) -> None:
    assert request(str(daemon.ipc), {"cmd": "hello"}, timeout=10)["node"] == "n1"


def test_unknown_client_key_is_refused(daemon: Daemon) -> None:
    good = daemon.keys.client("n1")
    pub, sec = zmq.curve_keypair()  # a client the daemon was never told about
    with pytest.raises(DaemonRefused, match="refused our key"):
        request(daemon.endpoint, {"cmd": "hello"}, timeout=10,
                curve=CurveKeys(public=pub, secret=sec, server=good.server))
    assert daemon.proc.poll() is None


def test_wrong_server_key_gets_nothing(daemon: Daemon) -> None:
    """A client pinning another server key (an impostor's, or a stale testbed's) never
    completes the handshake: no request reaches the daemon."""
    good = daemon.keys.client("n1")
    other, _ = zmq.curve_keypair()
    with pytest.raises(DaemonUnreachable):
        request(daemon.endpoint, {"cmd": "shutdown"}, timeout=2,
                curve=CurveKeys(public=good.public, secret=good.secret, server=other))
    assert daemon.proc.poll() is None  # the shutdown never arrived
    assert request(daemon.endpoint, {"cmd": "hello"}, timeout=10, curve=good)["ok"]


def test_plain_tcp_client_gets_nothing(daemon: Daemon) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(daemon.endpoint)
        sock.send(b'{"cmd": "shutdown"}')
        assert not sock.poll(2000), "a client without CURVE got an answer"
    finally:
        sock.close(0)
        ctx.term()
    assert daemon.proc.poll() is None
    with pytest.raises(ValueError, match="needs CURVE"):
        request(daemon.endpoint, {"cmd": "hello"}, timeout=1)


def test_port_is_bound_to_one_address_only(daemon: Daemon) -> None:
    """127.0.0.2 is this host too, but the listener is on 127.0.0.1 only."""
    port = int(daemon.endpoint.rsplit(":", 1)[1])
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.2", port)) != 0
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) == 0


def test_keys_are_private_and_per_testbed(tmp_path: Path) -> None:
    a, b = TestbedKeys(tmp_path / "a"), TestbedKeys(tmp_path / "b")
    a.generate(["n1"])
    b.generate(["n1"])
    assert a.client("n1").server != b.client("n1").server
    assert a.client("n1").public != b.client("n1").public
    for path in (tmp_path / "a" / "curve").rglob("*.key_secret"):
        assert path.stat().st_mode & 0o077 == 0, path
