"""Shared body of the ``lnetctl`` and ``lctl`` console scripts: forward argv to the daemon.

The tools are thin clients (lnetctl's real work is in the node daemon, as real lnetctl's is in
the kernel): argv goes unchanged, stdout/stderr/exit status come back unchanged.
"""

from __future__ import annotations

import sys

from nodes.daemon.client import DaemonUnreachable, find_ctl_path, request

#: generous: `lnetctl ping` without --timeout may legitimately wait 180 s (spec §3.4, §11.14)
REQUEST_TIMEOUT = 200.0


def forward(tool: str, argv: list[str]) -> int:
    ctl = find_ctl_path()
    if ctl is None:
        sys.stderr.write(f"{tool}: no LNet node daemon serves this network namespace "
                         "(run inside a testbed node, e.g. `testbed exec NODE ...`)\n")
        return 1
    try:
        reply = request(ctl, {"cmd": tool, "argv": argv}, timeout=REQUEST_TIMEOUT)
    except DaemonUnreachable as e:
        sys.stderr.write(f"{tool}: {e}\n")
        return 1
    if "rc" not in reply:
        sys.stderr.write(f"{tool}: {reply.get('error', 'bad reply from daemon')}\n")
        return 1
    sys.stdout.write(reply.get("out", ""))
    sys.stderr.write(reply.get("err", ""))
    return int(reply["rc"])
