"""The Vagrantfile of one testbed, generated from its plan (pure: text in, text out).

Theory of operation: one Vagrant machine per guest (a ``hosts:`` entry, or a node), each with a
management NIC (eth0) and one NIC per interface of every node it runs, attached to the Linux
bridge of that interface's segment (made by the orchestrator before ``vagrant up``) and given a
MAC derived from the testbed, so the host agent finds the NIC and moves it into its node's
namespace. Nothing is synced (no NFS here) and nothing is provisioned by Vagrant: the project
goes in as wheels over SSH. Settings follow the measured notes
(``../shared/notes/vagrant-on-these-machines.md``):

* LXC: the management NIC sits on the testbed's own bridge with a fixed address
  (``ssh_ip_addr``: no DHCP, no lxc-net, no NAT) and a fixed MAC (measured: with LXC's
  random one, the host's ARP entry first learns a transient address and SSH waits ~45 s for
  it to expire); ``uts.name`` instead of ``vm.hostname``; a real-time budget for the
  guest's cpu cgroup (``cgroup.cpu.rt_runtime_us``, sized by ``rtbudget.py``), so a timed
  fault's interposer runs SCHED_FIFO there as on Mininet;
  every NIC through ``lxc.customize`` (vagrant-lxc's ``private_network`` needs pipework,
  which looks for LXC 4 cgroup names); the host-side veth of each segment NIC is named
  (``veth.pair``) so a link fault can take its carrier away;
* libvirt: ``driver`` ``kvm`` where KVM runs ordinary guests, else ``qemu`` (TCG); an
  isolated per-testbed management network (``mode none``: no NAT, no default route); segment
  NICs are ``type: bridge`` on our bridges, so a link fault is ``virsh domif-setlink``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Guest sizes: LXC shares the kernel; a TCG guest needs 512 MiB to boot Debian comfortably.
LIBVIRT_MEMORY_MIB = 512
BOOT_TIMEOUT = 900


@dataclass(frozen=True)
class Nic:
    """One segment NIC of a guest: its MAC, the bridge it joins, its host-side name."""

    mac: str
    bridge: str
    host_name: str


@dataclass(frozen=True)
class Guest:
    name: str
    machine: str            # the libvirt domain / LXC container name (testbed-tagged)
    mgmt_ip: str | None     # LXC: fixed management address; libvirt: None (DHCP)
    nics: tuple[Nic, ...] = field(default_factory=tuple)
    mgmt_mac: str = ""      # LXC: fixed, or the host's ARP entry outlives a re-created guest


@dataclass(frozen=True)
class Layout:
    """What every guest of one testbed shares."""

    testbed: str
    provider: str           # "lxc" or "libvirt"
    box: str
    mgmt_bridge: str = ""   # LXC
    mgmt_prefixlen: int = 24
    mgmt_network: str = ""  # libvirt network name
    mgmt_cidr: str = ""     # libvirt network, e.g. 10.214.7.0/24
    libvirt_driver: str = "qemu"
    domain_prefix: str = ""
    lxc_rt_us: int = 0      # LXC: each guest's cpu.rt_runtime_us (rtbudget.py); 0: none


def mac_for(testbed_hash: str, guest_index: int, nic_index: int) -> str:
    """A locally administered unicast MAC: 02:HH:HH:HH:guest:nic."""
    h = testbed_hash[:6]
    return f"02:{h[0:2]}:{h[2:4]}:{h[4:6]}:{guest_index:02x}:{nic_index:02x}"


def _q(text: str) -> str:
    """A Ruby double-quoted string literal (names are validated; this is belt and braces)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("#", "\\#") + '"'


def _lxc(layout: Layout, g: Guest) -> list[str]:
    c = [f"      lxc.container_name = {_q(g.machine)}",
         f"      lxc.ssh_ip_addr = {_q(g.mgmt_ip or '')}",
         f"      lxc.customize \"uts.name\", {_q(g.name)}",
         '      lxc.customize "net.0.type", "veth"',
         f"      lxc.customize \"net.0.link\", {_q(layout.mgmt_bridge)}",
         '      lxc.customize "net.0.flags", "up"',
         '      lxc.customize "net.0.name", "eth0"',
         f"      lxc.customize \"net.0.hwaddr\", {_q(g.mgmt_mac)}",
         f"      lxc.customize \"net.0.ipv4.address\", "
         f"{_q(f'{g.mgmt_ip}/{layout.mgmt_prefixlen}')}"]
    for k, nic in enumerate(g.nics, start=1):
        c += [f'      lxc.customize "net.{k}.type", "veth"',
              f"      lxc.customize \"net.{k}.link\", {_q(nic.bridge)}",
              f'      lxc.customize "net.{k}.flags", "up"',
              f'      lxc.customize "net.{k}.name", "eth{k}"',
              f"      lxc.customize \"net.{k}.hwaddr\", {_q(nic.mac)}",
              f"      lxc.customize \"net.{k}.veth.pair\", {_q(nic.host_name)}"]
    if layout.lxc_rt_us > 0:  # a timed fault's interposer may run SCHED_FIFO (rtbudget.py)
        c.append(f'      lxc.customize "cgroup.cpu.rt_runtime_us", "{layout.lxc_rt_us}"')
    return ["    m.vm.provider :lxc do |lxc|", *c, "    end"]


def _libvirt(layout: Layout, g: Guest) -> list[str]:
    lines = ["    m.vm.provider :libvirt do |lv|",
             f"      lv.driver = {_q(layout.libvirt_driver)}",
             f"      lv.memory = {LIBVIRT_MEMORY_MIB}",
             "      lv.cpus = 1",
             '      lv.graphics_type = "none"',
             '      lv.video_type = "none"',
             f"      lv.default_prefix = {_q(layout.domain_prefix)}",
             f"      lv.management_network_name = {_q(layout.mgmt_network)}",
             f"      lv.management_network_address = {_q(layout.mgmt_cidr)}",
             '      lv.management_network_mode = "none"',
             "    end"]
    for nic in g.nics:
        lines.append(f"    m.vm.network :public_network, dev: {_q(nic.bridge)}, "
                     f"mode: \"bridge\", type: \"bridge\", mac: {_q(nic.mac)}, "
                     "auto_config: false")
    return lines


def render(layout: Layout, guests: list[Guest]) -> str:
    """The whole Vagrantfile."""
    out = ["# Generated by lnet-testbed (testbed/vagrant/vagrantfile.py): do not edit.",
           f"# testbed {layout.testbed}, provider {layout.provider}",
           'Vagrant.configure("2") do |config|',
           f"  config.vm.box = {_q(layout.box)}",
           "  config.vm.box_check_update = false",
           '  config.vm.synced_folder ".", "/vagrant", disabled: true',
           f"  config.vm.boot_timeout = {BOOT_TIMEOUT}",
           "  config.ssh.insert_key = true"]
    for g in guests:
        out.append(f"  config.vm.define {_q(g.name)} do |m|")
        out += _lxc(layout, g) if layout.provider == "lxc" else _libvirt(layout, g)
        out.append("  end")
    out.append("end")
    return "\n".join(out) + "\n"
