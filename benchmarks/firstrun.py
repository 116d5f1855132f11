"""``make demo`` on a clean Debian 12: apt, first demo step, whole demo, background compile.

Issue 31 acceptance: "On a fresh Debian 12 machine (or a clean container of it): ``make demo``
prints the first demo step <= 90 s after apt finishes; the whole run and its parts timed". This
host already has the packages, so the run goes into a clean one: a ``debootstrap
--variant=minbase bookworm`` root (plus ``make``, to type the command; from the mirror named in
/etc/apt/sources.list*), cached pristine under ``--cache`` and copied for each run, started as a
privileged LXC container (Mininet makes network namespaces, veths, bridges and iptables/NFQUEUE
rules in it) with one veth on a bridge of its own, NATed to reach the Debian mirror and PyPI
only (nothing else is configured in it: no pip.conf, an empty pip cache, the environment
cleared). A fresh ``git clone`` of this repository at HEAD goes to /root/lnet-testbed and the
README's first set-up command runs there: ``make demo``. Every output line is stamped on the
host's clock, so the parts are measured here as well as printed by the demo's own note:

* ``apt``: make started -> the Makefile's ``apt: done in N s`` line;
* ``first_step``: apt done -> the demo's ``(first step ...)`` line (target <= 90 s);
* ``demo``: make started -> make returned (the demo's teardown included);
* ``compile``: make started -> the background compile's stamp (``.venv/.native``), and whether
  it compiled (``nodes.native.built_for_sources``) or fell back.

The container, its bridge, its NAT rule and its veth are removed at the end (also on failure or
Ctrl-C); ``ip_forward`` is set back to what it was. The pristine root stays in ``--cache`` for
the next run (``--fresh-rootfs`` builds it again, timed). Run as root, ~5-10 min:

    python3 benchmarks/firstrun.py [--name firstrun-1] [--keep-log LOG]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LXC = Path("/var/lib/lxc")
COMPILE_TIMEOUT = 1800.0  # the compile runs at nice 19 on a box shared with other work
SUBNETS = [f"10.{n}.77" for n in range(230, 250)]
MARKS = {"apt": re.compile(r"^apt: done in (\d+) s"),
         "engine": re.compile(r"^engine: "),
         "first_step": re.compile(r"^\s*\(first step (\d+) s after apt was done\)"),
         "note": re.compile(r"^timing: ")}


def run(*argv: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, text=True, capture_output=True, check=False)
    if check and res.returncode != 0:
        raise SystemExit(f"firstrun: {' '.join(argv)}: exit {res.returncode}: "
                         f"{(res.stderr or res.stdout).strip()[-400:]}")
    if not quiet and res.stdout.strip():
        print(res.stdout.strip())
    return res


def mirror() -> str:
    """The Debian archive apt uses here (``deb.debian.org/debian`` if none is named)."""
    text = ""
    for f in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        with contextlib.suppress(OSError):
            text += f.read_text() + "\n"
    for m in re.finditer(r"(?:URIs:|^deb)\s+(\S+/debian)\s", text, re.M):
        if "security" not in m.group(1):
            return m.group(1)
    return "http://deb.debian.org/debian"


def rootfs(cache: Path, fresh: bool) -> tuple[Path, float | None]:
    """The pristine minbase root (built, timed, when missing or ``fresh``)."""
    root = cache / "rootfs-bookworm"
    if root.is_dir() and (root / "usr/bin/make").exists() and not fresh:
        return root, None
    shutil.rmtree(root, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    run("debootstrap", "--variant=minbase", "--include=make", "bookworm", str(root), mirror(),
        quiet=True)
    return root, time.monotonic() - t


def free_subnet() -> str:
    used = run("ip", "-4", "-o", "addr", "show", quiet=True).stdout
    used += run("ip", "-4", "route", "show", quiet=True).stdout
    for net in SUBNETS:
        if f"{net}." not in used:
            return net
    raise SystemExit("firstrun: no free 10.x.77.0/24 subnet for the container's bridge")


def site_ca(root: Path) -> None:
    """This site's TLS trust, as its machines have it: HTTPS out of here (PyPI) passes a proxy
    that signs with the site's own CA, which the host trusts through the CA files in
    /usr/local/share/ca-certificates (``update-ca-certificates`` adds them to the bundle when
    apt installs or updates ``ca-certificates``) and /etc/pip.conf's ``cert``. A fresh machine
    here needs the same to reach PyPI; nothing else of the host's pip set-up (its local wheel
    mirrors) is copied."""
    local = Path("/usr/local/share/ca-certificates")
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if local.is_dir():
        shutil.copytree(local, root / local.relative_to("/"), dirs_exist_ok=True)
    if bundle.exists():
        (root / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
        shutil.copy(bundle, root / bundle.relative_to("/"))
        (root / "etc/pip.conf").write_text(f"[global]\ncert = {bundle}\n")


class Container:
    """One privileged LXC container on a bridge of its own, NATed out (module doc)."""

    def __init__(self, name: str, pristine: Path) -> None:
        self.name = name
        self.dir = LXC / name
        self.root = self.dir / "rootfs"
        self.bridge = "frbr" + str(os.getpid() % 100000)
        self.net = free_subnet()
        self.nat = ["POSTROUTING", "-s", f"{self.net}.0/24", "!", "-o", self.bridge,
                    "-j", "MASQUERADE", "-m", "comment", "--comment", name]
        self.forward = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
        self.pristine = pristine

    def start(self) -> None:
        if self.dir.exists():
            raise SystemExit(f"firstrun: {self.dir} exists: another container named {self.name}")
        self.dir.mkdir(parents=True)
        run("cp", "-a", str(self.pristine), str(self.root))
        shutil.copy("/etc/resolv.conf", self.root / "etc/resolv.conf")
        site_ca(self.root)
        (self.dir / "config").write_text("\n".join([
            f"lxc.uts.name = {self.name}", f"lxc.rootfs.path = dir:{self.root}",
            "lxc.net.0.type = veth", f"lxc.net.0.link = {self.bridge}", "lxc.net.0.flags = up",
            "lxc.net.0.name = eth0", f"lxc.net.0.ipv4.address = {self.net}.2/24",
            f"lxc.net.0.ipv4.gateway = {self.net}.1",
            "lxc.apparmor.profile = unconfined", "lxc.cgroup2.devices.allow = a",
            "lxc.mount.auto = proc:rw sys:rw cgroup:rw", "lxc.autodev = 1",
            "lxc.pty.max = 64", "lxc.init.cmd = /bin/sleep infinity", ""]))
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        run("iptables", "-t", "nat", "-A", *self.nat)
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        run("lxc-start", "-n", self.name, "-d")

    def attach(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["lxc-attach", "-n", self.name, "--clear-env",
             "-v", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "-v", "HOME=/root", "-v", "LANG=C.UTF-8", "-v", "TERM=dumb",
             "--", "bash", "-c", command],
            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)

    def cpu_s(self) -> float | None:
        """CPU seconds the container used so far (its cpuacct cgroup, v1 or v2)."""
        for f, scale in ((f"/sys/fs/cgroup/cpuacct/lxc.payload.{self.name}/cpuacct.usage",
                          1e-9), (f"/sys/fs/cgroup/lxc.payload.{self.name}/cpu.stat", 1e-6)):
            with contextlib.suppress(OSError, ValueError):
                text = Path(f).read_text()
                value = text.split()[1] if text.startswith("usage_usec") else text
                return round(int(value) * scale, 1)
        return None

    def busy(self) -> bool:
        """The background ``make native`` (extras, then the compile) still runs in the
        container (minbase has no pgrep; cmdline's words are NUL-separated, hence the ``.``;
        the ``[y]`` keeps grep from finding itself)."""
        return self.attach("grep -qaE 'make.--no-print-director[y].native' "
                           "/proc/[0-9]*/cmdline").wait() == 0

    def destroy(self) -> list[str]:
        """Remove all of it; what is still there afterwards (empty: clean)."""
        if self.dir.exists():
            run("lxc-stop", "-n", self.name, "-k", check=False)
            run("lxc-destroy", "-n", self.name, check=False)
            shutil.rmtree(self.dir, ignore_errors=True)
        nat = ("iptables", "-t", "nat", "-D", *self.nat)
        while run(*nat, check=False, quiet=True).returncode == 0:
            pass
        run("ip", "link", "del", self.bridge, check=False, quiet=True)
        Path("/proc/sys/net/ipv4/ip_forward").write_text(self.forward)
        left = []
        if self.dir.exists():
            left.append(str(self.dir))
        if run("ip", "link", "show", self.bridge, check=False, quiet=True).returncode == 0:
            left.append(f"bridge {self.bridge}")
        links = run("ip", "-o", "link", "show", "master", self.bridge, check=False, quiet=True)
        left += [f"veth {ln.split(':')[1].strip()}" for ln in links.stdout.splitlines()]
        if self.name in run("iptables-save", "-t", "nat", quiet=True).stdout:
            left.append("NAT rule")
        if self.name in run("lxc-ls", quiet=True).stdout.split():
            left.append(f"container {self.name}")
        return left


def stamped(proc: subprocess.Popen[str], t0: float) -> Iterator[tuple[float, str]]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield time.monotonic() - t0, line.rstrip("\n")


def demo(box: Container, log: Path | None) -> dict[str, object]:
    """``make demo`` in the container, every line stamped; the marks' times (module doc)."""
    t0 = time.monotonic()
    proc = box.attach("cd /root/lnet-testbed && make demo")
    marks: dict[str, object] = {}
    lines = []
    for t, line in stamped(proc, t0):
        lines.append(f"{t:7.1f} {line}")
        for key, rx in MARKS.items():
            if key not in marks and rx.search(line):
                marks[key + "_cpu"] = box.cpu_s()
                print(f"  [{t:6.1f}] {line}", flush=True)
                marks[key] = round(t, 1)
                marks[key + "_line"] = line.strip()
    marks["exit"] = proc.wait()
    marks["demo"] = round(time.monotonic() - t0, 1)
    marks["demo_cpu"] = box.cpu_s()
    stamp = box.root / "root/lnet-testbed/.venv/.native"
    deadline = time.monotonic() + COMPILE_TIMEOUT
    while not stamp.exists() and time.monotonic() < deadline:
        if not box.busy() and not stamp.exists():
            break  # nothing building any more, and no stamp: it failed (native.log says why)
        time.sleep(2)
    if stamp.exists():
        marks["compile"] = round(time.monotonic() - t0, 1)  # (2 s polls)
        marks["compile_cpu"] = box.cpu_s()
    check = box.attach("cd /root/lnet-testbed && .venv/bin/python -c 'from nodes import "
                       "native; print(native.built_for_sources(\"nodes.lnet\"))'")
    assert check.stdout is not None
    marks["compiled"] = check.stdout.read().strip()
    check.wait()
    tail = (box.root / "root/lnet-testbed/.venv/native.log")
    marks["native_log_tail"] = tail.read_text()[-300:] if tail.exists() else "(no native.log)"
    if log is not None:
        log.write_text("\n".join(lines) + "\n")
    return marks


