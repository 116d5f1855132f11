"""An interposer process seen from outside: its counters read, stopped, told apart from other
processes.

Theory of operation: the ``Interposer`` resource (``faults/resources.py``) starts one (and
waits for its queue), undoes it with ``stop`` and finds it with ``is_interposer``; its owners
read its counters (``read_counters``); the process itself is ``faults/interposer.py``. It
says it is ready, and what it counted, in its counters file (JSON, rewritten whole); a fresh
read asks it to write first (SIGUSR1). Every wait here is bounded, and only a process whose
command line is an interposer is signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

#: Seconds a reader waits for an interposer to write its counters on request.
FRESH_TIMEOUT = 0.5


def read_counters(path: str | Path, fresh: bool = False) -> dict[str, Any]:
    """An interposer's counters file ({} while it does not exist or is half written).

    ``fresh``: counters current when read (issue 32 item 3). A running interposer writes
    its file every ``COUNTER_PERIOD``; here it is sent SIGUSR1, on which it takes the packets
    already queued and writes at once, and the file is read again once its ``t`` is past the
    request (at most :data:`FRESH_TIMEOUT`). Only a live process whose command line is an
    interposer, and whose file has ``writes`` (it handles SIGUSR1), is signalled."""
    data = _load_counters(path)
    pid = data.get("pid")
    if not fresh or data.get("exited") or "writes" not in data or not isinstance(pid, int):
        return data
    if not is_interposer(pid):
        return data
    try:
        asked = time.time()
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return data
    deadline = time.monotonic() + FRESH_TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.002)
        now = _load_counters(path)
        if now.get("exited") or float(now.get("t", 0)) >= asked:
            return now
    return _load_counters(path) or data


def _load_counters(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def tail(log: str) -> str:
    """The last three lines of an interposer's ``log``, joined on one line."""
    try:
        lines = Path(log).read_text(errors="replace").strip().splitlines()[-3:]
    except OSError:
        lines = []
    return " | ".join(lines) or "(no output)"


def stop(pid: int | None, grace: float = 2.0) -> None:
    """SIGTERM (it releases held packets and writes its counters), then SIGKILL; reap."""
    if not pid:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child (after a supervisor restart, or
                # started by a host agent that has exited): gone, or a zombie to its reaper
                done = pid if not pid_running(pid) else 0
            if done:
                return
            time.sleep(0.02)


def pid_running(pid: int) -> bool:
    """``pid`` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def is_interposer(pid: Any) -> bool:
    """``pid`` is a running ``faults.interposer`` (by its command line)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as fh:
            return b"faults.interposer" in fh.read()
    except (OSError, ValueError, TypeError):
        return False
