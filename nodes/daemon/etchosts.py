"""A node's ``/etc/hosts`` view: what ``libcfs_ip_str2addr`` resolves host names against.

Theory of operation: real lnetctl resolves a NID's address that starts with a letter through
``getaddrinfo(name, AF_INET)`` (nidstrings.c ``libcfs_ip_str2addr_size``, reached from
``libcfs_strnid`` when liblnetconfig ``lustre_lnet_parse_nid_range`` expands ``ping``'s and
``discover``'s operands). An emulated node must never ask the machine's resolver (its
``/etc/hosts`` names machines outside the testbed, and DNS is traffic outside our namespaces),
and Mininet's namespaces share the machine's ``/etc/hosts``. So each testbed has its own hosts
file, ``RUNDIR/hosts`` in hosts(5) form, written at bring-up: one line per node, the address of
its first interface (``eth0``) and its name, as a cluster's ``/etc/hosts`` lists each host's
primary address; the simulator reads the same table from its plan. Nothing else resolves.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FILE = "hosts"


def hosts_text(entries: Iterable[tuple[str, str]]) -> str:
    """hosts(5) lines for (name, IPv4 address) pairs."""
    return "".join(f"{ip}\t{name}\n" for name, ip in entries)


def plan_hosts(nodes: Iterable[Any]) -> str:
    """The hosts file of a topology's nodes (``testbed.plan`` ``NodePlan``s): each node's name
    and its first interface's IPv4 address (a node with IPv4 on none has no line: host-name
    NIDs resolve ``AF_INET`` here)."""
    firsts = ((n.name, next((i for i in n.interfaces if i.ipv4), None)) for n in nodes)
    return hosts_text((name, str(i.ip)) for name, i in firsts if i is not None)


def lookup_text(text: str, name: str) -> str | None:
    """The first IPv4 address listed for ``name`` (a canonical name or alias, any case, as
    glibc's files backend compares them); None if there is none."""
    want = name.lower()
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) < 2 or want not in (f.lower() for f in fields[1:]):
            continue
        try:
            return str(ipaddress.IPv4Address(fields[0]))
        except ValueError:
            continue  # an IPv6 line: getaddrinfo was asked for AF_INET only
    return None


def lookup_file(path: Path, name: str) -> str | None:
    """``lookup_text`` on the file at ``path`` (missing or unreadable: nothing resolves)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return lookup_text(text, name)
