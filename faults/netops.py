"""Realise and revert faults on a running testbed: iptables, tc, ip link, interposers, signals.

Theory of operation (STYLE rules 9 and 10): every change is a *resource*, a small dict that
``testbed.mininet.faultctl`` records in state.json **before** it is made and undoes in
reverse order:

* ``iptables``: one rule, as the argv after ``-I``/``-D``, in a node's network namespace
  (``ns_pid``), tagged ``-m comment --comment lntb:<fault id>``;
* ``qdisc``: a root ``tbf`` on an interface, in a node's namespace (egress of the node) or, for
  ``direction: in``, on the bridge-side veth in the root namespace (its egress is the node's
  ingress);
* ``interposer``: a ``python -m faults.interposer`` process in the node's namespace;
* ``link``: an interface set down (reverted: up);
* ``signal``: a SIGSTOPped daemon (reverted: SIGCONT).

Where the rules live, and why: NFQUEUE/DROP rules go in the *node namespaces*' own
``filter`` table (OUTPUT for ``direction: out``, INPUT for ``in``), not on the bridge ports of
the root namespace. The root namespace's tables are shared by every testbed and xdist worker
on the host, and with ``bridge-nf-call-iptables=1`` every bridged frame of every testbed
already traverses its FORWARD chain, so a rule there costs everybody and one typo hits all of
them; a node namespace's table is private, names its interfaces as the node does (eth0, eth1),
sees the packets the node's socklnd actually sends and receives, and vanishes with the
namespace, so even a ``kill -9`` of everything leaves no rule behind. The NFQUEUE netlink
socket is per namespace, so the interposer runs in the node's namespace too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from faults.interposer import MARK
from faults.spec import FaultSpec
from testbed import sh

#: Comment prefix of every iptables rule we insert (``lntb:<fault id>``).
TAG = "lntb:"
#: Seconds an interposer gets to bind its queue.
READY_TIMEOUT = 10.0
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class FaultApplyError(Exception):
    """A fault could not be applied; the message is one line."""


def _chains(direction: str) -> list[tuple[str, str]]:
    """(chain, interface option) per direction."""
    return {"out": [("OUTPUT", "-o")], "in": [("INPUT", "-i")],
            "both": [("OUTPUT", "-o"), ("INPUT", "-i")]}[direction]


def match_args(spec: FaultSpec) -> list[str]:
    """iptables match options that narrow what reaches the queue (the rest is the prefilter's)."""
    m = spec.match
    args: list[str] = []
    if m.proto in ("tcp", "lnet"):
        args += ["-p", "tcp"]
        port = 988 if m.proto == "lnet" else m.port
        if port is not None:
            args += ["-m", "multiport", "--ports", str(port)]
    elif m.proto in ("udp", "icmp"):
        args += ["-p", m.proto]
    elif m.port is not None:
        args += ["-p", "tcp", "-m", "multiport", "--ports", str(m.port)]
    return args


def rule_specs(fid: str, spec: FaultSpec, target: list[str],
               extra: list[str] | None = None) -> list[list[str]]:
    """The iptables rules (argv after ``-I``) of a fault on its node."""
    rules = []
    for chain, ifopt in _chains(spec.direction):
        iface = [ifopt, spec.iface] if spec.iface else ["!", ifopt, "lo"]
        rules.append([chain, *iface, *(extra or []), "-m", "mark", "!", "--mark", str(MARK),
                      "-m", "comment", "--comment", f"{TAG}{fid}", *target])
    return rules


def iptables(op: str, rule: list[str], ns_pid: int) -> sh.Completed:
    return sh.run(["iptables", "-w", "5", op, *rule], ns_pid=ns_pid, timeout=15.0)


def tagged_rules(ns_pid: int, fid: str | None = None) -> list[str]:
    """``iptables -S`` lines carrying our tag (for one fault, or any) in a namespace."""
    res = sh.run(["iptables", "-w", "5", "-S"], ns_pid=ns_pid, timeout=15.0)
    want = f"{TAG}{fid}" if fid else TAG
    return [ln for ln in res.out.splitlines() if want in ln]


def tagged_qdiscs(dev: str, ns_pid: int | None) -> list[str]:
    res = sh.run(["tc", "qdisc", "show", "dev", dev], ns_pid=ns_pid, timeout=15.0)
    return [ln for ln in res.out.splitlines() if ln.startswith("qdisc tbf")]


# -- apply / revert one resource ------------------------------------------------------------

def create(res: dict[str, Any], env: dict[str, str]) -> None:
    """Make the change a recorded resource describes (it is already in state.json).

    Raises:
        FaultApplyError: the command failed or the interposer did not come up.
    """
    kind = res["type"]
    if kind == "iptables":
        _checked(iptables("-I", res["rule"], res["ns_pid"]), ["iptables", "-I", *res["rule"]])
    elif kind == "qdisc":
        argv = ["tc", "qdisc", "replace", "dev", res["dev"], "root", "tbf", "rate", res["bw"],
                "burst", res["burst"], "latency", f"{res['latency']:g}ms"]
        _checked(sh.run(argv, ns_pid=res.get("ns_pid"), timeout=15.0), argv)
    elif kind == "link":
        argv = ["ip", "link", "set", "dev", res["iface"], "down"]
        _checked(sh.run(argv, ns_pid=res["ns_pid"], timeout=15.0), argv)
    elif kind == "signal":
        os.kill(res["pid"], signal.SIGSTOP)
    elif kind == "interposer":
        res["pid"] = start_interposer(res, env)
    else:  # pragma: no cover - resources come from this module
        raise FaultApplyError(f"unknown resource {kind}")


def undo(res: dict[str, Any]) -> str | None:
    """Undo one resource; never raises; returns a problem description or None."""
    kind = res["type"]
    try:
        if kind == "iptables":
            r = iptables("-D", res["rule"], res["ns_pid"])
            if r.rc != 0 and "does a matching rule exist" not in r.err and \
                    "No such file" not in r.err and _ns_alive(res["ns_pid"]):
                return f"iptables -D {' '.join(res['rule'])}: {r.err.strip()}"
        elif kind == "qdisc":
            sh.run(["tc", "qdisc", "del", "dev", res["dev"], "root"], ns_pid=res.get("ns_pid"),
                   timeout=15.0)
        elif kind == "link":
            sh.run(["ip", "link", "set", "dev", res["iface"], "up"], ns_pid=res["ns_pid"],
                   timeout=15.0)
        elif kind == "signal":
            with contextlib.suppress(ProcessLookupError):
                os.kill(res["pid"], signal.SIGCONT)
        elif kind == "interposer":
            stop_interposer(res.get("pid"))
    except (OSError, sh.CommandError) as exc:
        return f"{kind}: {exc}"
    return None


def _ns_alive(pid: int | None) -> bool:
    return bool(pid) and Path(f"/proc/{pid}/ns/net").exists()


def _checked(result: sh.Completed, argv: list[str]) -> None:
    if result.rc != 0:
        raise FaultApplyError(str(sh.CommandError(argv, result)))


# -- interposer processes --------------------------------------------------------------------

def start_interposer(res: dict[str, Any], env: dict[str, str]) -> int:
    """Start the interposer of ``res`` in its node's namespace; wait until its queue is bound."""
    spec_path = Path(res["spec_path"])
    counters = Path(res["counters"])
    counters.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(res["interposer"]))
    argv = sh.ns_argv([sys.executable, "-m", "faults.interposer", str(spec_path)],
                      res["ns_pid"])
    log = open(res["log"], "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd="/",
                                start_new_session=True)
    finally:
        log.close()
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = Path(res["log"]).read_text(errors="replace").strip().splitlines()[-3:]
            raise FaultApplyError(f"interposer exited with rc {proc.returncode}: "
                                  f"{' | '.join(tail) or '(no output)'}")
        if read_counters(counters).get("ready"):
            return proc.pid
        time.sleep(0.02)
    stop_interposer(proc.pid)
    raise FaultApplyError(f"interposer did not bind queue {res['interposer']['queue']} "
                          f"within {READY_TIMEOUT:g}s")


