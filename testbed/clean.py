"""``testbed clean``: remove every leftover of every testbed, by ownership tag, never by pattern.

Theory of operation (STYLE rule 9 and anti-pattern 1): what a testbed owns is known three ways,
and cleanup uses only those:

* its processes carry ``LNET_TESTBED=<name>`` in their environment (``/proc/<pid>/environ``);
  killing them also ends the Mininet hosts' network namespaces, which takes the veth pairs
  with them;
* its kernel interfaces carry the hash of its name (``names.KERNEL_NAME_RE``) and are listed in
  its ``state.json``;
* its files live in its run directory, plus ``by-netns`` links pointing into it.

A testbed whose supervisor is alive is asked to go down (bounded); otherwise its tagged
processes get SIGTERM then SIGKILL, its interfaces are deleted, its files removed. Interfaces
of ours whose hash belongs to no live tagged process (a testbed under another RUNROOT that
died) are removed too; ones whose owner is alive are left alone, so ``pytest -n auto``
workers never clean each other up. Every removed thing is reported.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from faults import netops
from nodes.daemon.client import DaemonUnreachable, request
from testbed import names, runstate, sh

#: Seconds a live supervisor gets to take its testbed down when asked.
DOWN_TIMEOUT = 60.0
#: Seconds between SIGTERM and SIGKILL.
TERM_GRACE = 2.0


def _ancestors() -> set[int]:
    """Our own pid and our ancestors' (never killed, even if tagged)."""
    pids = set()
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[-1].split()[1])
    return pids


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait (bounded) until the processes have exited; return those still alive."""
    pending = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        pending = [p for p in pending if runstate.pid_alive(p)]
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.05)


def terminate(pids: Iterable[int], grace: float = TERM_GRACE) -> list[int]:
    """SIGTERM, wait ``grace`` seconds, SIGKILL the rest, wait again; return pids still alive."""
    pids = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        pids = wait_gone(pids, grace)
        if not pids:
            break
    return pids


def kill_tagged(name: str) -> list[str]:
    """Terminate every process tagged with testbed ``name`` (except us and our ancestors)."""
    spared = _ancestors()
    tagged = {pid for pid in runstate.tagged_pids(name) if pid not in spared}
    if not tagged:
        return []
    survivors = terminate(sorted(tagged))
    return [f"process {pid} of testbed {name}" for pid in sorted(tagged) if pid not in survivors]


def delete_interfaces(ifnames: Iterable[str]) -> list[str]:
    """Delete the given root-namespace interfaces that still exist (ports before bridges);
    none without root (only a Mininet testbed has interfaces, and only root makes those)."""
    if os.geteuid() != 0:
        return []
    present = set(names.existing_interfaces())
    todo = [n for n in ifnames if n in present]
    todo.sort(key=lambda n: (names.is_bridge(n), n))  # veths first, then their bridges
    removed = []
    for ifname in todo:
        if sh.run(["ip", "link", "del", "dev", ifname]).rc == 0:
            removed.append(f"interface {ifname}")
    return removed


def recorded_interfaces(state: dict[str, object]) -> list[str]:
    """Interfaces a state file says were created (bridges and switch-side veths)."""
    created = state.get("created")
    out = []
    if isinstance(created, list):
        for item in created:
            if isinstance(item, dict) and item.get("kind") in ("bridge", "veth"):
                out.append(str(item.get("name")))
    return out


def remove_files(rdir: Path, root: str | Path | None = None) -> list[str]:
    """Remove the by-netns links pointing into ``rdir``, then ``rdir`` itself."""
    removed = []
    for link in runstate.netns_links(rdir, root):
        try:
            link.unlink()
            removed.append(f"link {link}")
        except FileNotFoundError:
            pass
    if rdir.exists():
        shutil.rmtree(rdir, ignore_errors=True)
        removed.append(f"directory {rdir}")
    return removed


def _ask_down(rdir: Path, timeout: float) -> bool:
    try:
        reply = request(str(runstate.ctl_sock(rdir)), {"cmd": "down"}, timeout=timeout)
    except DaemonUnreachable:
        return False
    return bool(reply.get("ok"))


def clean_testbed(name: str, root: str | Path | None = None) -> list[str]:
    """Remove every leftover of testbed ``name``; return what was removed.

    A live supervisor is asked to go down first; anything still there after it answered (or
    did not answer within DOWN_TIMEOUT) is removed here by tag.
    """
    rdir = runstate.rundir(name, root)
    state = runstate.read_state(rdir)
    removed: list[str] = []
    if runstate.supervisor_alive(name, state) and _ask_down(rdir, DOWN_TIMEOUT):
        removed.append(f"testbed {name} (taken down by its supervisor)")
        wait_gone([state["supervisor_pid"]], 5.0)  # it exits right after answering
        state = runstate.read_state(rdir)
    # guests, hosts' namespaces, libvirtd of the vagrant/hosts backends (testbed/vagrant/)
    from testbed.vagrant import clean as vagrant_clean

    removed += vagrant_clean.undo(name, rdir, state)
    # fault resources (interposers, tbf qdiscs, iptables rules, SIGSTOPs) by their record
    removed += netops.undo_recorded(state)
    removed += kill_tagged(name)
    by_hash = names.ours([names.short_hash(name)])
    if names.short_hash(name) in live_hashes(but=name):  # a live testbed's hash: not ours
        by_hash = []
    removed += delete_interfaces(recorded_interfaces(state) + by_hash)
    removed += remove_files(rdir, root)
    return removed


def live_hashes(but: str | None = None) -> set[str]:
    """Hashes of every testbed (but ``but``) that has a live tagged process (any RUNROOT)."""
    return {names.short_hash(tag) for tag in runstate.tagged_pids().values() if tag != but}


def clean_all(root: str | Path | None = None) -> list[str]:
    """``testbed clean``: every testbed under RUNROOT, then orphaned interfaces of ours."""
    removed: list[str] = []
    for name in runstate.list_testbeds(root):
        removed += clean_testbed(name, root)
    alive = live_hashes()
    orphans = [n for n in names.ours() if names.hash_of(n) not in alive]
    removed += delete_interfaces(orphans)
    # by-netns links into run directories that no longer exist
    try:
        links = sorted(runstate.by_netns_dir(root).iterdir())
    except OSError:
        links = []
    for link in links:
        try:
            target = Path(os.readlink(link))
        except OSError:
            continue
        if not target.parent.parent.exists():  # its run directory is gone
            link.unlink(missing_ok=True)
            removed.append(f"link {link}")
    return removed


def leftover_key(removed: str) -> str:
    """The :func:`leftovers` name of one thing :func:`clean_testbed` says it removed
    (``process 123 of testbed t`` -> ``process 123``): how ``down`` tells that a thing in its
    inventory and one it removed are the same (issue 27 item 13: each daemon left by a killed
    supervisor was listed twice)."""
    head, sep, _ = removed.partition(" of testbed ")
    return head if sep and head.startswith("process ") else removed


def inventory(name: str, root: str | Path | None = None) -> dict[str, str]:
    """What of testbed ``name`` is present now, as :func:`leftovers` names it, with what
    each thing is (from its state file): ``{"process 123": "process 123 (supervisor)"}``.
    ``down`` takes one before and proves each gone after (issue 18: it says what it
    removed)."""
    state = runstate.read_state(runstate.rundir(name, root))
    roles: dict[str, str] = {}
    pid = state.get("supervisor_pid")
    server = "sim server" if state.get("backend") == "sim" else "supervisor"
    roles[f"process {pid}"] = server
    nodes = state.get("nodes") if isinstance(state.get("nodes"), dict) else {}
    for node, info in nodes.items():
        if isinstance(info, dict):
            roles[f"process {info.get('daemon_pid')}"] = f"node daemon {node}"
            roles[f"process {info.get('host_pid')}"] = \
                f"Mininet host {node}: its network namespace"
    created = state.get("created") if isinstance(state.get("created"), list) else []
    for item in created:
        if isinstance(item, dict) and item.get("kind") == "bridge":
            roles[f"interface {item.get('name')}"] = f"bridge of {item.get('segment')}"
        elif isinstance(item, dict) and item.get("kind") == "veth":
            roles[f"interface {item.get('name')}"] = \
                f"veth of {item.get('node')} {item.get('iface')}"
    return {k: f"{k} ({roles[k]})" if k in roles else k for k in leftovers(name, root)}


def leftovers(name: str, root: str | Path | None = None) -> list[str]:
    """What of testbed ``name`` is still present: processes, interfaces, links, run directory.

    Namespaces of a Mininet host live exactly as long as a process is in them, and every such
    process is tagged, so "no tagged process" also means "no namespace".
    """
    found = [f"process {pid}" for pid in sorted(runstate.tagged_pids(name))]
    rdir = runstate.rundir(name, root)
    found += netops.recorded_leftovers(runstate.read_state(rdir))  # faults (issue 5)
    found += [f"interface {n}" for n in names.ours([names.short_hash(name)])]
    rdir = runstate.rundir(name, root)
    found += [f"link {link}" for link in runstate.netns_links(rdir, root)]
    from testbed.vagrant import clean as vagrant_clean  # guests, VXLANs, hosts' namespaces

    found += vagrant_clean.leftovers(name)
    if rdir.exists():
        found.append(f"directory {rdir}")
    return found
