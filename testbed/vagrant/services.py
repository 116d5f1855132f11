"""Host daemons the libvirt provider needs, started by hand and stopped by PID (no systemd).

Theory of operation: this machine has no systemd and no udev, so nobody starts ``virtlogd`` and
``libvirtd`` for us, and nobody would stop them. ``acquire(testbed)`` starts them if they are
not running, recording their PIDs and everything they may change on the host *before* they
run (``ip_forward``, the iptables chains present, whether the ``default`` storage pool exists,
the mode of ``/dev/kvm``); every testbed that uses them is listed as a user. ``release`` drops
a user; when none is left and we started the daemons, it undoes what they left (our box
volumes, a pool they created, ``LIBVIRT_*`` chains, ``ip_forward``, ``/dev/kvm``) and stops them
by PID. A running libvirtd that we did not start is used and left alone. One lock file
serialises testbeds of any process; the record lives in ``/run/lnet-testbed-vagrant/``
(outside RUNROOT, whose directories are testbeds).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from testbed.vagrant.boxes import locked

STATE_DIR = Path(os.environ.get("LNET_TESTBED_VAGRANT_RUN", "/run/lnet-testbed-vagrant"))
RECORD = STATE_DIR / "services.json"
#: libvirtd writes into these even for an isolated network (it rewrites the packaged
#: ``default`` network and nwfilter XML with UUIDs at start, keeps dnsmasq state, logs): the
#: file set is recorded before it starts, /etc/libvirt saved whole, both restored after.
LIBVIRT_TREES = ("/etc/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/run/libvirt",
                 "/var/cache/libvirt")
ETC_SNAPSHOT = STATE_DIR / "etc-libvirt.tar"
LOCK = STATE_DIR / "services.lock"
DAEMONS = (("virtlogd", "/run/virtlogd.pid"), ("libvirtd", "/run/libvirtd.pid"))
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]
START_TIMEOUT = 30.0


class ServiceError(Exception):
    """A host daemon could not be started; one line."""


def read_record() -> dict[str, Any]:
    try:
        data = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("users", [])
    data.setdefault("started", {})
    return data


def _write(data: dict[str, Any]) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = RECORD.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, RECORD)


def daemon_pid(pidfile: str, comm: str) -> int | None:
    try:
        pid = int(Path(pidfile).read_text().split()[0])
        if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
            return pid
    except (OSError, ValueError, IndexError):
        pass
    return None


def _chains() -> dict[str, list[str]]:
    out = {}
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            res = subprocess.run([tool, "-w", "5", "-t", table, "-S"], capture_output=True,
                                 text=True, check=False)
            out[f"{tool}/{table}"] = [ln.split()[1] for ln in res.stdout.splitlines()
                                      if ln.startswith("-N ")]
    return out


def kvm_usable() -> bool:
    """KVM runs ordinary guests here: a CPU with vmx/svm and a /dev/kvm (not kvm_pvm)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return Path("/dev/kvm").exists() and (" vmx" in flags or " svm" in flags)


def acquire(testbed: str) -> list[str]:
    """Make libvirtd usable for ``testbed``; returns the daemons started now."""
    started = []
    with locked(LOCK):
        data = read_record()
        if all(daemon_pid(pf, name) is None for name, pf in DAEMONS):
            data["before"] = {
                "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
                "chains": _chains(),
                "kvm_mode": oct(os.stat("/dev/kvm").st_mode & 0o777)
                if Path("/dev/kvm").exists() else None,
                "paths": sorted(_tree_paths()),
            }
            STATE_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
            subprocess.run(["tar", "-C", "/etc", "-cf", str(ETC_SNAPSHOT), "libvirt"],
                           check=False, capture_output=True)
            data["started"] = {}
        for name, pidfile in DAEMONS:
            if daemon_pid(pidfile, name) is None:
                subprocess.run([name, "-d"], check=False, capture_output=True, timeout=30)
                pid = _wait_pid(pidfile, name)
                data["started"][name] = pid
                started.append(f"{name} (pid {pid})")
        if Path("/dev/kvm").exists():
            # No udev here, so /dev/kvm stays 0600 root. Even with driver=qemu (TCG) libvirtd
            # must be able to use it: its QEMU capability probe runs as root and finds KVM,
            # its cache check asks whether the qemu user can open /dev/kvm; while the answers
            # differ, every API call re-probes QEMU twice (measured: 4-8 s per call, minutes
            # per `vagrant up`; 50 ms once the mode allows it). Restored by ``release``.
            os.chmod("/dev/kvm", 0o666)
        if testbed not in data["users"]:
            data["users"].append(testbed)
        _write(data)
        _wait_virsh()
        if "pool_existed" not in data:
            data["pool_existed"] = _virsh("pool-info", "default").returncode == 0
            _write(data)
    return started


