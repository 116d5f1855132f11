"""Where each node runs: hosts (or guests) and the placement of nodes on them (pure).

Theory of operation: a topology's ``hosts:`` section names the machines of a testbed and each
node may say ``host: NAME``; nodes that do not are spread automatically, each to the host with
the fewest nodes so far (ties: the first host in file order), after every explicit placement
has been counted. This is the whole rule, so a placement is predictable from the file.

Backends read hosts differently:

* ``vagrant``: every host is one guest (VM or container) on this machine, running its nodes
  each in its own network namespace; without ``hosts:`` every node gets a guest of its own.
  A host reached over SSH is refused there (a guest is created, never reached).
* ``hosts``: every host is a machine, this one (no ``ssh``) or one reached over SSH; nodes run
  in network namespaces on it; without ``hosts:`` everything runs on this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: ``user@address`` of an SSH host (the address: IPv4 or a DNS name).
SSH_RE = re.compile(r"^(?:([a-z_][a-z0-9_-]{0,31})@)?([A-Za-z0-9.-]{1,253})$")


class PlacementError(Exception):
    """A placement cannot be realised; the message is one line."""


@dataclass(frozen=True)
class Host:
    """One machine or guest of a testbed.

    ``ssh`` is ``[user@]address`` for a machine reached over SSH (None: this machine, or a
    guest the backend creates); ``address`` is its management/underlay address when it
    differs from the SSH address; ``port`` and ``key`` are SSH's port and identity file.
    """

    name: str
    ssh: str | None = None
    port: int = 22
    key: str | None = None
    address: str | None = None

    @property
    def local(self) -> bool:
        return self.ssh is None

    @property
    def user(self) -> str:
        m = SSH_RE.match(self.ssh or "")
        return (m.group(1) if m and m.group(1) else "root")

    @property
    def ssh_address(self) -> str | None:
        m = SSH_RE.match(self.ssh or "")
        return m.group(2) if m else None


def hosts_of(plan: Any) -> list[Host]:
    """The plan's hosts (``Plan.hosts``; absent on plans from before the schema had them)."""
    out = []
    for h in getattr(plan, "hosts", ()) or ():
        out.append(Host(h.name, getattr(h, "ssh", None), getattr(h, "port", 22),
                        getattr(h, "key", None), getattr(h, "address", None)))
    return out


def spread(nodes: list[str], hosts: list[str], explicit: dict[str, str]) -> dict[str, str]:
    """node -> host: explicit placements kept, the rest to the least-loaded host in order.

    Raises:
        PlacementError: an explicit host is unknown, or there is no host for a node.
    """
    load = dict.fromkeys(hosts, 0)
    out: dict[str, str] = {}
    for node, host in explicit.items():
        if host not in load:
            raise PlacementError(f"node {node}: unknown host {host!r} "
                                 f"(hosts: {', '.join(hosts) or 'none'})")
        out[node] = host
        load[host] += 1
    for node in nodes:
        if node in out:
            continue
        if not hosts:
            raise PlacementError(f"node {node}: no host to place it on")
        host = min(hosts, key=lambda h: (load[h], hosts.index(h)))
        out[node] = host
        load[host] += 1
    return {n: out[n] for n in nodes}


def place(plan: Any, backend: str) -> tuple[list[Host], dict[str, str]]:
    """The hosts of ``plan`` for ``backend`` ("vagrant" or "hosts") and node -> host.

    Raises:
        PlacementError: e.g. an SSH host on the vagrant backend.
    """
    nodes = [n.name for n in plan.nodes]
    explicit = {n.name: n.host for n in plan.nodes if getattr(n, "host", None)}
    hosts = hosts_of(plan)
    if backend == "vagrant":
        for h in hosts:
            if not h.local:
                raise PlacementError(f"host {h.name} is reached over SSH: the vagrant backend "
                                     "creates its guests on this machine (use --backend hosts "
                                     "for machines reached over SSH)")
        if not hosts:  # one guest per node, named after it
            hosts = [Host(n) for n in nodes]
            explicit = {n: n for n in nodes}
    elif not hosts:
        hosts = [Host("local")]
    if backend == "hosts" and sum(h.local for h in hosts) > 1:
        raise PlacementError("only one host may be this machine (no ssh:): "
                             + ", ".join(h.name for h in hosts if h.local))
    placement = spread(nodes, [h.name for h in hosts], explicit)
    used = set(placement.values())
    return [h for h in hosts if h.name in used], placement
