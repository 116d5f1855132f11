"""Subprocesses for the host side: argv lists, explicit status, errors that carry the evidence.

Theory of operation (STYLE rule 10): every command the testbed and the fault layer run goes
through ``run`` or ``run_checked``. It lives in ``faults/`` because that is the lower of the two
host-side layers (``testbed/`` imports ``faults/``, never the reverse; issue 12 item 3), and
``testbed.sh`` is this module under its old name. Commands are argv lists, never shell
strings built from topology names, so a node called ``a;rm -rf /`` can at worst fail
validation, never run. Entering a node's network namespace is done per command with
``nsenter --net=/proc/<pid>/ns/net -- argv...`` (no interactive shell behind a pty and a
sentinel prompt, Mininet's ``Node.cmd``). Every call is bounded by a timeout; a command that
overruns is killed and reported like any failure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Default bound for one command (ip, sysctl, brctl finish in milliseconds).
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Completed:
    """Result of one command: exit status and both output streams, decoded."""

    rc: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class CommandError(Exception):
    """A command failed (non-zero exit, timeout, or could not start).

    The message holds the command, its exit status, stdout and stderr, so a failure in a log
    or a test report needs no re-run to understand (STYLE rule 10).
    """

    def __init__(self, argv: Sequence[str], result: Completed) -> None:
        self.argv = list(argv)
        self.result = result
        super().__init__(
            f"command {' '.join(self.argv)!r} failed with rc={result.rc}; "
            f"stdout: {result.out.strip()!r}; stderr: {result.err.strip()!r}"
        )


def ns_argv(argv: Sequence[str], ns_pid: int | None, mount: bool = False) -> list[str]:
    """The argv that runs ``argv`` in the network namespace of process ``ns_pid``.

    Only the network namespace is entered: the command sees the host's filesystem; with
    ``mount`` the process's mount namespace too (a Mininet node's: its /sys, its /sys/module
    parameter files), in the same working directory.
    """
    argv = [str(a) for a in argv]
    if ns_pid is None:
        return argv
    ns = [f"--net=/proc/{int(ns_pid)}/ns/net"]
    if mount:
        ns += [f"--mount=/proc/{int(ns_pid)}/ns/mnt", f"--wd={os.getcwd()}"]
    return ["nsenter", *ns, "--", *argv]


def run(
    argv: Sequence[str],
    *,
    ns_pid: int | None = None,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    mount: bool = False,
) -> Completed:
    """Run one command and return its status and output; never raises for a failed command.

    Args:
        argv: the command as a list of arguments (no shell).
        ns_pid: run it inside this process's network namespace.
        input: text fed to stdin (stdin is /dev/null otherwise).
        timeout: seconds before the command is killed (rc -9, err says so).
        env: full environment for the command (default: inherit).
        mount: enter ``ns_pid``'s mount namespace too (``ns_argv``).

    Returns:
        Completed(rc, out, err). A command that cannot start gives rc 127 and the OS error.
    """
    full = ns_argv(argv, ns_pid, mount)
    try:
        proc = subprocess.run(
            full,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = _text(exc.stdout)
        err = _text(exc.stderr) + f"\n(killed after {timeout:g}s timeout)"
        return Completed(-9, out, err.strip())
    except OSError as exc:
        return Completed(127, "", f"cannot run {full[0]!r}: {exc.strerror or exc}")
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def run_checked(
    argv: Sequence[str],
    *,
    ns_pid: int | None = None,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> Completed:
    """Like ``run``, but raise ``CommandError`` unless the command exits 0.

    Raises:
        CommandError: with the command, rc, stdout and stderr in its message.
    """
    result = run(argv, ns_pid=ns_pid, input=input, timeout=timeout, env=env)
    if result.rc != 0:
        raise CommandError(ns_argv(argv, ns_pid), result)
    return result


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data
