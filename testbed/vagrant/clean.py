"""What ``testbed clean`` and ``down`` know of the ``vagrant``/``hosts`` backends' resources.

Theory of operation (STYLE rule 9): everything these backends make is in the testbed's
``state.json`` before it exists: hosts where an agent set up namespaces and daemons
(``host_agent``; reached again with the SSH parameters recorded under ``hosts``), the Vagrant
environment and the names of its guests (``vagrant_env``), bridges, the libvirt management
network, the reserved management subnet and the use of libvirtd (``service``). ``undo`` walks
that record newest first: agents' ``teardown`` on every host (bounded; an unreachable host is
reported, not waited for), then ``guests.destroy_recorded`` (``vagrant destroy -f``, then
containers, domains, networks and bridges by their recorded names, libvirtd released).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from testbed.vagrant import guests
from testbed.vagrant.hostset import HOSTS_ROOT, SITE_ROOT
from testbed.vagrant.shell import Shell, SshShell

AGENT_TIMEOUT = 60.0


def shell_record(shell: Shell) -> dict[str, Any]:
    """How to reach a host again (state.json)."""
    if isinstance(shell, SshShell):
        return {"reach": "ssh", "ssh": shell.target, "port": shell.port, "key": shell.key,
                "user": shell.user}
    return {"reach": "local"}


def shell_from_record(name: str, rec: dict[str, Any], ssh_dir: Path) -> Shell:
    if rec.get("reach") != "ssh":
        return Shell()
    return SshShell(name, rec["ssh"], port=int(rec.get("port") or 22), key=rec.get("key"),
                    user=rec.get("user") or "root", ssh_dir=ssh_dir)


def agents(state: dict[str, Any], rdir: Path | None = None) -> list[str]:
    """Agent ``teardown`` on every recorded host of the testbed."""
    name = str(state.get("name", ""))
    removed = []
    for item in state.get("created", []):
        if not isinstance(item, dict) or item.get("kind") != "host_agent":
            continue
        host = str(item.get("name"))
        rec = state.get("hosts", {}).get(host, {})
        if rec.get("reach") == "local":
            python, path = sys.executable, str(Path(__file__).resolve().parents[2])
        elif rec.get("reach") != "ssh":
            continue  # a guest never reached: destroying it is enough
        else:
            python, path = "python3", f"{SITE_ROOT}/{name}/{host}/site"
        shell = shell_from_record(host, rec, (rdir or Path("/nonexistent")) / "ssh")
        res = shell.run(["env", f"PYTHONPATH={path}", python, "-m", "testbed.vagrant.agent",
                         "teardown", "--testbed", name, "--host", host],
                        timeout=AGENT_TIMEOUT)
        try:
            reply = json.loads(res.out.strip().splitlines()[-1])
            removed += [f"{host}: {r}" for r in reply.get("removed", [])]
        except (ValueError, IndexError):
            removed.append(f"{host}: agent teardown failed: {(res.err or res.out).strip()[-200:]}")
        shell.close()
    return removed


def is_ours(state: dict[str, Any]) -> bool:
    return state.get("backend") in ("vagrant", "hosts")


def undo(name: str, rdir: Path, state: dict[str, Any]) -> list[str]:
    """Everything of a vagrant/hosts testbed whose supervisor is gone (``testbed clean``)."""
    if not is_ours(state):
        return []
    created = [c for c in state.get("created", []) if isinstance(c, dict)]
    return agents(state, rdir) + guests.destroy_recorded(name, rdir, created)


def leftovers(name: str) -> list[str]:
    """What of testbed ``name`` these backends could have left on this machine, found by the
    names they give (``lntb-<hash>-*`` guests and networks, ``tb<hash>*`` interfaces), its
    subnet reservation, its hosts directory, and libvirtd if we started it for nobody."""
    import subprocess

    from testbed import names
    from testbed.vagrant import services

    h = names.short_hash(name)
    prefix = f"lntb-{h}-"
    found = []

    def lines(argv: list[str]) -> list[str]:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return res.stdout.split() if res.returncode == 0 else []

    found += [f"container {c}" for c in lines(["lxc-ls", "-1"]) if c.startswith(prefix)]
    if any(services.daemon_pid(pf, n) for n, pf in services.DAEMONS):
        virsh = [*guests.VIRSH]
        found += [f"domain {d}" for d in lines([*virsh, "list", "--all", "--name"])
                  if d.startswith(prefix)]
        found += [f"libvirt network {n}" for n in lines([*virsh, "net-list", "--all",
                                                         "--name"]) if n.startswith(prefix)]
    found += [f"interface {i.name}" for i in Path("/sys/class/net").iterdir()  # ones the
              if i.name.startswith(f"tb{h}") and names.hash_of(i.name) is None]  # generic
    #                                                   leftovers() does not already list
    for res in guests.SUBNETS.glob("*"):
        try:
            if res.read_text() == name:
                found.append(f"subnet reservation {res.name}")
        except OSError:
            continue
    for root in (HOSTS_ROOT, SITE_ROOT):
        if Path(root, name).exists():
            found.append(f"directory {root}/{name}")
    if name in services.users():
        found.append("libvirtd still counts this testbed as a user")
    return found


def host_daemons_left() -> list[str]:
    """libvirtd/virtlogd we started although no testbed uses them any more."""
    from testbed.vagrant import services

    data = services.read_record()
    if data["users"]:
        return []
    return [f"{n} (pid {p})" for n, p in data["started"].items()
            if Path(f"/proc/{p}").exists()]
