"""``lst``: the LNet selftest console, talking to this namespace's node daemon.

As real lst talks to its node's kernel through ioctls, this one sends each console operation
to the node daemon (the ``lstio`` verb, ``nodes/dlc/verbs/lst_verb.py``) and prints as it goes,
line-buffered, so ``lst stat`` streams its blocks until interrupted (Ctrl-C ends it quietly,
as SIGINT ends lst). ``LST_SESSION`` and ``LST_FEATURES`` are read from the environment.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
import sys
import time
from typing import Any

from nodes.daemon.client import DaemonUnreachable, find_ctl_path, request
from nodes.selftest.lstcli import LstTool

#: a console operation waits at most LST_TRANS_TIMEOUT (30 s) for its RPCs; some do two
IOCTL_TIMEOUT = 100.0


class DaemonIO:
    """``LstIO`` over the daemon's control socket and the wall clock."""

    def __init__(self, ctl: str) -> None:
        self.ctl = ctl

    async def ioctl(self, opc: str, key: int, args: dict[str, Any]) -> dict[str, Any]:
        reply = request(self.ctl, {"cmd": "lstio", "opc": opc, "key": key, "args": args},
                        timeout=IOCTL_TIMEOUT)
        if not reply.get("ok"):
            raise DaemonUnreachable(str(reply.get("error", "bad reply from daemon")))
        return reply

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def time(self) -> int:
        return int(time.time())


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _write(stream: Any) -> Any:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()
    return write


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ctl = find_ctl_path()
    if ctl is None:
        sys.stderr.write("lst: no LNet node daemon serves this network namespace "
                         "(run inside a testbed node, e.g. `testbed exec NODE lst ...`)\n")
        return 1
    tool = LstTool(DaemonIO(ctl), os.environ, _write(sys.stdout), _write(sys.stderr),
                   user=_user(), host=socket.gethostname())
    try:
        rc = asyncio.run(tool.main(args))
    except DaemonUnreachable as e:
        sys.stderr.write(f"lst: {e}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    return rc & 0xFF


if __name__ == "__main__":
    sys.exit(main())
