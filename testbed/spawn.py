"""Starting a testbed's long-lived process (Mininet supervisor, sim server) and following it.

Theory of operation: ``testbed up`` spawns the process in its own session with the owner tag
(``LNET_TESTBED``) in its environment, then reads its JSON progress lines on a pipe
(``{"progress": ..., "step": N, "total": M}``, then ``{"ready": ...}`` or ``{"error": ...}``)
with a bounded wait; the process then detaches its stdout to its own log and serves
``ctl.sock``. An interrupted ``up`` sends it SIGTERM, on which it undoes its work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed import runstate
from testbed.base import TestbedError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: Bound on waiting for a spawned process to exit after an error or SIGTERM.
REAP_TIMEOUT = 60.0

Progress = Callable[[int, int, str], None]


def child_env(name: str, rdir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of every process of testbed ``name``: the owner tag, its run directory
    and root, and this project on the import path."""
    env = dict(os.environ if base is None else base)
    env[runstate.ENV_NAME] = name
    env[runstate.ENV_RUNDIR] = str(rdir)
    env[runstate.ENV_RUNROOT] = str(rdir.parent)
    paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def server_options(prog: str) -> argparse.ArgumentParser:
    """The options every supervisor gets from :func:`start_testbed`: ``--name``,
    ``--topology``, and :func:`observe_args`' ``--record-period`` and ``--trace-messages``
    (handed on to each node daemon, ``nodes.daemon``)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--name", required=True)
    parser.add_argument("--topology", default=None)
    parser.add_argument("--record-period", default="0", metavar="SECONDS",
                        help="each daemon's recorder period (0: no recorder)")
    parser.add_argument("--trace-messages", action="store_true",
                        help="each daemon writes its message trace")
    return parser


def to_log(path: Path) -> None:
    """The testbed process's fd 1 and 2 to ``path`` (appended, mode 0600) and its working
    directory ``/``: what it, and any library, prints from now on goes to its log."""
    logfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(logfd)
    os.chdir("/")


def observe_args(record_period: float, trace_messages: bool) -> list[str]:
    """The testbed process's options for the recorder (seconds between samples, 0: none) and
    the message trace (issue 16; docs/events.md).

    Raises:
        TestbedError: the period is not a number of seconds in 0..3600.
    """
    from testbed.base import TestbedError

    if isinstance(record_period, bool) or not isinstance(record_period, int | float) \
            or not 0 <= record_period <= 3600:
        raise TestbedError(f"record_period must be 0..3600 seconds (0: off), "
                           f"not {record_period!r}")
    return ["--record-period", f"{record_period:g}"] + (
        ["--trace-messages"] if trace_messages else [])


def start_testbed(module: str, topology_path: str | os.PathLike[str] | None,
                  name: str | None, root: str | Path | None, extra: list[str],
                  timeout: float, per_node: float, progress: Progress | None,
                  backend: str | None = None) -> tuple[str, Path, Path, dict[str, Any]]:
    """Validate the topology here (a bad file fails before anything starts), refuse a name
    in use, then spawn ``python -m MODULE --name NAME [--topology PATH] EXTRA...`` and follow
    it; returns (name, run directory, run root, its ``ready`` message).

    Raises:
        TopologyError: the topology is invalid.
        TestbedError: the name is taken, or bring-up failed.
    """
    from testbed.base import check_name
    from testbed.plan import load_topology

    plan = load_topology(topology_path, name=name, backend=backend)  # its node limit too
    name = check_name(plan.name)
    base = runstate.runroot(root)
    rdir = runstate.rundir(name, base)
    if rdir.exists():
        if runstate.supervisor_alive(name, runstate.read_state(rdir)):
            raise TestbedError(f"testbed {name} is already up")
        raise TestbedError(f"a leftover of testbed {name} remains in {rdir}: "
                           f"remove it with `testbed down -n {name}`")
    argv = [sys.executable, "-m", module, "--name", name, *extra]
    if topology_path is not None:  # the file it was read from (a built-in one by name too)
        argv += ["--topology", str(Path(plan.source).resolve())]
    ready = spawn(argv, child_env(name, rdir), timeout + per_node * len(plan.nodes), progress)
    return name, rdir, base, ready


def spawn(argv: list[str], env: dict[str, str], timeout: float,
          progress: Progress | None) -> dict[str, Any]:
    """Run ``argv`` detached and follow its progress until ``ready``; returns that message.

    Raises:
        TestbedError: the process reported an error, exited, or did not finish in time (it
            is then told to undo its work).
    """
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd="/",
                            start_new_session=True)
    try:
        return follow(proc, timeout, progress)
    except BaseException:
        stop(proc)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def follow(proc: subprocess.Popen[bytes], timeout: float,
           progress: Progress | None) -> dict[str, Any]:
    """Read progress until ``ready``; raise TestbedError on error/timeout."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    noise: list[str] = []
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestbedError(f"bring-up did not finish within {timeout:g}s")
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = _parse(line)
                if msg is None:
                    noise.append(line.decode(errors="replace"))
                elif "progress" in msg:
                    if progress is not None:
                        progress(int(msg["step"]), int(msg["total"]), str(msg["progress"]))
                elif "ready" in msg:
                    return dict(msg["ready"]) if isinstance(msg["ready"], dict) else {}
                elif "error" in msg:
                    reap(proc)
                    raise TestbedError(str(msg["error"]))
    reap(proc)
    tail = " | ".join(n for n in noise if n.strip())[-800:]
    raise TestbedError(f"testbed process exited with rc {proc.returncode} before the testbed "
                       f"was ready: {tail or '(no output)'}")


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def reap(proc: subprocess.Popen[bytes], timeout: float = REAP_TIMEOUT) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """An interrupted ``up``: the process undoes its work on SIGTERM."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        reap(proc)
