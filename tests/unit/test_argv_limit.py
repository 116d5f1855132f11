"""One limit for a command's arguments, enforced on both ends, answered (issue 27 item 2).

The README promises lnetctl/lctl/lst argv up to execve's ``ARG_MAX`` (2 MiB in all, 128 KiB
per argument: ``nodes/limits.py``). Before, the sim server read at most 1 MiB per request
(ZeroMQ dropped larger ones unread) and the client waited 600 s for an answer that could not
come: ``testbed lnetctl`` with 1.2 MB of arguments hung. Now every control socket reads what
a largest argv needs (``MAX_REQUEST_BYTES``, 8 MiB of JSON, one number with the daemons'),
a body past that is refused by the client before sending and by the server with an error,
and an argv past ``ARG_MAX`` is answered ``Argument list too long`` by the client, as the
daemon's command entry answers it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from nodes.limits import ARG_MAX, MAX_ARG_STRLEN, MAX_REQUEST_BYTES
from testbed import runstate
from testbed.base import TestbedError

#: 12 arguments of 100 KiB: 1.2 MB, past the old 1 MiB bound, within ARG_MAX.
BETWEEN = ["net", "show", *(["n" * 100_000] * 12)]
#: 20 arguments of 110 KiB: past ARG_MAX.
PAST = ["net", "show", *(["n" * 110_000] * 20)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from testbed.sim.client import SimClient

    root = tmp_path_factory.mktemp("argv-limit")
    tb = SimClient.up(None, name=f"harden-a-{uuid.uuid4().hex[:8]}", root=root, speed="0",
                      record_period=0)
    try:
        yield tb
    finally:
        tb.down()


def test_lnetctl_with_more_than_1_mib_of_arguments_is_answered(served: Any) -> None:
    """Before: no answer, the client waiting its 600 s (the server dropped the request)."""
    assert 1 << 20 < sum(len(a) + 9 for a in BETWEEN) <= ARG_MAX
    start = time.monotonic()
    res = served.node("c1").verb("lnetctl", BETWEEN, timeout=20.0)
    assert time.monotonic() - start < 15.0
    assert res.rc == 0 and res.out.startswith("net:\n") and res.err == "", res  # (extra
    # words after `net show` are ignored, as by lnetctl's getopt)


def test_arguments_past_arg_max_are_refused_by_the_client_as_the_daemon_does(
        served: Any) -> None:
    from nodes.dlc.verbs import lnetctl_cmd

    res = served.node("c1").verb("lnetctl", PAST)
    assert res.rc == 256 - 7 and res.out == ""
    assert res.err == (f"lnetctl: {len(PAST)} arguments exceed {ARG_MAX} bytes: "
                       "Argument list too long\n")
    # the same answer the node's own command entry gives (the other end)
    coro = lnetctl_cmd.run(None, PAST)  # type: ignore[arg-type]
    try:
        coro.send(None)
    except StopIteration as stop:
        assert tuple(stop.value) == (res.rc, res.out, res.err)
    one = served.node("c1").verb("lst", ["x" * (MAX_ARG_STRLEN + 1)])
    assert one.rc == 249 and "more than 131072: Argument list too long" in one.err


def test_a_request_past_the_socket_bound_is_refused_before_sending(served: Any) -> None:
    """An argv within ARG_MAX whose JSON is past 8 MiB (control characters: 6 bytes each)."""
    argv = ["net", *(["\x01" * 100_000] * 19)]
    with pytest.raises(TestbedError) as info:
        served.node("c1").verb("lnetctl", argv)
    assert str(info.value).startswith(f"testbed {served.name}: lnetctl: request of ")
    assert str(info.value).endswith(f"bytes is larger than {MAX_REQUEST_BYTES}, the most a "
                                    "control socket reads")


def test_the_server_answers_a_body_past_its_bound_with_an_error(served: Any) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"ipc://{runstate.ctl_sock(served.rundir)}")
        sock.send(b" " * (MAX_REQUEST_BYTES + 1))
        assert sock.poll(20_000), "no answer"
        assert json.loads(sock.recv()) == {
            "ok": False, "error": f"request larger than {MAX_REQUEST_BYTES} bytes"}
    finally:
        sock.close(0)
        ctx.term()
    assert served.status()["ok"] is True


def test_cli_lnetctl_past_1_mib_answers(served: Any, tmp_path: Path) -> None:
    """``testbed lnetctl`` itself, with 1.2 MB on its command line."""
    proc = subprocess.run([sys.executable, "-m", "testbed", "lnetctl", "-n", served.name,
                           "c1", *BETWEEN], capture_output=True, text=True, timeout=60,
                          env={**os.environ,
                               "LNET_TESTBED_RUNROOT": str(served.root)})
    assert proc.returncode == 0 and proc.stdout.startswith("net:\n"), proc.stderr[:300]
    # (past ARG_MAX, the kernel's execve refuses the testbed command itself: the API's
    # callers are the ones the client-side check answers)
