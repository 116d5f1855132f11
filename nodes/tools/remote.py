"""Shared body of the ``lnetctl`` and ``lctl`` console scripts: forward argv to the daemon.

The tools are thin clients (lnetctl's real work is in the node daemon, as real lnetctl's is in
the kernel): argv goes to the daemon and stdout/stderr/exit status come back unchanged. Before
anything is sent the argv is checked against execve's limits (``nodes/limits.py``) and the
control socket is checked to be there and writable: a user who may not talk to the node
(not root) is told so at once, as lnetctl is when /dev/lnet cannot be opened, instead of
waiting for a reply that never comes (issue 11 item 9). A reply without ``rc`` (the daemon
refused or failed the request) prints its ``error`` (issue 11 item 8).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

from nodes.daemon.client import DaemonUnreachable, find_ctl_path, request
from nodes.dlc.output import exit_code
from nodes.limits import argv_error

#: generous: `lnetctl ping` without --timeout may legitimately wait 180 s (spec §3.4, §11.14)
REQUEST_TIMEOUT = 200.0


def control_path(tool: str) -> tuple[str | None, str]:
    """The node's control socket, or None and the one-line reason it cannot be used."""
    ctl = find_ctl_path()
    if ctl is None:
        return None, (f"{tool}: no LNet node daemon serves this network namespace "
                      "(run inside a testbed node, e.g. `testbed exec NODE ...`)")
    try:
        os.stat(ctl)
    except OSError as e:  # ENOENT: the daemon is gone; EACCES: a directory on the way
        why = os.strerror(e.errno or errno.EIO)
        hint = f": {tool} needs root" if e.errno == errno.EACCES else ""
        return None, f"{tool}: opening {ctl} failed: {why}{hint}"
    if not os.access(ctl, os.R_OK | os.W_OK):
        return None, (f"{tool}: opening {ctl} failed: {os.strerror(errno.EACCES)}: "
                      f"{tool} needs root")
    return ctl, ""


def call(tool: str, argv: list[str], extra: dict[str, Any] | None = None
         ) -> tuple[int, str, str]:
    """One request; (rc, stdout, stderr) as the tool prints them."""
    bad = argv_error(tool, argv)
    if bad is not None:
        return exit_code(-errno.E2BIG), "", bad + "\n"
    ctl, why = control_path(tool)
    if ctl is None:
        return 1, "", why + "\n"
    try:
        reply = request(ctl, {"cmd": tool, "argv": argv, **(extra or {})},
                        timeout=REQUEST_TIMEOUT)
    except DaemonUnreachable as e:
        return 1, "", f"{tool}: {e}\n"
    if "rc" not in reply or not isinstance(reply.get("rc"), int):
        return 1, "", f"{tool}: {reply.get('error', 'bad reply from daemon')}\n"
    return int(reply["rc"]), str(reply.get("out", "")), str(reply.get("err", ""))


def emit(result: tuple[int, str, str]) -> int:
    rc, out, err = result
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return rc


def forward(tool: str, argv: list[str]) -> int:
    return emit(call(tool, argv))


def interactive(tool: str, run: Any) -> int:
    """parser.c ``cfs_parser_commands``: no arguments reads commands line by line (a prompt
    on a terminal); off a terminal the first failing command stops the run."""
    tty = sys.stdin.isatty()
    rc = 0
    while True:
        if tty:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            break
        words = line.split()
        if not words:
            continue
        if words[0] in ("quit", "exit"):
            break
        status = run(words)
        if status and not tty:
            return status
        rc = status or rc
    return rc