def _wait_pid(pidfile: str, name: str) -> int:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        pid = daemon_pid(pidfile, name)
        if pid is not None:
            return pid
        time.sleep(0.1)
    raise ServiceError(f"{name} did not start within {START_TIMEOUT:g}s")


def _virsh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VIRSH, *args], capture_output=True, text=True, check=False,
                          timeout=60)


def _wait_virsh() -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while _virsh("version").returncode != 0:
        if time.monotonic() > deadline:
            raise ServiceError("libvirtd does not answer on qemu:///system")
        time.sleep(0.2)


def release(testbed: str, volume_prefix: str = "lnet-testbed") -> list[str]:
    """``testbed`` no longer needs libvirtd; stop what we started if nobody else does."""
    removed: list[str] = []
    with locked(LOCK):
        data = read_record()
        if testbed in data["users"]:
            data["users"].remove(testbed)
        if data["users"] or not data["started"]:
            _write(data)
            return removed
        removed += _undo_libvirt(data, volume_prefix)
        for name, pid in reversed(list(data["started"].items())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            removed.append(f"{name} (pid {pid})")
        removed += _undo_host(data.get("before", {}))
        removed += _restore_trees(data.get("before", {}))
        RECORD.unlink(missing_ok=True)
    return removed


def _undo_libvirt(data: dict[str, Any], volume_prefix: str) -> list[str]:
    removed = []
    vols = _virsh("vol-list", "default").stdout.split()
    for vol in vols:
        if vol.startswith(volume_prefix) and _virsh("vol-delete", vol, "--pool",
                                                    "default").returncode == 0:
            removed.append(f"volume {vol}")
    if not data.get("pool_existed", True) and _virsh("pool-info", "default").returncode == 0:
        _virsh("pool-destroy", "default")
        _virsh("pool-undefine", "default")
        removed.append("storage pool default")
    return removed


def _undo_host(before: dict[str, Any]) -> list[str]:
    removed = []
    old = before.get("chains", {})
    for key, chains in _chains().items():
        tool, table = key.split("/")
        for chain in chains:
            if chain.startswith("LIBVIRT") and chain not in old.get(key, []):
                subprocess.run([tool, "-w", "5", "-t", table, "-F", chain], check=False,
                               capture_output=True)
        for chain in chains:
            if chain.startswith("LIBVIRT") and chain not in old.get(key, []):
                _unhook(tool, table, chain)
                subprocess.run([tool, "-w", "5", "-t", table, "-X", chain], check=False,
                               capture_output=True)
                removed.append(f"{tool} {table} chain {chain}")
    fwd = before.get("ip_forward")
    path = Path("/proc/sys/net/ipv4/ip_forward")
    if fwd is not None and path.read_text().strip() != fwd:
        path.write_text(fwd)
        removed.append(f"ip_forward back to {fwd}")
    mode = before.get("kvm_mode")
    if mode is not None and Path("/dev/kvm").exists():
        os.chmod("/dev/kvm", int(mode, 8))
    return removed


def _tree_paths() -> set[str]:
    found: set[str] = set()
    for top in LIBVIRT_TREES:
        if Path(top).exists():
            found.add(top)
            for dirpath, dirs, files in os.walk(top):
                found.update(os.path.join(dirpath, n) for n in (*dirs, *files))
    return found


def _restore_trees(before: dict[str, Any]) -> list[str]:
    """Remove what libvirtd created under its trees; put /etc/libvirt back as it was."""
    if "paths" not in before:
        return []
    old = set(before["paths"])
    new = sorted(_tree_paths() - old, key=lambda p: -p.count("/"))  # deepest first
    for path in new:
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
    if ETC_SNAPSHOT.exists():
        subprocess.run(["tar", "-C", "/etc", "-xpf", str(ETC_SNAPSHOT)], check=False,
                       capture_output=True)
        ETC_SNAPSHOT.unlink()
    return [f"{len(new)} files libvirtd made under {', '.join(LIBVIRT_TREES)}"] if new else []


def _unhook(tool: str, table: str, chain: str) -> None:
    """Delete the jumps into ``chain`` from the built-in chains."""
    res = subprocess.run([tool, "-w", "5", "-t", table, "-S"], capture_output=True, text=True,
                         check=False)
    for line in res.stdout.splitlines():
        words = line.split()
        if words[:1] == ["-A"] and "-j" in words and words[words.index("-j") + 1] == chain:
            subprocess.run([tool, "-w", "5", "-t", table, "-D", *words[1:]], check=False,
                           capture_output=True)


def users() -> list[str]:
    return list(read_record()["users"])
