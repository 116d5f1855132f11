"""``lctl`` network verbs served by the node daemon: ``list_nids``, ``ping``.

``lctl ping NID [TIMEOUT]`` prints every entry of the peer's ping buffer as ``pid-nid``
(``12345-0@lo`` first), like lustre/utils/portals.c; ``list_nids`` prints the local NIDs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import LO_NID, NID
from nodes.lnet.ping import PingInfo

if TYPE_CHECKING:
    from nodes.daemon.runtime import NodeRuntime

Result = tuple[int, str, str]


async def run(rt: NodeRuntime, argv: list[str]) -> Result:
    if not argv:
        return 0, "commands: list_nids ping\n", ""
    cmd, args = argv[0], argv[1:]
    if cmd == "list_nids":
        if not rt.engine.configured:
            return 1, "", "IOC_LIBCFS_GET_NI error 100: Network is down\n"
        return 0, "".join(f"{ni.nid}\n" for ni in rt.engine.local_nis()), ""
    if cmd == "ping":
        return await _ping(rt, args)
    return 1, "", f"lctl: unknown command '{cmd}'\n"


async def _ping(rt: NodeRuntime, args: list[str]) -> Result:
    if not args or len(args) > 3:
        return 1, "", "usage: ping nid [timeout] [pid]\n"
    try:
        nid = NID.parse(args[0])
        timeout = float(args[1]) if len(args) > 1 else 1.0
    except (LNetConfigError, ValueError) as e:
        return 1, "", f"failed to parse '{' '.join(args)}': {e}\n"
    events = await rt.wait_final(lambda: rt.engine.ping(rt.now(), nid, timeout=timeout))
    final = events[-1]
    if final.kind != "REPLY" or final.status != 0:
        status = final.status or -5
        return 1, "", f"failed to ping {nid}: {os.strerror(-status)}\n"
    info = PingInfo.unpack(final.payload)
    lines = [f"{info.pid}-{LO_NID}"] + [f"{info.pid}-{n}" for n, _ in info.nis]
    return 0, "\n".join(lines) + "\n", ""
