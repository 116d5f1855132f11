"""Running argv lists on a host of a testbed: this machine, or another over SSH (bounded).

Theory of operation (STYLE rule 10): a command is an argv list everywhere; over SSH it becomes
one remote command line with every word quoted by ``shlex.join``, so a name can never turn into
shell syntax on the far side. One SSH master connection per host (``ControlMaster``, socket in
the testbed's run directory) makes each later command cost a channel, not a handshake:
~20 ms instead of ~300 ms to a container, seconds to an emulated VM. Host keys are pinned per
testbed in its own ``known_hosts`` (first use: the guest was just created by us, or the user
named the host). A non-root login runs commands through ``sudo -n``. Every call has a timeout.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from testbed.sh import Completed

DEFAULT_TIMEOUT = 60.0


class Shell:
    """Commands on this machine (the base class is the local shell)."""

    name = "local"

    def argv(self, argv: Sequence[str], *, tty: bool = False) -> list[str]:
        """The local argv that runs ``argv`` on the host (as root)."""
        return [str(a) for a in argv]

    def run(self, argv: Sequence[str], *, input: bytes | str | None = None,
            timeout: float = DEFAULT_TIMEOUT, env: dict[str, str] | None = None) -> Completed:
        """Run and capture; never raises for a failed command (rc -9 on timeout)."""
        full = self.argv(argv)
        data = input.encode() if isinstance(input, str) else input
        try:
            proc = subprocess.run(full, input=data, capture_output=True, timeout=timeout,
                                  stdin=None if data is not None else subprocess.DEVNULL,
                                  env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            return Completed(-9, _text(exc.stdout), _text(exc.stderr)
                             + f"\n(killed after {timeout:g}s timeout on {self.name})")
        except OSError as exc:
            return Completed(127, "", f"cannot run {full[0]!r}: {exc.strerror or exc}")
        return Completed(proc.returncode, _text(proc.stdout), _text(proc.stderr))

    def close(self) -> None:
        """Release what the shell holds (the SSH master connection)."""


class SshShell(Shell):
    """Commands on a host reached over SSH: ``[user@]address``, port, identity file."""

    def __init__(self, name: str, target: str, *, port: int = 22, key: str | None = None,
                 user: str = "root", ssh_dir: Path) -> None:
        self.name = name
        self.target = target
        self.port = port
        self.key = key
        self.user = user
        self.ssh_dir = ssh_dir
        ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def options(self) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=6",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self.ssh_dir}/%C",
                "-o", "ControlPersist=900", "-o", "StrictHostKeyChecking=accept-new",
                "-o", f"UserKnownHostsFile={self.ssh_dir}/known_hosts",
                "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes", "-p", str(self.port)]
        if self.key:
            opts += ["-i", self.key]
        return opts

    def argv(self, argv: Sequence[str], *, tty: bool = False) -> list[str]:
        words = [str(a) for a in argv]
        if self.user != "root":
            words = ["sudo", "-n", "--", *words]
        return ["ssh", *self.options(), *(["-tt"] if tty else ["-T"]), self.target, "--",
                shlex.join(words)]

    def close(self) -> None:
        subprocess.run(["ssh", *self.options(), "-O", "exit", self.target],
                       capture_output=True, timeout=15, check=False)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def for_host(host: object, ssh_dir: Path) -> Shell:
    """The shell of a ``placement.Host`` (local when it has no ``ssh``)."""
    ssh = getattr(host, "ssh", None)
    if ssh is None:
        return Shell()
    key = getattr(host, "key", None)
    return SshShell(str(getattr(host, "name", ssh)), ssh, port=int(getattr(host, "port", 22)),
                    key=os.path.expanduser(key) if key else None,
                    user=str(getattr(host, "user", "root")), ssh_dir=ssh_dir)
