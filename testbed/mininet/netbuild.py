"""The Mininet network of one testbed: bridges, hosts (network namespaces), veths; and its end.

Theory of operation: the supervisor (``testbed.mininet.supervisor``) calls ``build_network``
once; every bridge, host and veth is recorded in state.json *before* it is made (STYLE rule
9), so ``testbed clean`` can undo a half-built network. Independent steps run in parallel
(issue 13 item 4): the hosts start PARALLEL at a time, and so do the nodes'
configurations. A host is a Mininet ``Host`` whose namespaces are held by a pause process
(``PauseHost``: ``mnexec -cdnp sleep infinity``), not by Mininet's interactive bash on a pty
(issue 34: the shell's start and its prompt's reads were a third of a 300-node network's
time; nothing here talks to a host's shell, every command enters by its pid). Inside a node
the interfaces are eth0, eth1, ... with the planned address, IPv6 off,
``arp_ignore=1``/``arp_announce=2``, no default route. ``stop_mininet`` ends the Mininet
host and switch shells (their namespaces go with them) without ``Mininet.stop()``, whose
waits on the shells' ptys are unbounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from testbed import clean, names, sh
from testbed.plan import NodePlan

if TYPE_CHECKING:
    from testbed.mininet.supervisor import Supervisor

T = TypeVar("T")
R = TypeVar("R")
#: Per-node steps (commands in a node's namespace) run this many at a time.
PARALLEL = 8
NODE_SYSCTLS = (
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.conf.all.arp_ignore=1",
    "net.ipv4.conf.all.arp_announce=2",
)
#: per interface with a planned IPv6 address (after the ``all`` switch above)
IPV6_IF_SYSCTLS = ("addr_gen_mode=1", "accept_dad=0", "accept_ra=0", "disable_ipv6=0")


class BringUpError(Exception):
    """Bring-up cannot continue; the message is the one-line reason shown to the user."""


def _host_class() -> type:
    """``PauseHost``, made on first use (Mininet is imported only by the supervisor)."""
    from mininet.node import Host

    class PauseHost(Host):  # type: ignore[misc]
        """A Mininet host held by ``sleep infinity`` in new network and mount namespaces
        (``mnexec -n``, as Mininet's own shell), started by ``mnexec -cdnp``: ``-p`` prints
        the pid once the namespaces exist, which is when the host is ready. No pty, no
        bash: ``cmd()`` is not available (module doc)."""

        def startShell(self, mnopts: str | None = None) -> None:
            self.shell = self._popen(["mnexec", "-cdnp", "sleep", "infinity"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
            line = self.shell.stdout.readline()  # b"\x01PID\n" after unshare(2)
            self.shell.stdout.close()
            if line != f"\x01{self.shell.pid}\n".encode():
                raise BringUpError(f"host {self.name}: mnexec did not start "
                                   f"(rc {self.shell.poll()})")
            self.pid = self.shell.pid
            self.execed = False
            self.waiting = False

    return PauseHost


def build_network(sup: Supervisor) -> None:
    """One host per node (Mininet: a shell in new network and mount namespaces), one Linux
    bridge per segment, one veth per interface, each kind recorded in state.json, all at
    once, before any of it is made; then every node's sysctls, addresses and links.

    Only the hosts come from Mininet: its links and switches configure every interface and
    port with one command through a shell's pty each, one after the other; here the bridges
    and veths are one ``ip -batch`` in the root namespace and each node's addresses one
    ``ip -batch`` in its namespace, the hosts and the per-node steps PARALLEL at a time.
    """
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    setLogLevel("warning")
    # Mininet.init() would run fixLimits(), rewriting host-wide sysctls and rlimits.
    Mininet.inited = True
    net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False,
                  waitConnected=False)
    sup.net = net
    _record(sup, [{"kind": "host", "node": node.name} for node in sup.plan.nodes])
    host_cls = _host_class()
    hosts = in_parallel(lambda node: net.addHost(node.name, cls=host_cls, ip=None,
                                                 inNamespace=True), sup.plan.nodes)
    for node, host in zip(sup.plan.nodes, hosts, strict=True):
        sup.hosts[node.name] = host
        sup.state["nodes"][node.name] = {"host_pid": host.pid, "interfaces": {},
                                          "nids": list(node.nids)}
    sup.save()
    bridges = [names.bridge_name(sup.name, i) for i in range(len(sup.plan.segments))]
    _record(sup, [{"kind": "bridge", "name": br, "segment": seg.name}
                  for br, seg in zip(bridges, sup.plan.segments, strict=True)])
    seg_index = {s.name: i for i, s in enumerate(sup.plan.segments)}
    links = []
    for j, node in enumerate(sup.plan.nodes):
        for iface in node.interfaces:
            port = names.port_name(sup.name, seg_index[iface.segment], j)
            links.append((node, iface, port))
            sup.state["nodes"][node.name]["interfaces"][iface.name] = port
    _record(sup, [{"kind": "veth", "name": port, "node": node.name, "iface": iface.name}
                  for node, iface, port in links])
    batch = [f"link add name {br} type bridge\nlink set dev {br} up" for br in bridges]
    batch += [f"link add name {port} type veth peer name {iface.name} netns "
              f"{sup.hosts[node.name].pid}\n"
              f"link set dev {port} master {bridges[seg_index[iface.segment]]} up"
              for node, iface, port in links]
    sh.run_checked(["ip", "-batch", "-"], input="\n".join(batch) + "\n")
    in_parallel(lambda node: configure_node(sup, node), sup.plan.nodes)


def configure_node(sup: Supervisor, node: NodePlan) -> None:
    """Inside the node, with one command (a process spawned per step was most of the cost):
    sysctls, its planned addresses, links up, no default route; then check that it has
    exactly its planned addresses (the batch's last command lists them).

    Raises:
        BringUpError: the addresses are not the planned ones.
        sh.CommandError: a step failed.
    """
    lines = ["link set dev lo up"]
    sysctls = list(NODE_SYSCTLS)
    for i in node.interfaces:
        if i.ipv4:  # an IPv6-only network's interface has no IPv4 address (large NIDs)
            lines.append(f"addr add {i.ip}/{i.prefixlen} brd + dev {i.name}")
        if i.ip6 is not None:  # IPv6 only where the plan has it: no link-local, no DAD wait
            sysctls += [f"net.ipv6.conf.{i.name}.{k}" for k in IPV6_IF_SYSCTLS]
            lines.append(f"addr add {i.ip6}/{i.prefixlen6} dev {i.name} nodad")
        lines.append(f"link set dev {i.name} up")
    lines += ["route flush exact 0.0.0.0/0", "addr show"]
    # a constant script: the node's values reach it only as arguments and on stdin
    out = sh.run_checked(["sh", "-c", 'sysctl -q -w "$@" && exec ip -o -batch -', "sh",
                          *sysctls], ns_pid=sup.hosts[node.name].pid,
                         input="\n".join(lines) + "\n").out
    check_addresses(node, out)


def _record(sup: Supervisor, items: list[dict[str, object]]) -> None:
    """Record ``items`` as about to be created (STYLE rule 9), with one write of state.json:
    one write per object made bring-up quadratic in the node count (the file grows with it)."""
    sup.state["created"].extend(items)
    sup.save()


def in_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``fn`` on every item, PARALLEL at a time (each mostly waits on a process working in
    one node's namespace, independent of the others); results in order, the first failure
    raised."""
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(fn, items))


def check_addresses(node: NodePlan, out: str) -> None:
    """A node has exactly its planned IPv4 and IPv6 addresses (``out``: ``ip -o addr show``).

    Raises:
        BringUpError: it has not.
    """
    have = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] != "lo" and fields[2] in ("inet", "inet6"):
            have.add((fields[1], fields[3]))
    want = {(i.name, f"{i.ip}/{i.prefixlen}") for i in node.interfaces if i.ipv4}
    want |= {(i.name, f"{i.ip6}/{i.prefixlen6}") for i in node.interfaces if i.ip6 is not None}
    if have != want:
        raise BringUpError(f"node {node.name}: addresses {sorted(have)} != {sorted(want)}")


def stop_mininet(sup: Supervisor) -> None:
    """End the Mininet host and switch shells (their namespaces go with them), then delete
    the bridges and veths still present with one ``ip -force -batch`` (one ``ip link del``
    each was 2,000 processes for 1,000 two-rail nodes; ``clean.delete_interfaces`` after it
    finds nothing left, or deletes a failure's rest one by one)."""
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
    ours = set(names.existing_interfaces())
    gone = [n for n in clean.recorded_interfaces(sup.state) if n in ours]
    gone.sort(key=lambda n: (names.is_bridge(n), n))  # veths first, then their bridges
    if gone:
        sh.run(["ip", "-force", "-batch", "-"],
               input="".join(f"link del dev {n}\n" for n in gone))
