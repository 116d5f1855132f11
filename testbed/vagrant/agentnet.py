"""The host agent's network plumbing: node namespaces, their interfaces, bridges and VXLANs.

Theory of operation: every node of a host lives in its own network namespace (``ip netns``,
named ``lntb-<hash>-<node>``) holding exactly its planned interfaces, named as the plan names
them (eth0, eth1...), its addresses, no default route, IPv6 off but on the interfaces the plan
gives an IPv6 address (``address6``: no link-local address, no DAD, no router advertisements,
as ``testbed/mininet/netbuild.py`` does; an IPv6-only network's interface has no IPv4
``address``) and Mininet's ARP sysctls (``arp_ignore=1``/``arp_announce=2``: several
interfaces on one subnet answer only for themselves, as LNet's Multi-Rail needs). An
interface comes from one of two places:

* a guest NIC (Vagrant private network) found by its MAC and *moved* into the namespace: the
  host side of the guest (libvirt's ``domif-setlink``, LXC's veth) then controls the carrier
  the node sees;
* on a machine, a veth pair: the node end in the namespace, the other end on the segment's
  bridge (``tb<hash>s<i>p<j>``); a VXLAN joins the bridge when the segment spans hosts.

Every object is appended to the agent's record (``record``) before it is made (STYLE rule 9).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

NODE_SYSCTLS = ("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
#: per interface with a planned IPv6 address (after the ``all`` switch above)
IPV6_IF_SYSCTLS = ("addr_gen_mode=1", "accept_dad=0", "accept_ra=0", "disable_ipv6=0")
SYS_NET = Path("/sys/class/net")

Record = Callable[..., None]


class AgentError(Exception):
    """A host step failed; the message is one line with the command and its output."""


def sh(*argv: str, check: bool = True, timeout: float = 30.0) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False)
    if check and proc.returncode != 0:
        raise AgentError(f"{' '.join(argv)}: rc {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def netns_name(testbed_hash: str, node: str) -> str:
    return f"lntb-{testbed_hash}-{node}"


def iface_by_mac(mac: str) -> str | None:
    """The root-namespace interface with hardware address ``mac`` (a guest NIC)."""
    for dev in sorted(SYS_NET.iterdir()):
        try:
            if (dev / "address").read_text().strip().lower() == mac.lower():
                return dev.name
        except OSError:
            continue
    return None


def make_segment(seg: dict[str, Any], record: Record) -> None:
    """Bridge of a segment on a machine host, and its VXLAN if the segment spans hosts."""
    br, mtu = seg["bridge"], str(seg["mtu"])
    record("bridge", name=br)
    sh("ip", "link", "add", br, "mtu", mtu, "type", "bridge", "stp_state", "0",
       "forward_delay", "0")
    sh("ip", "link", "set", br, "up")
    vx = seg.get("vxlan")
    if vx:
        record("vxlan", name=vx["device"])
        sh("ip", "link", "add", vx["device"], "mtu", mtu, "type", "vxlan", "id",
           str(vx["vni"]), "local", vx["local"], "dstport", str(vx["port"]))
        for remote in vx["remotes"]:  # unicast flooding: one all-zero entry per remote host
            sh("bridge", "fdb", "append", "00:00:00:00:00:00", "dev", vx["device"], "dst",
               remote)
        sh("ip", "link", "set", vx["device"], "master", br, "up")


def make_node(node: dict[str, Any], guest: bool, record: Record) -> None:
    """The node's namespace with its interfaces up and addressed."""
    ns = node["netns"]
    record("netns", name=ns, node=node["name"])
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", *NODE_SYSCTLS)
    for k, iface in enumerate(node["interfaces"]):
        if guest:
            dev = iface_by_mac(iface["mac"])
            if dev is None:
                raise AgentError(f"node {node['name']}: no guest NIC with MAC {iface['mac']} "
                                 f"for {iface['name']}")
            sh("ip", "link", "set", "dev", dev, "down")
            sh("ip", "link", "set", "dev", dev, "netns", ns)
            sh("ip", "-n", ns, "link", "set", "dev", dev, "name", f"lntbmv{k}")
        else:
            port = iface["port"]
            record("veth", name=port, node=node["name"], iface=iface["name"])
            sh("ip", "link", "add", port, "mtu", str(iface["mtu"]), "type", "veth", "peer",
               "name", f"lntbmv{k}", "mtu", str(iface["mtu"]), "netns", ns)
            sh("ip", "link", "set", port, "master", iface["bridge"], "up")
    for k, iface in enumerate(node["interfaces"]):  # final names once all are inside
        dev = iface["name"]
        sh("ip", "-n", ns, "link", "set", "dev", f"lntbmv{k}", "name", dev)
        sh("ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(iface["mtu"]))
        if iface.get("address"):  # none on an IPv6-only network (large NIDs)
            sh("ip", "-n", ns, "addr", "add", iface["address"], "dev", dev)
        if iface.get("address6"):  # before the link is up: no link-local, no DAD wait
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
               *(f"net.ipv6.conf.{dev}.{kv}" for kv in IPV6_IF_SYSCTLS))
            sh("ip", "-n", ns, "addr", "add", iface["address6"], "dev", dev, "nodad")
        sh("ip", "-n", ns, "link", "set", "dev", dev, "up")


def carriers(ns: str) -> dict[str, bool]:
    """Interface -> carrier (LOWER_UP) inside namespace ``ns``."""
    out: dict[str, bool] = {}
    for line in sh("ip", "-n", ns, "-o", "link", "show", check=False).splitlines():
        parts = line.split(":", 2)
        if len(parts) < 3:
            continue
        name = parts[1].strip().split("@", 1)[0]
        if name != "lo":
            out[name] = "LOWER_UP" in parts[2].split(">", 1)[0]
    return out


def remove(created: list[dict[str, Any]]) -> list[str]:
    """Undo recorded network objects, newest first (namespaces take their ends with them)."""
    removed = []
    for item in reversed(created):
        kind, name = item.get("kind"), str(item.get("name"))
        if kind == "netns":
            pids = sh("ip", "netns", "pids", name, check=False).split()
            for pid in pids:  # anything still inside is ours (stray exec children)
                subprocess.run(["kill", "-9", pid], capture_output=True, check=False)
            if subprocess.run(["ip", "netns", "del", name], capture_output=True,
                              check=False).returncode == 0:
                removed.append(f"netns {name}")
        elif kind in ("bridge", "vxlan", "veth") and (SYS_NET / name).exists() and \
                subprocess.run(["ip", "link", "del", "dev", name], capture_output=True,
                               check=False).returncode == 0:
            removed.append(f"{kind} {name}")
    return removed
