"""The ``hosts:`` section and each node's ``host:`` (where nodes run; issue 15).

Schema::

    hosts:                       # optional: the machines (or guests) of the testbed
      h1: {}                     # this machine; on the vagrant backend: one guest
      h2: {ssh: root@192.0.2.12} # a machine reached over SSH ([user@]address)
      h3: {ssh: ops@h3.lab, port: 2222, key: ~/.ssh/lab, address: 192.0.2.13}
    nodes:
      c1: {interfaces: [lan0], host: h1}   # explicit placement
      s1: {interfaces: [lan0]}             # placed by the backend (least-loaded host)

``address`` is the host's management/underlay address (VXLAN, control ports) when it is not
the SSH one. Backends read this (``testbed/vagrant/placement.py``); Mininet and the sim
ignore it (one box, one process).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace
from typing import Any

from nodes.echo import shown
from testbed.plan.model import HostPlan, NodePlan
from testbed.plan.schema import HOST_KEYS
from testbed.plan.yamlload import Doc, LocDict, join_field, kind_name

#: ``[user@]address``: a login name, then an IPv4 address or a DNS name.
SSH_RE = re.compile(r"^(?:[a-z_][a-z0-9_-]{0,31}@)?[A-Za-z0-9.-]{1,253}$")


def parse_hosts(doc: Doc, value: Any, line: int) -> tuple[HostPlan, ...]:
    m = doc.mapping(value, line, "hosts")
    if not m:
        doc.fail(line, "hosts", "at least one host is required (or leave hosts: out)")
    out = []
    for name, body in m.items():
        fld = join_field("hosts", name)
        doc.name(name, m.key_lines[name], fld, "host")
        spec = doc.mapping(body if body is not None else _empty(m, name), m.vline(name), fld,
                           HOST_KEYS)
        ssh = key = address = None
        port = 22
        if "ssh" in spec:
            ssh = doc.string(spec["ssh"], spec.vline("ssh"), f"{fld}.ssh")
            if not SSH_RE.fullmatch(ssh):
                doc.fail(spec.vline("ssh"), f"{fld}.ssh", f"bad SSH target {shown(ssh)} "
                         "(expected [user@]address)")
        if "port" in spec:
            port = spec["port"]
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                doc.fail(spec.vline("port"), f"{fld}.port",
                         f"expected a TCP port 1..65535, got {shown(port)}")
        if "key" in spec:
            key = doc.string(spec["key"], spec.vline("key"), f"{fld}.key")
        if "address" in spec:
            text = doc.string(spec["address"], spec.vline("address"), f"{fld}.address")
            try:
                address = str(ipaddress.IPv4Address(text))
            except ValueError:
                doc.fail(spec.vline("address"), f"{fld}.address",
                         f"bad IPv4 address {shown(text)}")
        for k in ("port", "key"):
            if k in spec and ssh is None:
                doc.fail(spec.vline(k), f"{fld}.{k}", f"{k} needs ssh (this host is local)")
        out.append(HostPlan(name, ssh, port, key, address))
    return tuple(out)


def _empty(m: LocDict, name: Any) -> LocDict:
    empty = LocDict()
    empty.line, empty.key_lines, empty.value_lines, empty.duplicate = m.vline(name), {}, {}, None
    return empty


def place_nodes(doc: Doc, nodes_map: LocDict, plans: tuple[NodePlan, ...],
                hosts: tuple[HostPlan, ...]) -> tuple[NodePlan, ...]:
    """Each node's ``host:``, checked against ``hosts:``."""
    known = [h.name for h in hosts]
    out = []
    for plan in plans:
        spec = nodes_map[plan.name]
        if isinstance(spec, LocDict) and "host" in spec:
            fld = f"{join_field('nodes', plan.name)}.host"
            host = spec["host"]
            if not isinstance(host, str):
                doc.fail(spec.vline("host"), fld, f"expected a host name, got {kind_name(host)}")
            if host not in known:
                doc.fail(spec.vline("host"), fld, f"unknown host {shown(host)} (hosts: "
                         f"{', '.join(known) or 'none: add a hosts: section'})")
            plan = replace(plan, host=host)
        out.append(plan)
    return tuple(out)
