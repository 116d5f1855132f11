"""The ``hosts`` backend's hosts: this machine and machines reached over SSH, as they are.

Theory of operation: nothing is created *for* a machine; the orchestrator only learns how to
reach it and what its underlay is. The underlay address of a host is its ``address:``, else
the address it is reached at (SSH), else, for this machine, the source address the kernel
picks toward the first remote host (``ip route get``); its MTU is that route's device's MTU,
so VXLAN segments get ``min(underlay MTU) - 50``. The node daemons' control ports bind to that
same address: the management network of a set of machines is the one they reach each other on.
A testbed on this machine alone uses loopback.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from testbed.vagrant.hostset import HostRuntime
from testbed.vagrant.placement import Host
from testbed.vagrant.shell import Shell, for_host


class MachineError(Exception):
    """A host cannot be reached or has no route to its peers; one line."""


def _resolve(name: str) -> str:
    try:
        return socket.gethostbyname(name)
    except OSError as exc:
        raise MachineError(f"cannot resolve host address {name!r}: {exc}") from None


def _route(shell: Shell, peer: str) -> tuple[str, int]:
    """(source address, device MTU) of ``shell``'s host toward ``peer``."""
    res = shell.run(["ip", "-j", "-4", "route", "get", peer], timeout=30)
    if not res.ok:
        raise MachineError(f"host {shell.name}: no route to {peer}: {res.err.strip()}")
    try:
        route = json.loads(res.out)[0]
        dev, src = route["dev"], route["prefsrc"]
    except (ValueError, LookupError) as exc:
        raise MachineError(f"host {shell.name}: cannot read the route to {peer}") from exc
    mtu = shell.run(["cat", f"/sys/class/net/{dev}/mtu"], timeout=30)
    try:
        return src, int(mtu.out.strip())
    except ValueError:
        raise MachineError(f"host {shell.name}: no MTU for {dev}") from None


def runtimes(hosts: list[Host], ssh_dir: Path, clock_skew: dict[str, float]
             ) -> list[HostRuntime]:
    """One runtime per host; checks every host answers (``true``) before anything is made."""
    shells = {h.name: for_host(h, ssh_dir) for h in hosts}
    for h in hosts:
        res = shells[h.name].run(["true"], timeout=60)
        if not res.ok:
            raise MachineError(f"host {h.name} ({h.ssh or 'this machine'}) does not answer: "
                               f"{(res.err or res.out).strip()[-300:]}")
    addr = {h.name: h.address or _resolve(h.ssh_address or "") for h in hosts if not h.local}
    out = []
    for h in hosts:
        peers = [a for n, a in addr.items() if n != h.name]
        if h.local and not peers:
            src, mtu = h.address or "127.0.0.1", 1500
        else:
            src, mtu = _route(shells[h.name], peers[0]) if peers else (addr[h.name], 1500)
            src = h.address or (src if h.local else addr[h.name])
        out.append(HostRuntime(h.name, shells[h.name], "machine", src, underlay=src,
                               underlay_mtu=mtu, local=h.local,
                               clock_skew=clock_skew.get(h.name, 0.0)))
    return out
