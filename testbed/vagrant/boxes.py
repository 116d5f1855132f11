"""``vagrant/build-box``: a libvirt box and an LXC box from one debootstrap root, cached.

Theory of operation (measured recipe: ``../shared/notes/vagrant-on-these-machines.md``):

1. ``debootstrap --variant=minbase`` of Debian bookworm from the mirror apt already uses
   (``/etc/apt/sources.list*``): nothing else is reached, and guests reach no registry later.
   The root carries what a node needs at run time from Debian (python3, python3-zmq,
   python3-yaml, python3-scapy, iproute2, iptables, libnetfilter-queue1) and what Vagrant
   needs (systemd, sshd, sudo, the ``vagrant`` user with Vagrant's insecure key, replaced by a
   fresh key at the first ``vagrant up``). The project and netfilterqueue are *not* in the
   box: they change with the checkout and go in as wheels at bring-up (``wheels``).
2. The LXC box: the root as a gzip tarball made with ``--xattrs`` (``ping``'s file capability),
   without kernel, modules and firmware; ``template-opts --strip-components 1`` (vagrant-lxc's
   template strips 2 by default); eth0 ``manual`` (LXC sets its address before init; no DHCP).
3. The libvirt box: a 4 GiB disk image, one MBR partition through an *offset* loop device (the
   host kernel has no MSDOS partition support, so ``losetup -P`` gives no partitions), ext4
   without 64bit, SYSLINUX (``extlinux``), eth0 by DHCP on Vagrant's management network.

Everything is cached under ``/var/cache/lnet-testbed/boxes/<key>/`` where ``<key>`` hashes the
recipe (:data:`RECIPE`): a second run with the same recipe does nothing; a changed recipe builds
a new pair beside the old. A lock file serialises concurrent builds. Each step writes to a
temporary name and renames, so an interrupted build resumes cleanly.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.vagrant import guestfiles

CACHE_ROOT = Path(os.environ.get("LNET_TESTBED_CACHE", "/var/cache/lnet-testbed"))
SUITE = "bookworm"
#: Debian packages of every guest (Depends only: debootstrap installs no Recommends).
PACKAGES = (
    "systemd-sysv", "dbus", "openssh-server", "sudo", "ifupdown", "isc-dhcp-client",
    "iproute2", "netbase", "procps", "iputils-ping", "kmod", "iptables",
    "python3", "python3-zmq", "python3-yaml", "python3-scapy", "python3-pip",
    "python3-cffi-backend",  # provides the virtual python3-cffi-backend-api-* python3-zmq
    #                          needs: debootstrap resolves no virtual package itself
    "libnetfilter-queue1",  # run-time library of the netfilterqueue wheel
    "libnss-myhostname",  # the guest resolves its own name (sudo: "unable to resolve host")
)
#: Only in the libvirt box (LXC guests share the host's kernel).
KERNEL_PACKAGES = ("linux-image-amd64",)
#: Bump when a step below changes in a way the other fields do not show.
RECIPE_VERSION = 3
IMAGE_SIZE_GIB = 4
ROOT_LABEL = "vagrantroot"
VAGRANT_PUB = Path("/usr/share/rubygems-integration/all/gems")
MBR_BIN = Path("/usr/lib/EXTLINUX/mbr.bin")
#: Left out of the LXC tarball: kernel, modules, firmware, docs (a container copies it whole).
LXC_EXCLUDES = ("./boot", "./usr/lib/modules", "./usr/lib/firmware", "./usr/share/doc",
                "./usr/share/man", "./usr/share/locale", "./var/cache/apt/archives")


class BoxError(Exception):
    """A build step failed; the message is one line naming the step."""


def log(text: str) -> None:
    print(f"build-box: {text}", file=sys.stderr, flush=True)


def run(argv: list[str], *, timeout: float = 1800.0, **kw: object) -> str:
    """Run one build command; raise BoxError with its output tail on failure."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False, **kw)  # type: ignore[call-overload]
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BoxError(f"{argv[0]}: {exc}") from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        raise BoxError(f"{' '.join(argv[:3])}... failed with rc {proc.returncode}: {tail}")
    return str(proc.stdout)


# ----------------------------------------------------------------------------- the recipe


def apt_mirror(paths: list[Path] | None = None) -> str:
    """The Debian mirror apt uses for ``SUITE`` main (one-line and deb822 sources)."""
    if paths is None:
        base = Path("/etc/apt")
        paths = [base / "sources.list", *sorted((base / "sources.list.d").glob("*"))]
    for path in paths:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if "deb" in fields.get("Types", "").split() and \
                        SUITE in fields.get("Suites", "").split() and \
                        "main" in fields.get("Components", "").split():
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$", line)
                if m and m.group(2) == SUITE and "main" in m.group(3).split():
                    return m.group(1)
    raise BoxError(f"no apt source for Debian {SUITE} main in /etc/apt/sources.list*")


