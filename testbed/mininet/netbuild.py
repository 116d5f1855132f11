"""The Mininet network of one testbed: bridges, hosts (network namespaces), veths; and its end.

Theory of operation: the supervisor (``testbed.mininet.supervisor``) calls ``build_network``
once; every bridge, host and veth is recorded in state.json *before* it is made (STYLE rule
9), so ``testbed clean`` can undo a half-built network. Inside a node the interfaces are eth0,
eth1, ... with the planned address, IPv6 off, ``arp_ignore=1``/``arp_announce=2``, no default
route. ``stop_mininet`` ends the Mininet host and switch shells (their namespaces go with
them) without ``Mininet.stop()``, whose waits on the shells' ptys are unbounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import TYPE_CHECKING

from testbed import clean, names, sh
from testbed.plan import NodePlan

if TYPE_CHECKING:
    from testbed.mininet.supervisor import Supervisor

NODE_SYSCTLS = (
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.conf.all.arp_ignore=1",
    "net.ipv4.conf.all.arp_announce=2",
)


class BringUpError(Exception):
    """Bring-up cannot continue; the message is the one-line reason shown to the user."""


def build_network(sup: Supervisor) -> None:
    """One LinuxBridge per segment, one host per node, one veth per interface (recorded in
    state.json before each is made), then every node's addresses checked."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("warning")
    # Mininet.init() would run fixLimits(), rewriting host-wide sysctls and rlimits.
    Mininet.inited = True
    net = Mininet(topo=None, controller=None, switch=LinuxBridge, build=False,
                  autoSetMacs=False, waitConnected=False)
    sup.net = net
    switches = {}
    for i, seg in enumerate(sup.plan.segments):
        br = names.bridge_name(sup.name, i)
        sup.record("bridge", name=br, segment=seg.name)
        switches[seg.name] = net.addSwitch(br, cls=LinuxBridge)
    for node in sup.plan.nodes:
        sup.record("host", node=node.name)
        host = net.addHost(node.name, ip=None, inNamespace=True)
        sup.hosts[node.name] = host
        sup.state["nodes"][node.name] = {"host_pid": host.pid, "interfaces": {},
                                          "nids": list(node.nids)}
        sup.save()
        sh.run_checked(["sysctl", "-q", "-w", *NODE_SYSCTLS], ns_pid=host.pid)
    seg_index = {s.name: i for i, s in enumerate(sup.plan.segments)}
    for j, node in enumerate(sup.plan.nodes):
        for iface in node.interfaces:
            port = names.port_name(sup.name, seg_index[iface.segment], j)
            sup.record("veth", name=port, node=node.name, iface=iface.name)
            sup.state["nodes"][node.name]["interfaces"][iface.name] = port
            net.addLink(sup.hosts[node.name], switches[iface.segment],
                        intfName1=iface.name, intfName2=port,
                        params1={"ip": f"{iface.ip}/{iface.prefixlen}"})
    sup.save()
    net.start()
    for node in sup.plan.nodes:
        check_addresses(sup, node)

def check_addresses(sup: Supervisor, node: NodePlan) -> None:
    """A node has exactly its planned IPv4 addresses, its links up, no default route."""
    pid = sup.hosts[node.name].pid
    sh.run_checked(["ip", "route", "flush", "exact", "0.0.0.0/0"], ns_pid=pid)
    out = sh.run_checked(["ip", "-4", "-o", "addr", "show"], ns_pid=pid).out
    have = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] != "lo":
            have.add((fields[1], fields[3]))
    want = {(i.name, f"{i.ip}/{i.prefixlen}") for i in node.interfaces}
    if have != want:
        raise BringUpError(f"node {node.name}: addresses {sorted(have)} != {sorted(want)}")


def stop_mininet(sup: Supervisor) -> None:
    """End the Mininet host and switch shells (their namespaces go with them)."""
    if sup.net is None:
        return
    shells = [n.shell for n in (*sup.net.hosts, *sup.net.switches)
              if getattr(n, "shell", None) is not None]
    for shell in shells:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(shell.pid, signal.SIGHUP)
    clean.terminate([s.pid for s in shells if s.poll() is None], grace=1.0)
    for shell in shells:
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.wait(timeout=0.5)
