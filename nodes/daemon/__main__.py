"""``python -m nodes.daemon``: one emulated LNet node (ARCHITECTURE "node daemon").

Started by the orchestrator inside the node's network namespace. Binds the control socket,
registers itself by network-namespace inode (so a bare ``lnetctl`` in that namespace finds it),
serves until ``shutdown`` or SIGTERM, then removes what it registered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from pathlib import Path

from nodes.daemon import etchosts, fusefs, memprobe
from nodes.daemon.client import BY_NETNS_DIR, netns_inode
from nodes.daemon.control import ControlServer, CurveServer
from nodes.daemon.runtime import NodeRuntime
from nodes.dlc import request as frontend
from nodes.dlc.verbs import lnetctl_config, modparam_files
from nodes.dlc.verbs.modparam_files import ModParams
from nodes.lnet.errors import LNetConfigError


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nodes.daemon", description=__doc__)
    p.add_argument("--testbed", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--rundir", required=True, type=Path)
    p.add_argument("--port", type=int, default=988, help="socklnd acceptor port (988)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--lnet-param", action="append", default=[], metavar="NAME=VALUE",
                   help="module parameter, applied before LNet is configured (spec §0): "
                        "lnet's by name, ksocklnd's as ksocklnd.NAME")
    p.add_argument("--ctl-tcp", metavar="tcp://ADDR:PORT",
                   help="also serve control requests here, with CURVE (needs --curve-dir)")
    p.add_argument("--ctl-fd", type=int, metavar="FD",
                   help="inherited listening socket for --ctl-tcp (made in another netns)")
    p.add_argument("--curve-dir", type=Path, metavar="DIR",
                   help="server.key_secret (this daemon's CURVE key pair) and clients/*.key "
                        "(the only client public keys admitted)")
    p.add_argument("--record-period", type=_period, default=0.0, metavar="SECONDS",
                   help="sample the engine into RUNDIR/nodes/NODE.rec every SECONDS "
                        "(0: no recorder; docs/events.md §3)")
    p.add_argument("--trace-messages", action="store_true",
                   help="write every send, resend and completion to "
                        "RUNDIR/nodes/NODE.trace.jsonl (docs/events.md §1.5)")
    p.add_argument("--sysfs", type=int, metavar="MNTNS",
                   help="serve /sys/module/{lnet,ksocklnd}/parameters in this node's own "
                        "mount namespace (FUSE; nodes/daemon/fusefs.py), never in MNTNS "
                        "(the machine's: the starter's /proc/self/ns/mnt inode)")
    return p.parse_args(argv)


def _curve(ns: argparse.Namespace) -> CurveServer | None:
    """The CURVE TCP endpoint from --ctl-tcp/--ctl-fd/--curve-dir (testbed/vagrant/curve.py
    writes those files), or None for an ipc-only daemon."""
    if ns.ctl_tcp is None:
        return None
    if ns.curve_dir is None:
        raise SystemExit("nodes.daemon: --ctl-tcp needs --curve-dir (no plain-text TCP control)")
    import zmq.auth

    public, secret = zmq.auth.load_certificate(str(ns.curve_dir / "server.key_secret"))
    if secret is None:
        raise SystemExit(f"nodes.daemon: no secret key in {ns.curve_dir}/server.key_secret")
    return CurveServer(ns.ctl_tcp, public, secret, ns.curve_dir / "clients", ns.ctl_fd)


def _period(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be 0..3600 seconds, not {text}")
    return value


def _register(sock_path: Path) -> Path | None:
    try:
        BY_NETNS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        link = BY_NETNS_DIR / str(netns_inode())
        tmp = link.with_suffix(f".{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(sock_path)
        tmp.replace(link)
        return link
    except OSError as e:
        logging.getLogger("daemon").warning("cannot register by netns: %s", e)
        return None


async def _amain(ns: argparse.Namespace) -> int:
    nodes_dir = ns.rundir / "nodes"
    nodes_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock_path = nodes_dir / f"{ns.node}.sock"
    sock_path.unlink(missing_ok=True)
    seed = ns.seed if ns.seed is not None else int.from_bytes(os.urandom(8), "little")
    curve = _curve(ns)  # before anything starts: a bad key file stops us here
    rt = NodeRuntime(seed=seed, port=ns.port)
    params = [(a.split("=", 1)[0], a.split("=", 1)[1]) if "=" in a else (a, "")
              for a in ns.lnet_param]
    try:  # "modprobe lnet NAME=VALUE": before anything is configured
        lnetctl_config.apply_module_params(rt, params)
    except LNetConfigError as e:
        logging.getLogger("daemon").error("bad --lnet-param: %s", e.descr)
        await rt.close()
        return 2
    rt.observe(ns.rundir, ns.node, record_period=ns.record_period, trace=ns.trace_messages)
    rt.host.hosts_path = ns.rundir / etchosts.FILE  # the testbed's /etc/hosts view (etchosts.py)
    server = ControlServer(rt, ns.node, str(sock_path), frontend, curve)
    os.chmod(sock_path, 0o600)
    link = _register(sock_path)
    (nodes_dir / f"{ns.node}.pid").write_text(f"{os.getpid()}\n")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stopping.set)
    logging.getLogger("daemon").info("node %s up (pid %d, seed %d)", ns.node, os.getpid(), seed)
    sysfs = None if ns.sysfs is None else fusefs.mount_params(
        ModParams(rt, params, ns.port), modparam_files.ROOT, loop, ns.sysfs)
    probe = memprobe.start(ns.node)  # a diagnostic, off unless LNET_MEMPROBE is set
    trimmer = loop.create_task(_trim_heap(), name="malloc_trim")
    try:
        await server.serve()
    finally:
        trimmer.cancel()
        if sysfs is not None:
            sysfs.close(loop)
        if probe is not None:
            probe.cancel()
        await server.close()
        await rt.close()
        if link is not None and os.path.realpath(link) == str(sock_path.resolve()):
            link.unlink(missing_ok=True)
        sock_path.unlink(missing_ok=True)
    return 0


#: glibc mallopt parameters: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _fixed_malloc_thresholds() -> None:
    """Keep glibc's mmap and trim thresholds at their 128 KiB defaults: freeing one large
    mmapped buffer (a 1 MiB frame) otherwise raises them for good (the dynamic threshold), and
    the heap then keeps what the daemon's bytes churn freed (issue 11, the soak's RSS)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)


#: seconds between two ``malloc_trim(0)``
TRIM_PERIOD = 30.0


async def _trim_heap() -> None:
    """Every :data:`TRIM_PERIOD`, hand the heap's free pages back (``malloc_trim(0)``
    releases free pages anywhere in the heap, not only at its top): the daemon's payload
    buffers (4 KiB PUTs, frames) come and go by the thousand a second and leave free chunks
    the heap's top cannot shrink past -- 1.3-1.9 MB of c1's RSS in the soak (``memprobe``
    with ``LNET_MEMPROBE_TRIM``). A millisecond of work; never on a non-glibc libc."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    while True:
        await asyncio.sleep(TRIM_PERIOD)
        trim(0)


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    _fixed_malloc_thresholds()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {ns.node} %(name)s %(levelname)s: %(message)s")
    return asyncio.run(_amain(ns))


if __name__ == "__main__":
    sys.exit(main())