def recipe(mirror: str) -> dict[str, object]:
    """Everything that decides the boxes' content (its hash is the cache key)."""
    return {"version": RECIPE_VERSION, "suite": SUITE, "mirror": mirror,
            "packages": PACKAGES, "kernel": KERNEL_PACKAGES, "size": IMAGE_SIZE_GIB,
            "files": guestfiles.fingerprint()}


def recipe_key(mirror: str) -> str:
    blob = json.dumps(recipe(mirror), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def box_name(key: str) -> str:
    """The name both boxes are added under (one name, two providers)."""
    return f"lnet-testbed/{SUITE}-{key}"


def vagrant_home() -> Path:
    """VAGRANT_HOME of every vagrant call of the project (boxes live there, once)."""
    return Path(os.environ.get("LNET_TESTBED_VAGRANT_HOME", str(CACHE_ROOT / "vagrant.d")))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- the steps


def bootstrap(root: Path, mirror: str) -> None:
    """debootstrap + the guest configuration shared by both boxes (~100 s)."""
    tmp = root.with_name(root.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    include = ",".join((*PACKAGES, *KERNEL_PACKAGES))
    debs = root.parent.parent / "debs"  # downloaded .debs, kept for the next recipe
    debs.mkdir(parents=True, exist_ok=True)
    run(["debootstrap", "--variant=minbase", f"--include={include}", "--components=main",
         f"--cache-dir={debs}", SUITE, str(tmp), mirror], timeout=3600.0)
    guestfiles.configure_root(tmp, vagrant_public_key())
    tmp.rename(root)


def vagrant_public_key() -> str:
    """Vagrant's well-known insecure key (Vagrant swaps it for a fresh one on first boot)."""
    for pub in sorted(VAGRANT_PUB.glob("vagrant-*/keys/vagrant.pub")):
        return pub.read_text().strip()
    raise BoxError("vagrant's insecure key not found: is the vagrant package installed?")


def build_lxc_box(root: Path, out: Path) -> None:
    guestfiles.set_flavour(root, "lxc")
    with tempfile.TemporaryDirectory(dir=out.parent) as tmpd:
        work = Path(tmpd)
        excludes = [f"--exclude={e}" for e in LXC_EXCLUDES]
        run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(root),
             *excludes, "-I", "gzip -1", "-cf", str(work / "rootfs.tar.gz"), "."])
        (work / "metadata.json").write_text(json.dumps({
            "provider": "lxc", "version": "1.0.0", "built-on": time.strftime("%F %T"),
            "template-opts": {"--strip-components": "1"}}))
        (work / "lxc-config").write_text("lxc.apparmor.profile = unconfined\n")
        (work / "Vagrantfile").write_text(guestfiles.BOX_VAGRANTFILE)
        _tar_box(work, ["metadata.json", "lxc-config", "Vagrantfile", "rootfs.tar.gz"], out)


def build_libvirt_box(root: Path, out: Path) -> None:
    guestfiles.set_flavour(root, "libvirt")
    with tempfile.TemporaryDirectory(dir=out.parent) as tmpd:
        work = Path(tmpd)
        raw = work / "disk.raw"
        make_disk(root, raw)
        run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "box.img")])
        raw.unlink()
        (work / "metadata.json").write_text(json.dumps(
            {"provider": "libvirt", "format": "qcow2", "virtual_size": IMAGE_SIZE_GIB}))
        (work / "Vagrantfile").write_text(guestfiles.BOX_VAGRANTFILE)
        _tar_box(work, ["metadata.json", "Vagrantfile", "box.img"], out)


def make_disk(root: Path, raw: Path) -> None:
    """MBR + one bootable partition at 1 MiB, ext4, extlinux (offset loop, no partscan)."""
    size = IMAGE_SIZE_GIB << 30
    offset = 1 << 20
    with open(raw, "wb") as f:
        f.truncate(size)
    run(["sfdisk", "-q", str(raw)], input="label: dos\nstart=2048, type=83, bootable\n")
    with open(MBR_BIN, "rb") as src, open(raw, "r+b") as dst:
        dst.write(src.read(440))
    loop = run(["losetup", "--find", "--show", "--offset", str(offset), "--sizelimit",
                str(size - offset), str(raw)]).strip()
    mnt = raw.with_name("mnt")
    mnt.mkdir()
    try:
        run(["mkfs.ext4", "-q", "-F", "-O", "^64bit", "-L", ROOT_LABEL, loop])
        run(["mount", loop, str(mnt)])
        try:
            run(["cp", "-a", f"{root}/.", str(mnt)])
            kernel, initrd = guestfiles.kernel_files(mnt)
            ext = mnt / "boot" / "extlinux"
            ext.mkdir(parents=True, exist_ok=True)
            (ext / "extlinux.conf").write_text(guestfiles.extlinux_conf(kernel, initrd,
                                                                         ROOT_LABEL))
            run(["extlinux", "--install", str(ext)])
        finally:
            run(["umount", str(mnt)])
    finally:
        subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        mnt.rmdir()


