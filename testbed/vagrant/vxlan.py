"""Segments that span hosts: one VXLAN per segment, its VNI allocated here, unicast (pure).

Theory of operation (the netlab multi-server pattern, issue 15 item 4): the orchestrator owns
VNI allocation, so two hosts never disagree. On each host a segment is a Linux bridge; when
the segment has nodes on more than one host, each of those hosts adds one VXLAN device to
that bridge with the segment's VNI and one static all-zero FDB entry per *other* host
(``bridge fdb append 00:00:00:00:00:00 dev VX dst REMOTE``): broadcast and unknown unicast
go to every remote host by unicast, no multicast group is needed on the underlay (clouds and
most labs forbid it), and the kernel learns remote MACs from then on. VXLAN adds 50 bytes
(outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8), so every interface of a spanning segment
(bridge, VXLAN, veths and the nodes' own) gets the smallest underlay MTU minus 50, and LNet's
TCP connections never depend on fragmentation.

VNIs: ``base + segment index`` where ``base`` comes from the testbed name's hash, so two
testbeds sharing hosts (same UDP port 4789) get disjoint VNI ranges; the device refuses a
VNI already used on that port, which the agent reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed import names

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
ETH_MTU = 1500
#: Segments per testbed a VNI range holds.
VNI_BLOCK = 1024
VNI_MAX = (1 << 24) - 1


@dataclass(frozen=True)
class Segment:
    """One segment as a given host builds it."""

    name: str
    index: int
    bridge: str
    mtu: int
    vxlan: Vxlan | None


@dataclass(frozen=True)
class Vxlan:
    device: str
    vni: int
    local: str
    remotes: tuple[str, ...]
    port: int = VXLAN_PORT

    def argv(self) -> list[list[str]]:
        """The commands that create it (before it joins its bridge)."""
        cmds = [["ip", "link", "add", self.device, "type", "vxlan", "id", str(self.vni),
                 "local", self.local, "dstport", str(self.port)]]
        cmds += [["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", self.device,
                  "dst", remote] for remote in self.remotes]
        return cmds


def vni_base(testbed: str) -> int:
    return 1 + (int(names.short_hash(testbed), 16) % ((VNI_MAX - VNI_BLOCK) // VNI_BLOCK)) \
        * VNI_BLOCK


def vxlan_name(testbed: str, index: int) -> str:
    """``tb<hash>s<i>x``: the VXLAN device of segment ``i`` (beside bridge ``tb<hash>s<i>``)."""
    return f"{names.bridge_name(testbed, index)}x"


def segment_hosts(plan: Any, placement: dict[str, str]) -> dict[str, list[str]]:
    """segment -> hosts with a node on it, in first-use order."""
    out: dict[str, list[str]] = {s.name: [] for s in plan.segments}
    for node in plan.nodes:
        host = placement[node.name]
        for iface in node.interfaces:
            if host not in out[iface.segment]:
                out[iface.segment].append(host)
    return out


def host_segments(plan: Any, placement: dict[str, str], underlay: dict[str, str],
                  underlay_mtu: dict[str, int]) -> dict[str, list[Segment]]:
    """host -> the segments it builds (bridge, MTU, VXLAN to the other hosts if spanning).

    ``underlay``: host -> its underlay address; ``underlay_mtu``: host -> that interface's MTU.
    """
    spans = segment_hosts(plan, placement)
    base = vni_base(plan.name)
    out: dict[str, list[Segment]] = {h: [] for h in underlay}
    for index, seg in enumerate(plan.segments):
        hosts = spans[seg.name]
        spanning = len(hosts) > 1
        mtu = min(underlay_mtu[h] for h in hosts) - VXLAN_OVERHEAD if spanning else ETH_MTU
        for host in hosts:
            vx = None
            if spanning:
                vx = Vxlan(vxlan_name(plan.name, index), base + index, underlay[host],
                           tuple(underlay[h] for h in hosts if h != host))
            out[host].append(Segment(seg.name, index, names.bridge_name(plan.name, index),
                                     mtu, vx))
    return out
