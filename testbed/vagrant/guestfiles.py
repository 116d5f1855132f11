"""What the boxes' root file system gets on top of debootstrap (used by ``boxes``).

Each setting answers a measured problem (``../shared/notes/vagrant-on-these-machines.md``):

* host keys: only ed25519, made at first boot (an RSA host key took 50 s under TCG), so every
  guest has its own and none is baked into the box;
* ``auto eth0``, never ``allow-hotplug`` (no udev event fires in a container); in LXC eth0 is
  ``manual`` because LXC configures it before init, in VMs it is DHCP on Vagrant's management
  network; the other NICs are left alone (the testbed agent moves them into node namespaces);
* no ``/etc/hostname`` in the LXC flavour (``uts.name`` sets it; ``vm.hostname`` breaks
  vagrant-lxc); an empty machine-id (each guest makes its own);
* apt timers and fstrim/e2scrub masked: a guest must not wake up and compete for two cores;
* ``/etc/pip.conf`` says ``no-index``: wheels come from the checkout, guests reach no registry.

The text of this module is part of the box recipe (``fingerprint``): editing it builds new boxes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

INTERFACES = {
    "lxc": "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet manual\n",
    "libvirt": "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n",
}
FSTAB = {"lxc": "", "libvirt": "LABEL=vagrantroot / ext4 errors=remount-ro 0 1\n"}
SUDOERS = "vagrant ALL=(ALL) NOPASSWD:ALL\nDefaults:vagrant !requiretty\n"
SSHD_CONF = ("HostKey /etc/ssh/ssh_host_ed25519_key\nUseDNS no\n"
             "PasswordAuthentication no\nKbdInteractiveAuthentication no\n")
HOSTKEY_UNIT = """[Unit]
Description=ed25519 SSH host key of this guest (first boot)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key

[Install]
WantedBy=multi-user.target
"""
PIP_CONF = "[global]\nno-index = true\nbreak-system-packages = true\n"
MASKED = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer",
          "e2scrub_reap.service", "fstrim.timer", "man-db.timer")
#: The Vagrantfile inside each box: no synced folders (no NFS here), virtio disks.
BOX_VAGRANTFILE = """Vagrant.configure("2") do |config|
  config.vm.synced_folder ".", "/vagrant", disabled: true
end
"""


def fingerprint() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)


def _chroot(root: Path, *argv: str) -> None:
    subprocess.run(["chroot", str(root), *argv], check=True, capture_output=True, timeout=120)


def configure_root(root: Path, vagrant_pubkey: str) -> None:
    """Everything both flavours share (runs once on the debootstrap root)."""
    _chroot(root, "useradd", "-m", "-s", "/bin/bash", "vagrant")
    ssh = root / "home/vagrant/.ssh"
    _write(ssh / "authorized_keys", vagrant_pubkey + "\n", 0o600)
    _chroot(root, "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh")
    os.chmod(ssh, 0o700)
    _write(root / "etc/sudoers.d/vagrant", SUDOERS, 0o440)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    _write(root / "etc/ssh/sshd_config.d/lnet-testbed.conf", SSHD_CONF)
    unit = root / "etc/systemd/system/lnet-hostkeys.service"
    _write(unit, HOSTKEY_UNIT)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / unit.name).unlink(missing_ok=True)
    (wants / unit.name).symlink_to("/etc/systemd/system/lnet-hostkeys.service")
    sysd = root / "etc/systemd/system"
    for name in MASKED:
        (sysd / name).unlink(missing_ok=True)
        (sysd / name).symlink_to("/dev/null")
    _write(root / "etc/machine-id", "", 0o444)
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    _write(root / "etc/pip.conf", PIP_CONF)
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    lists = root / "var/lib/apt/lists"
    for f in lists.glob("*_*"):
        f.unlink()


def set_flavour(root: Path, flavour: str) -> None:
    """The few files that differ between the LXC and the libvirt box."""
    _write(root / "etc/network/interfaces", INTERFACES[flavour])
    _write(root / "etc/fstab", FSTAB[flavour])
    hostname = root / "etc/hostname"
    if flavour == "lxc":
        hostname.unlink(missing_ok=True)
    else:
        _write(hostname, "lnet-guest\n")


def kernel_files(root: Path) -> tuple[str, str]:
    """``/boot/vmlinuz-V`` and ``/boot/initrd.img-V`` of the (only) installed kernel."""
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise FileNotFoundError(f"no kernel in {root}/boot")
    version = kernels[-1].name.removeprefix("vmlinuz-")
    return f"/boot/vmlinuz-{version}", f"/boot/initrd.img-{version}"


def extlinux_conf(kernel: str, initrd: str, label: str) -> str:
    return (f"DEFAULT linux\nTIMEOUT 0\nPROMPT 0\nLABEL linux\n  LINUX {kernel}\n"
            f"  INITRD {initrd}\n  APPEND root=LABEL={label} ro console=ttyS0 "
            "net.ifnames=0 biosdevname=0\n")