def _tar_box(work: Path, members: list[str], out: Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    run(["tar", "-C", str(work), "-cf", str(tmp), *members])
    tmp.rename(out)


def added_boxes(env: dict[str, str]) -> set[tuple[str, str]]:
    """(name, provider) of every box in VAGRANT_HOME."""
    out = run(["vagrant", "box", "list", "--machine-readable"], env=env, timeout=120.0)
    found: set[tuple[str, str]] = set()
    name = None
    for line in out.splitlines():
        parts = line.split(",")
        if len(parts) >= 4 and parts[2] == "box-name":
            name = parts[3]
        elif len(parts) >= 4 and parts[2] == "box-provider" and name:
            found.add((name, parts[3]))
    return found


def unavailable(provider: str = "lxc") -> str | None:
    """Why guests of ``provider`` cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (containers, VMs, bridges, namespaces)"
    tools = ["vagrant", "debootstrap", "extlinux"] + (
        ["lxc-start"] if provider == "lxc" else ["virsh", "qemu-system-x86_64", "libvirtd"])
    missing = [t for t in tools if shutil.which(t) is None]
    return f"missing {', '.join(missing)} (make vagrant-deps)" if missing else None


def vagrant_env() -> dict[str, str]:
    env = dict(os.environ)
    env["VAGRANT_HOME"] = str(vagrant_home())
    env["VAGRANT_CHECKPOINT_DISABLE"] = "1"  # no call home
    return env


# ----------------------------------------------------------------------------- entry point


def ensure_boxes(cache_root: Path = CACHE_ROOT, *, keep_root: bool = False,
                 mirror: str | None = None) -> dict[str, object]:
    """Build what is missing, add both boxes to Vagrant; return what was done and its times.

    Raises:
        BoxError: a step failed (nothing half-built is left under its final name).
    """
    mirror = mirror or apt_mirror()
    key = recipe_key(mirror)
    bdir = cache_root / "boxes" / key
    report: dict[str, object] = {"key": key, "box": box_name(key), "dir": str(bdir),
                                 "steps": {}}
    steps: dict[str, float] = report["steps"]  # type: ignore[assignment]
    with locked(cache_root / "boxes" / f"{key}.lock"):
        bdir.mkdir(parents=True, exist_ok=True)
        boxes = {"lxc": bdir / "lxc.box", "libvirt": bdir / "libvirt.box"}
        root = bdir / "rootfs"
        if not all(p.exists() for p in boxes.values()) and not root.exists():
            t = time.monotonic()
            log(f"debootstrap {SUITE} from {mirror} (about 2 minutes)")
            bootstrap(root, mirror)
            steps["debootstrap"] = round(time.monotonic() - t, 1)
        for provider, builder in (("lxc", build_lxc_box), ("libvirt", build_libvirt_box)):
            if not boxes[provider].exists():
                t = time.monotonic()
                log(f"{provider} box")
                builder(root, boxes[provider])
                steps[f"{provider}-box"] = round(time.monotonic() - t, 1)
        if root.exists() and not keep_root:
            shutil.rmtree(root)
        env = vagrant_env()
        vagrant_home().mkdir(parents=True, exist_ok=True)
        have = added_boxes(env)
        for provider, path in boxes.items():
            if (box_name(key), provider) not in have:
                t = time.monotonic()
                run(["vagrant", "box", "add", "--force", "--name", box_name(key), str(path)],
                    env=env, timeout=900.0)
                steps[f"add-{provider}"] = round(time.monotonic() - t, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vagrant/build-box", description=__doc__.split("\n")[0])
    p.add_argument("--cache", type=Path, default=CACHE_ROOT,
                   help=f"cache directory (default {CACHE_ROOT}, env LNET_TESTBED_CACHE)")
    p.add_argument("--keep-root", action="store_true",
                   help="keep the debootstrap root after both boxes are built")
    p.add_argument("--print-name", action="store_true",
                   help="print the box name of the current recipe and exit")
    args = p.parse_args(argv)
    try:
        if args.print_name:
            print(box_name(recipe_key(apt_mirror())))
            return 0
        started = time.monotonic()
        report = ensure_boxes(args.cache, keep_root=args.keep_root)
    except BoxError as exc:
        print(f"build-box: error: {exc}", file=sys.stderr)
        return 1
    report["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
