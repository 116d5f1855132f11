"""The Vagrant side of the ``vagrant`` backend: networks, guests, their links, their removal.

Theory of operation: ``prepare`` makes, in order and each recorded before it exists (STYLE
rule 9): the boxes (cached, ``boxes``), libvirtd when the provider is libvirt (``services``),
a management subnet reserved for this testbed, one Linux bridge per segment (the segment's
"private network": no address on the host side, nothing routed), the LXC management bridge,
the Vagrantfile (``vagrantfile``), and the guests (``vagrant up``). It returns one
:class:`~testbed.vagrant.hostset.HostRuntime` per guest, reached over SSH with the key Vagrant
generated for it. ``link`` takes a guest NIC's carrier away from outside the guest: the
host-side veth of an LXC NIC, or ``virsh domif-setlink`` for a VM. ``teardown`` runs
``vagrant destroy -f`` and then removes by name whatever is still there (containers,
domains, networks, bridges), releases libvirtd and the subnet.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed import names
from testbed.vagrant import boxes, rtbudget, services
from testbed.vagrant import vagrantfile as vf
from testbed.vagrant.hostset import HostRuntime
from testbed.vagrant.placement import Host
from testbed.vagrant.shell import SshShell

#: Management subnets: 10.213.N.0/24 for LXC, 10.214.N.0/24 for libvirt (N from the hash).
MGMT_PREFIX = {"lxc": "10.213", "libvirt": "10.214"}
SUBNETS = services.STATE_DIR / "subnets"
UP_TIMEOUT = {"lxc": 180.0, "libvirt": 1500.0}
DESTROY_TIMEOUT = 300.0
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]


class GuestError(Exception):
    """Vagrant could not make or reach a guest; one line with Vagrant's own words."""


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"],
                         capture_output=True, text=True, check=False).stdout
    nets = []
    for line in out.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable"):
            word = line.split()[1]
        with contextlib.suppress(ValueError):
            if word != "default":
                nets.append(ipaddress.ip_network(word, strict=False))
    return nets


def reserve_subnet(testbed: str, provider: str) -> ipaddress.IPv4Network:
    """A /24 no route uses and no other testbed reserved (O_EXCL file per subnet)."""
    SUBNETS.mkdir(parents=True, exist_ok=True, mode=0o700)
    used = _used_networks()
    start = int(names.short_hash(testbed), 16) % 250
    for k in range(250):
        n = (start + k) % 250 + 1
        net = ipaddress.ip_network(f"{MGMT_PREFIX[provider]}.{n}.0/24")
        if any(net.overlaps(u) for u in used):
            continue
        try:
            fd = os.open(SUBNETS / str(net.network_address), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, testbed.encode())
        os.close(fd)
        return net
    raise GuestError(f"no free management subnet in {MGMT_PREFIX[provider]}.0.0/16")


def release_subnet(net: str) -> None:
    (SUBNETS / net.split("/")[0]).unlink(missing_ok=True)