def stop_interposer(pid: int | None, grace: float = 2.0) -> None:
    """SIGTERM (it releases held packets and writes its counters), then SIGKILL; reap."""
    if not pid:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child (after a supervisor restart)
                done = pid if not Path(f"/proc/{pid}").exists() else 0
            if done:
                return
            time.sleep(0.02)


def read_counters(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# -- cleanup by record (testbed/clean.py) ----------------------------------------------------

def recorded(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Fault resources a state file lists, newest last."""
    out = []
    faults = state.get("faults")
    if isinstance(faults, dict):
        for info in faults.values():
            if isinstance(info, dict) and isinstance(info.get("resources"), list):
                out += [r for r in info["resources"] if isinstance(r, dict) and "type" in r]
    return out


def _pid_is_interposer(pid: Any) -> bool:
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as fh:
            return b"faults.interposer" in fh.read()
    except (OSError, ValueError, TypeError):
        return False


def still_present(res: dict[str, Any]) -> str | None:
    """A description of the artefact of ``res`` if it still exists, else None."""
    kind = res["type"]
    if kind == "interposer" and _pid_is_interposer(res.get("pid")):
        return f"interposer process {res['pid']}"
    if kind == "qdisc" and res.get("ns_pid") is None and tagged_qdiscs(res["dev"], None):
        return f"qdisc tbf on {res['dev']}"
    if kind in ("iptables", "qdisc") and res.get("ns_pid") and _ns_alive(res["ns_pid"]):
        if kind == "iptables" and tagged_rules(res["ns_pid"]):
            return f"iptables rule {' '.join(res['rule'])} in netns of {res['ns_pid']}"
        if kind == "qdisc" and tagged_qdiscs(res["dev"], res["ns_pid"]):
            return f"qdisc tbf on {res['dev']} in netns of {res['ns_pid']}"
    return None


def recorded_leftovers(state: dict[str, Any]) -> list[str]:
    """What of the recorded fault resources is still there (``testbed clean``'s check)."""
    return sorted({s for r in recorded(state) if (s := still_present(r)) is not None})


def undo_recorded(state: dict[str, Any]) -> list[str]:
    """Undo every recorded fault resource still present, newest first (owner gone)."""
    removed = []
    for res in reversed(recorded(state)):
        what = still_present(res) or (f"SIGCONT to {res.get('pid')}"
                                      if res["type"] == "signal" else None)
        if what is None:
            continue
        undo(res)
        removed.append(what)
    return removed