def clone_into(box: Container) -> str:
    rev = run("git", "-C", str(REPO), "rev-parse", "HEAD", quiet=True).stdout.strip()
    common = Path(run("git", "-C", str(REPO), "rev-parse", "--git-common-dir",
                      quiet=True).stdout.strip())
    src = (REPO / common).resolve().parent
    dest = box.root / "root/lnet-testbed"
    run("git", "clone", "-q", str(src), str(dest))
    run("git", "-C", str(dest), "checkout", "-q", rev)
    return rev


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--name", default=f"firstrun-{os.getpid()}", help="container name")
    p.add_argument("--cache", type=Path, default=Path("/var/cache/lnet-testbed/firstrun"),
                   help="where the pristine debootstrap root is kept between runs")
    p.add_argument("--fresh-rootfs", action="store_true", help="debootstrap again (timed)")
    p.add_argument("--keep-log", type=Path, help="write the stamped output of make demo here")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("firstrun: terminated"))  # clean up
    if os.geteuid() != 0:
        raise SystemExit("firstrun: run as root (debootstrap, LXC, a bridge, a NAT rule)")
    for tool in ("debootstrap", "lxc-start", "git", "iptables"):
        if shutil.which(tool) is None:
            raise SystemExit(f"firstrun: needs {tool} (apt-get install debootstrap lxc git "
                             "iptables)")
    load = os.getloadavg()
    pristine, boot_s = rootfs(args.cache, args.fresh_rootfs)
    box = Container(args.name, pristine)
    result: dict[str, object] = {"container": args.name, "debootstrap_s": boot_s,
                                 "load_before": [round(x, 2) for x in load]}
    try:
        box.start()
        result["rev"] = clone_into(box)
        result.update(demo(box, args.keep_log))
    finally:
        result["load_after"] = [round(x, 2) for x in os.getloadavg()]
        result["left"] = box.destroy()
    apt, first = result.get("apt"), result.get("first_step")
    if isinstance(apt, float) and isinstance(first, float):
        result["first_step_after_apt"] = round(first - apt, 1)
    print(json.dumps(result, indent=1))
    ok = result.get("exit") == 0 and not result["left"]
    after = result.get("first_step_after_apt")
    print(f"firstrun: apt {apt} s; first step {after} s after apt (target <= 90); demo "
          f"{result.get('demo')} s; compile done {result.get('compile')} s after make started "
          f"(compiled: {result.get('compiled')}); left: {result['left'] or 'nothing'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
