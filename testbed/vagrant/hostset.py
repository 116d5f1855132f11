"""The node side of a testbed spread over hosts or guests, whatever made those hosts.

Theory of operation: both backends of this package end up with a list of :class:`HostRuntime`
(a name, a shell, whether NICs come from Vagrant or veths must be made, the management
address, the VXLAN underlay), and this module does the rest the same way for both:

1. install the project's wheels on every host but this machine (``deploy``);
2. per host, one agent ``setup`` request (``agent``): namespaces, interfaces, bridges and
   VXLANs (``vxlan`` plans them), one daemon per node with its CURVE keys (``curve``);
3. wait (bounded) for every daemon to answer ``hello`` over CURVE TCP;
4. configure LNet as a real cluster comes up (``testbed.bringup``, shared with every backend):
   every node's NIs and tunables first, then peers, routes, UDSP rules and imports, then wait
   for the routes whose gateway forwards;
5. later: requests to daemons, the event log merged on one clock (``eventmerge``), link
   changes on machines, signals and restarts; ``teardown`` undoes every host, each
   independently (one unreachable host does not keep the others up).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.daemon import etchosts
from nodes.daemon.client import DaemonUnreachable, request
from testbed import bringup, names
from testbed.base import Completed
from testbed.bringup import completed
from testbed.plan import Step, config_steps
from testbed.plan import request as step_request
from testbed.plan.verbs import ImportFile
from testbed.vagrant import agentnet, deploy, vxlan
from testbed.vagrant.curve import TestbedKeys
from testbed.vagrant.eventmerge import Merger
from testbed.vagrant.shell import Shell

HELLO_TIMEOUT = 60.0
#: Bound on the supervisor loop's own requests (events, hello): it also serves the CLI.
POLL_TIMEOUT = 2.0
CONFIG_TIMEOUT = 30.0
AGENT_TIMEOUT = 120.0
HOSTS_ROOT = "/run/lnet-testbed-hosts"
#: Where the wheels are installed on a host: not under /run, which is mounted noexec on
#: Debian (a wheel's extension module cannot be mapped from there; LXC happens not to care).
SITE_ROOT = "/var/lib/lnet-testbed-hosts"


class HostSetError(Exception):
    """A step on a host failed; one line naming the host."""


@dataclass
class HostRuntime:
    name: str
    shell: Shell
    kind: str                  # "guest" (NICs from Vagrant) or "machine" (veths + bridges)
    mgmt_address: str          # where daemons bind their CURVE control port
    underlay: str = ""         # VXLAN local address (machines)
    underlay_mtu: int = 1500
    local: bool = False        # this machine: no deploy, our interpreter and checkout
    clock_skew: float = 0.0    # test-only
    pythonpath: str = ""
    macs: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, iface) -> MAC


class HostSet:
    """The hosts of one testbed and its node daemons on them."""

    def __init__(self, plan: Any, placement: dict[str, str], hosts: list[HostRuntime],
                 keys: TestbedKeys, event: Callable[..., None],
                 daemon_args: list[str] | None = None) -> None:
        self.plan = plan
        self.daemon_args = daemon_args or []  # every daemon's (recorder, message trace)
        self.placement = placement
        self.hosts = {h.name: h for h in hosts}
        self.keys = keys
        self.event = event
        self.hash = names.short_hash(plan.name)
        self.endpoints: dict[str, str] = {}
        self.pids: dict[str, int] = {}
        self.merger = Merger()
        self.offsets: dict[str, int] = {h.name: 0 for h in hosts}

    def hdir(self, host: str) -> str:
        return f"{HOSTS_ROOT}/{self.plan.name}/{host}"

    def sitedir(self, host: str) -> str:
        return f"{SITE_ROOT}/{self.plan.name}/{host}"

    # ------------------------------------------------------------------ agent calls
    def agent(self, host: str, verb: str, *args: str, body: dict[str, Any] | None = None,
              timeout: float = AGENT_TIMEOUT) -> dict[str, Any]:
        h = self.hosts[host]
        python = sys.executable if h.local else "python3"
        argv = ["env", f"PYTHONPATH={h.pythonpath}", python, "-m", "testbed.vagrant.agent",
                verb, "--testbed", self.plan.name, "--host", host, *args]
        res = h.shell.run(argv, input=json.dumps(body) if body is not None else None,
                          timeout=timeout)
        try:
            reply = json.loads(res.out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HostSetError(f"host {host}: agent {verb}: rc {res.rc}: "
                               f"{(res.err or res.out).strip()[-400:]}") from None
        if not reply.get("ok"):
            raise HostSetError(f"host {host}: agent {verb}: {reply.get('error')}")
        return dict(reply)

    # ------------------------------------------------------------------ bring-up
    def install(self, wheels: list[Path]) -> None:
        for h in self.hosts.values():
            h.pythonpath = str(deploy.PROJECT_ROOT) if h.local else \
                deploy.install(h.shell, self.sitedir(h.name), wheels)

    def _node_spec(self, node: Any, host: HostRuntime, index: int,
                   segs: dict[str, vxlan.Segment]) -> dict[str, Any]:
        seg_index = {s.name: i for i, s in enumerate(self.plan.segments)}
        ifaces = []
        for iface in node.interfaces:
            spec = {"name": iface.name,
                    "mtu": segs[iface.segment].mtu if iface.segment in segs else vxlan.ETH_MTU}
            if iface.ipv4:  # an IPv6-only network's ``ip`` only numbers the host
                spec["address"] = f"{iface.ip}/{iface.prefixlen}"
            if iface.ip6 is not None:  # the segment's subnet6 (agentnet: no DAD)
                spec["address6"] = f"{iface.ip6}/{iface.prefixlen6}"
            if host.kind == "guest":
                spec["mac"] = host.macs[(node.name, iface.name)]
            else:
                spec["port"] = names.port_name(self.plan.name, seg_index[iface.segment], index)
                spec["bridge"] = segs[iface.segment].bridge
            ifaces.append(spec)
        return {"name": node.name, "netns": agentnet.netns_name(self.hash, node.name),
                "interfaces": ifaces, "keys": self.keys.node(node.name).files(),
                "args": [f"--lnet-param={k}={v}" for k, v in node.module_params]
                + self.daemon_args}

    def setup(self) -> None:
        """Agent ``setup`` on every host (segments, namespaces, daemons)."""
        machines = {n: h for n, h in self.hosts.items() if h.kind == "machine"}
        per_host = vxlan.host_segments(
            self.plan, {n: p for n, p in self.placement.items() if p in machines},
            {n: h.underlay for n, h in machines.items()},
            {n: h.underlay_mtu for n, h in machines.items()}) if machines else {}
        index = {n.name: j for j, n in enumerate(self.plan.nodes)}
        for name, h in self.hosts.items():
            segs = {s.name: s for s in per_host.get(name, [])}
            nodes = [n for n in self.plan.nodes if self.placement[n.name] == name]
            body = {"testbed": self.plan.name, "host": name, "kind": h.kind,
                    "mgmt_address": h.mgmt_address, "clock_skew": h.clock_skew,
                    "python": sys.executable if h.local else "/usr/bin/python3",
                    "pythonpath": h.pythonpath,
                    "segments": [_seg_json(s) for s in segs.values()],
                    "nodes": [self._node_spec(n, h, index[n.name], segs) for n in nodes],
                    "etchosts": etchosts.plan_hosts(self.plan.nodes)}
            reply = self.agent(name, "setup", body=body)
            for node, info in reply["daemons"].items():
                self.endpoints[node] = info["endpoint"]
                self.pids[node] = info["pid"]
                self.event("node_started", node=node, host=name, pid=info["pid"])
            self.merger.add_host(name)

    def call(self, node: str, msg: dict[str, Any], timeout: float = CONFIG_TIMEOUT
             ) -> dict[str, Any]:
        return request(self.endpoints[node], msg, timeout=timeout, curve=self.keys.client(node))

    def wait_hello(self, timeout: float = HELLO_TIMEOUT, nodes: list[str] | None = None
                   ) -> None:
        pending = list(nodes) if nodes is not None else [n.name for n in self.plan.nodes]
        deadline = time.monotonic() + timeout
        while pending:
            for node in list(pending):
                try:
                    reply = self.call(node, {"cmd": "hello"}, timeout=2.0)
                except DaemonUnreachable:
                    continue
                if reply.get("node") == node:
                    pending.remove(node)
            if pending and time.monotonic() > deadline:
                node = pending[0]
                raise HostSetError(f"daemon of node {node} on host {self.placement[node]} did "
                                   f"not answer hello within {timeout:g}s: "
                                   f"{self.log_tail(node)}")

    def log_tail(self, node: str, lines: int = 6) -> str:
        host = self.placement[node]
        res = self.hosts[host].shell.run(
            ["tail", "-n", str(lines), f"{self.hdir(host)}/nodes/{node}.log"], timeout=20)
        return " | ".join(res.out.strip().splitlines()) or "(no log)"

    def verb(self, node: str, argv: list[str]) -> Completed:
        """One lnetctl command on ``node`` (``testbed.bringup``'s ``verb``); an ``import``
        file written here is copied to the node's host first (its daemon reads it there)."""
        if argv[:1] == ["import"] and len(argv) >= 2 and Path(argv[-1]).is_file():
            argv = [*argv[:-1], self.put_file(node, Path(argv[-1]))]
        try:
            reply = self.call(node, {"cmd": "lnetctl", "argv": argv})
        except DaemonUnreachable as exc:
            raise HostSetError(f"node {node}: lnetctl {' '.join(argv)}: {exc}") from exc
        return Completed(int(reply.get("rc", 1)), str(reply.get("out", "")),
                         str(reply.get("err", "")))

    def send(self, node: str, step: Step) -> Completed:
        """One configuration step on ``node`` as a typed request (``testbed.bringup``'s
        ``send``); an import goes through ``verb`` (its file is copied to the node's host)."""
        if isinstance(step, ImportFile):
            return self.verb(node, step.argv())
        try:
            return completed(self.call(node, step_request(step)))
        except DaemonUnreachable as exc:
            raise HostSetError(f"node {node}: lnetctl {' '.join(step.argv())}: {exc}") from exc

    def configure(self, progress: Callable[[str], None] | None = None) -> list[str]:
        """Bring-up as a cluster comes up (``testbed.bringup``): every node's NIs, then peers,
        routes and UDSPs, then the wait for routes; returns the routes still down."""
        with tempfile.TemporaryDirectory() as tmp:
            bringup.configure(self.plan, self.send, Path(tmp), progress)
        return bringup.wait_routes(self.plan, self.verb, advance=time.sleep,
                                   now=time.monotonic)

    def reconfigure(self, node: str) -> None:
        """One node alone, both phases (a restarted daemon: the others are up already)."""
        with tempfile.TemporaryDirectory() as tmp:
            for step in config_steps(self.plan, self.plan.node(node), Path(tmp)):
                res = self.send(node, step)
                if res.rc != 0:
                    raise HostSetError(f"node {node}: lnetctl {' '.join(step.argv())} failed "
                                       f"with rc {res.rc}: "
                                       f"{' '.join((res.out + res.err).split())}")

    def put_file(self, node: str, local: Path) -> str:
        host = self.placement[node]
        remote = f"{self.hdir(host)}/nodes/{local.name}"
        res = self.hosts[host].shell.run(["sh", "-c", 'umask 077; cat > "$1"', "sh", remote],
                                         input=local.read_bytes(), timeout=30)
        if not res.ok:
            raise HostSetError(f"host {host}: cannot write {remote}: {res.err.strip()}")
        return remote

    # ------------------------------------------------------------------ running
    def poll_events(self, skip: frozenset[str] = frozenset()) -> None:
        """Read every host's new events through one of its live daemons (not those in
        ``skip``: stopped or killed by a fault; a short timeout, the loop must not stall)."""
        for host in self.hosts:
            for node in [n for n, h in self.placement.items() if h == host and n not in skip]:
                t0 = time.time()
                try:
                    reply = self.call(node, {"cmd": "events", "offset": self.offsets[host]},
                                      timeout=POLL_TIMEOUT)
                except DaemonUnreachable:
                    continue
                t1 = time.time()
                if reply.get("ok"):
                    self.offsets[host] = int(reply["offset"])
                    self.merger.batch(host, t0, float(reply["time"]), t1, reply["events"])
                    break

    def gather(self, dest: Path, skip: frozenset[str] = frozenset()) -> list[str]:
        """Every node's recorder and trace files (``NODE.rec``, ``NODE.trace.jsonl`` in its
        host's run directory, docs/events.md) copied into ``dest``, each daemon not in
        ``skip`` asked to write what it buffers first (``flush``), so that ``testbed report``
        and ``testbed check`` read them as on Mininet. Their times are their host's clock.
        Returns the files copied."""
        dest.mkdir(parents=True, exist_ok=True, mode=0o700)
        copied: list[str] = []
        for host, h in self.hosts.items():
            nodes = [n for n, p in self.placement.items() if p == host]
            for node in nodes:
                if node not in skip:
                    with contextlib.suppress(DaemonUnreachable):
                        self.call(node, {"cmd": "flush"}, timeout=POLL_TIMEOUT)
            wanted = {f"{n}{ext}" for n in nodes for ext in (".rec", ".trace.jsonl")}
            res = h.shell.run(["sh", "-c", 'd=$1; shift; tar -C "$d" --ignore-failed-read '
                               '-cf - "$@" 2>/dev/null | base64', "sh",
                               f"{self.hdir(host)}/nodes", *sorted(wanted)], timeout=120)
            try:
                with tarfile.open(fileobj=io.BytesIO(base64.b64decode(res.out)),
                                  mode="r:") as tar:
                    for m in tar.getmembers():
                        f = tar.extractfile(m) if m.isfile() and m.name in wanted else None
                        if f is not None:
                            (dest / m.name).write_bytes(f.read())
                            copied.append(m.name)
            except (ValueError, tarfile.TarError):
                continue  # nothing recorded there (or the host is gone)
        return copied

    def alive(self, skip: frozenset[str] = frozenset()) -> dict[str, bool]:
        """Which daemons answer ``hello`` (those in ``skip`` are not asked)."""
        out = {}
        for node in self.endpoints:
            if node in skip:
                continue
            try:
                out[node] = self.call(node, {"cmd": "hello"},
                                      timeout=POLL_TIMEOUT).get("node") == node
            except DaemonUnreachable:
                out[node] = False
        return out

    def teardown(self) -> list[str]:
        removed: list[str] = []
        for name, h in self.hosts.items():
            try:
                reply = self.agent(name, "teardown", timeout=60)
                removed += [f"{name}: {r}" for r in reply.get("removed", [])]
            except HostSetError as exc:
                removed.append(f"{name}: teardown failed: {exc}")
            h.shell.close()
        return removed


def _seg_json(s: vxlan.Segment) -> dict[str, Any]:
    out: dict[str, Any] = {"name": s.name, "bridge": s.bridge, "mtu": s.mtu}
    if s.vxlan is not None:
        out["vxlan"] = {"device": s.vxlan.device, "vni": s.vxlan.vni, "local": s.vxlan.local,
                        "remotes": list(s.vxlan.remotes), "port": s.vxlan.port}
    return out
