"""The supervisor's side of the fork server (``nodes.daemon.forkserver``) and its daemons.

Theory of operation: :class:`ForkServer` spawns ``python -m nodes.daemon.forkserver`` with the
testbed's environment (its owner tag: ``testbed clean`` finds it, and every daemon it forks
inherits the tag) and, in this process, sets ``PR_SET_CHILD_SUBREAPER``: the server's helper
exits right after forking a daemon, so the daemon is re-parented here and :class:`DaemonProcess`
waits for it, signals it and reads its exit status as ``subprocess.Popen`` does for a child
(the fault manager's kill/stop/restart and the supervisor's crash watch use just that
surface). The server imports while the network is built; the daemons of a bring-up are one
batch (one request line); every wait is bounded. Closing its stdin ends it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

PR_SET_CHILD_SUBREAPER = 36


class ForkServerError(Exception):
    """The fork server did not start or could not start a daemon (one-line reason)."""


class DaemonProcess:
    """A node daemon forked by the server and re-parented to this process (a child subreaper):
    the ``subprocess.Popen`` surface the supervisor and the fault manager use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def __repr__(self) -> str:
        return f"<DaemonProcess {self.pid} rc={self.returncode}>"

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours (never re-parented here): look, do not wait
                if not _alive(self.pid):
                    self.returncode = -signal.SIGKILL
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Raises subprocess.TimeoutExpired as Popen.wait does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"daemon {self.pid}", timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


class ForkServer:
    """One running fork server (one per testbed, for its whole life: restarts use it too)."""

    def __init__(self, env: dict[str, str], timeout: float) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise ForkServerError(f"prctl(PR_SET_CHILD_SUBREAPER): "
                                  f"{os.strerror(ctypes.get_errno())}")
        self.timeout = timeout
        self.proc = subprocess.Popen([sys.executable, "-m", "nodes.daemon.forkserver"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     cwd="/")
        self.pid = self.proc.pid
        self._buf = b""
        self._ready = False

    def _line(self, deadline: float) -> Any:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    raise ForkServerError("the fork server did not answer in time")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ForkServerError(f"the fork server exited (rc {self.proc.wait()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise ForkServerError(f"bad fork server reply {line[:80]!r}") from None

    def start(self, requests: list[dict[str, Any]]) -> list[int | str]:
        """Fork one daemon per request ({node, ns_pid, argv, log}): per request, in order,
        the daemon's pid or the one-line reason it was not started.

        Raises:
            ForkServerError: the server is gone or does not answer in time.
        """
        if not self._ready:
            self._line(time.monotonic() + self.timeout)
            self._ready = True
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(requests).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone: {exc}") from exc
        replies = self._line(time.monotonic() + self.timeout * max(1, len(requests) / 50))
        if not isinstance(replies, list) or len(replies) != len(requests):
            raise ForkServerError(f"bad fork server reply {str(replies)[:80]}")
        return [int(r["pid"]) if isinstance(r, dict) and "pid" in r
                else str(r.get("error") if isinstance(r, dict) else r) for r in replies]

    def stop(self) -> None:
        """EOF on its stdin ends it; bounded, then killed."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