def vagrant(rdir: Path, *args: str, timeout: float, log: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    """One ``vagrant`` command in the testbed's environment; output appended to ``log`` as it
    comes (a guest that never boots shows where it stopped), and returned."""
    env = boxes.vagrant_env()
    env["VAGRANT_CWD"] = str(rdir / "vagrant")
    env["VAGRANT_DOTFILE_PATH"] = str(rdir / "vagrant" / ".vagrant")
    log = log or rdir / "vagrant.log"
    with open(log, "a") as f:
        f.write(f"$ vagrant {' '.join(args)}\n")
        f.flush()
        start = f.tell()
        try:
            proc = subprocess.run(["vagrant", *args], env=env, stdout=f,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout,
                                  check=False, cwd=str(rdir / "vagrant"))
            rc = proc.returncode
        except subprocess.TimeoutExpired:  # run() killed it (SIGKILL: vagrant ignores TERM)
            rc = -9
            f.write(f"\n(killed after {timeout:g}s)\n")
        f.write(f"rc={rc}\n")
    with open(log) as f:
        f.seek(start)
        out = f.read()
    return subprocess.CompletedProcess(["vagrant", *args], rc, out, "")


def make_bridge(name: str, address: str | None = None) -> None:
    for argv in (["ip", "link", "add", name, "type", "bridge", "stp_state", "0",
                  "forward_delay", "0"],
                 *([["ip", "addr", "add", address, "dev", name]] if address else []),
                 ["ip", "link", "set", name, "up"]):
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise GuestError(f"{' '.join(argv)}: {res.stderr.strip()}")


class Guests:
    """The guests of one testbed on this machine."""

    def __init__(self, plan: Any, hosts: list[Host], placement: dict[str, str], provider: str,
                 rdir: Path, record: Callable[..., None], progress: Callable[[str], None]
                 ) -> None:
        self.plan, self.hosts, self.placement = plan, hosts, placement
        self.provider, self.rdir, self.record, self.progress = provider, rdir, record, progress
        self.hash = names.short_hash(plan.name)
        self.prefix = f"lntb-{self.hash}-"
        self.log = rdir / "vagrant.log"
        self.nics: dict[tuple[str, str], vf.Nic] = {}
        self.machines = {h.name: f"{self.prefix}{h.name}" for h in hosts}

    def layout(self, box: str, net: ipaddress.IPv4Network) -> tuple[vf.Layout, list[vf.Guest]]:
        seg_index = {s.name: i for i, s in enumerate(self.plan.segments)}
        node_index = {n.name: j for j, n in enumerate(self.plan.nodes)}
        hosts_ip = list(net.hosts())
        guests = []
        for gi, h in enumerate(self.hosts):
            nics = []
            for node in [n for n in self.plan.nodes if self.placement[n.name] == h.name]:
                for iface in node.interfaces:
                    si = seg_index[iface.segment]
                    nic = vf.Nic(vf.mac_for(self.hash, gi, len(nics)),
                                 names.bridge_name(self.plan.name, si),
                                 names.port_name(self.plan.name, si, node_index[node.name]))
                    self.nics[(node.name, iface.name)] = nic
                    nics.append(nic)
            guests.append(vf.Guest(h.name, self.machines[h.name],
                                   str(hosts_ip[9 + gi]) if self.provider == "lxc" else None,
                                   tuple(nics), vf.mac_for(self.hash, gi, 0xFF)))
        lay = vf.Layout(self.plan.name, self.provider, box,
                        mgmt_bridge=f"tb{self.hash}m0", mgmt_prefixlen=net.prefixlen,
                        mgmt_network=f"{self.prefix}mgmt", mgmt_cidr=str(net),
                        libvirt_driver="kvm" if services.kvm_usable() else "qemu",
                        domain_prefix=self.prefix,
                        lxc_rt_us=rtbudget.guest_rt_us(len(guests))
                        if self.provider == "lxc" else 0)
        return lay, guests

    def prepare(self) -> list[HostRuntime]:
        self.progress("boxes (vagrant/build-box, cached)")
        box = str(boxes.ensure_boxes()["box"])
        if self.provider == "libvirt":
            self.record("service", name="libvirtd")
            services.acquire(self.plan.name)
        net = reserve_subnet(self.plan.name, self.provider)
        self.record("subnet", name=str(net))
        lay, guests = self.layout(box, net)
        used = {self.nics[(n.name, i.name)].bridge for n in self.plan.nodes
                for i in n.interfaces}
        for br in sorted(used):
            self.record("bridge", name=br)
            make_bridge(br)
        if self.provider == "lxc":
            self.record("bridge", name=lay.mgmt_bridge)
            make_bridge(lay.mgmt_bridge, f"{next(net.hosts())}/{net.prefixlen}")
        else:
            self.record("libvirt_network", name=lay.mgmt_network)
        vdir = self.rdir / "vagrant"
        vdir.mkdir(mode=0o700, exist_ok=True)
        (vdir / "Vagrantfile").write_text(vf.render(lay, guests))
        self.record("vagrant_env", name=str(vdir), provider=self.provider,
                    machines=sorted(self.machines.values()), prefix=self.prefix)
        self.progress(f"vagrant up --provider {self.provider}: "
                      + " ".join(g.name for g in guests))
        args = ["up", "--provider", self.provider, "--no-provision"]
        proc = vagrant(self.rdir, *args, timeout=UP_TIMEOUT[self.provider] * len(guests),
                       log=self.log)
        if proc.returncode != 0:
            raise GuestError(f"vagrant up failed (rc {proc.returncode}): "
                             f"{last_words(proc.stdout + proc.stderr)}")
        return self.runtimes(lay)

    def runtimes(self, lay: vf.Layout) -> list[HostRuntime]:
        configs = self._ssh_configs()
        out = []
        for h in self.hosts:
            c = configs.get(h.name)
            if c is None:
                raise GuestError(f"vagrant ssh-config has no entry for guest {h.name} "
                                 f"after {SSH_CONFIG_TRIES} tries")
            shell = SshShell(h.name, f"{c['user']}@{c['hostname']}", port=int(c["port"]),
                             key=c["identityfile"], user=c["user"],
                             ssh_dir=self.rdir / "ssh")
            macs = {k: nic.mac for k, nic in self.nics.items()
                    if self.placement[k[0]] == h.name}
            out.append(HostRuntime(h.name, shell, "guest", c["hostname"], macs=macs))
        return out

    def _ssh_configs(self) -> dict[str, dict[str, str]]:
        """Every guest's ssh settings from ``vagrant ssh-config``, asked again (bounded) while
        one is missing (``SSH_CONFIG_TRIES``)."""
        configs: dict[str, dict[str, str]] = {}
        for attempt in range(SSH_CONFIG_TRIES):
            if attempt:
                time.sleep(SSH_CONFIG_WAIT)
            proc = vagrant(self.rdir, "ssh-config", timeout=120, log=self.log)
            configs = parse_ssh_config(proc.stdout)
            if all(h.name in configs for h in self.hosts):
                return configs
            if proc.returncode != 0 and attempt == SSH_CONFIG_TRIES - 1:
                raise GuestError(f"vagrant ssh-config: {last_words(proc.stderr)}")
        return configs

    def link(self, node: str, iface: str, state: str) -> None:
        nic = self.nics[(node, iface)]
        if self.provider == "lxc":
            argv = ["ip", "link", "set", "dev", nic.host_name, state]
        else:
            argv = [*VIRSH, "domif-setlink", self.machines[self.placement[node]], nic.mac, state]
        res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        if res.returncode != 0:
            raise GuestError(f"{' '.join(argv)}: {res.stderr.strip()}")

    def host_port(self, node: str, iface: str) -> str:
        """The guest NIC's device on this machine (LXC: the host-side veth; libvirt: the
        domain's tap, from ``virsh domiflist``): its egress is the node's ingress."""
        nic = self.nics[(node, iface)]
        if self.provider == "lxc":
            return nic.host_name
        dom = self.machines[self.placement[node]]
        res = subprocess.run([*VIRSH, "domiflist", dom], capture_output=True, text=True,
                             check=False, timeout=60)
        for line in res.stdout.splitlines():
            words = line.split()
            if len(words) >= 5 and words[4].lower() == nic.mac.lower():
                return words[0]
        raise GuestError(f"virsh domiflist {dom}: no device with MAC {nic.mac} "
                         f"({res.stderr.strip() or 'not listed'})")

    def teardown(self) -> list[str]:
        return destroy_recorded(self.plan.name, self.rdir, _recorded(self.rdir))


def _recorded(rdir: Path) -> list[dict[str, Any]]:
    from testbed import runstate

    created = runstate.read_state(rdir).get("created", [])
    return [c for c in created if isinstance(c, dict)]


def destroy_recorded(testbed: str, rdir: Path, created: list[dict[str, Any]]) -> list[str]:
    """Undo what a vagrant testbed recorded, newest first; also used by ``testbed clean``."""
    removed: list[str] = []
    for item in reversed(created):
        kind, name = item.get("kind"), str(item.get("name", ""))
        if kind == "vagrant_env":
            removed += _destroy_env(rdir, item)
        elif kind == "bridge" and Path(f"/sys/class/net/{name}").exists():
            if subprocess.run(["ip", "link", "del", "dev", name], check=False,
                              capture_output=True).returncode == 0:
                removed.append(f"bridge {name}")
        elif kind == "libvirt_network":
            for verb in ("net-destroy", "net-undefine"):
                if subprocess.run([*VIRSH, verb, name], capture_output=True,
                                  check=False).returncode == 0 and verb == "net-undefine":
                    removed.append(f"libvirt network {name}")
        elif kind == "subnet":
            release_subnet(name)
        elif kind == "service":
            removed += services.release(testbed)
    return removed


def _destroy_env(rdir: Path, item: dict[str, Any]) -> list[str]:
    removed = []
    if (rdir / "vagrant" / "Vagrantfile").exists():
        proc = vagrant(rdir, "destroy", "-f", timeout=DESTROY_TIMEOUT, log=rdir / "vagrant.log")
        if proc.returncode == 0:
            removed.append(f"vagrant guests {' '.join(item.get('machines', []))}")
    machines = set(item.get("machines", []))
    if item.get("provider") == "libvirt":  # also any domain of ours vagrant was defining
        prefix = str(item.get("prefix") or "")
        machines |= {d for d in _virsh_names("list") if prefix and d.startswith(prefix)}
    for machine in sorted(machines):  # whatever vagrant left behind
        if item.get("provider") == "lxc":
            if subprocess.run(["lxc-info", "-n", machine], capture_output=True,
                              check=False).returncode == 0:
                subprocess.run(["lxc-stop", "-k", "-n", machine], capture_output=True,
                               check=False)
                subprocess.run(["lxc-destroy", "-f", "-n", machine], capture_output=True,
                               check=False)
                removed.append(f"container {machine}")
        elif subprocess.run([*VIRSH, "dominfo", machine], capture_output=True,
                            check=False).returncode == 0:
            subprocess.run([*VIRSH, "destroy", machine], capture_output=True, check=False)
            subprocess.run([*VIRSH, "undefine", machine, "--remove-all-storage"],
                           capture_output=True, check=False)
            removed.append(f"domain {machine}")
    return removed


def _virsh_names(what: str) -> list[str]:
    """Names of all domains (``list``) or networks (``net-list``) libvirtd knows."""
    res = subprocess.run([*VIRSH, what, "--all", "--name"], capture_output=True, text=True,
                         check=False)
    return res.stdout.split() if res.returncode == 0 else []


#: ``vagrant ssh-config`` asked this often, SSH_CONFIG_WAIT s apart, until every guest has an
#: entry: vagrant-libvirt lists a domain only once it has seen its DHCP lease, which can come
#: after ``vagrant up`` returned (CI, 2026-12-03: "no entry for guest c1" once in 4 runs).
SSH_CONFIG_TRIES, SSH_CONFIG_WAIT = 6, 5.0


def parse_ssh_config(text: str) -> dict[str, dict[str, str]]:
    """``vagrant ssh-config`` output -> host -> lower-case option -> value."""
    out: dict[str, dict[str, str]] = {}
    cur: dict[str, str] | None = None
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if len(words) != 2:
            continue
        key, value = words[0].lower(), words[1].strip().strip('"')
        if key == "host":
            cur = out.setdefault(value, {})
        elif cur is not None:
            cur[key] = value
    return out


def last_words(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not re.match(r"^(==>|\w+: )", ln)] or lines
    return " | ".join(lines[-4:])[-500:]
