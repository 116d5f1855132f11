"""Bare LXC containers that play machines, for the ``hosts`` backend on one box.

Theory of operation (issue 15 item 4: "on one box this is tested with two LXC containers
playing two hosts"): ``Sandbox.up(name, hosts)`` makes, with the same box and the same Vagrant
settings as the ``vagrant`` backend (``guests``, ``vagrantfile``), one container per host name
on a private management bridge, nothing else: no node, no segment NIC. Each is then a machine
reached over SSH (``user``, ``address``, ``key``) that a topology's ``hosts:`` can name, and
whose eth0 is the underlay the ``hosts`` backend runs its VXLANs over. The sandbox has a run
directory and a state file like a testbed (``backend: vagrant``, no supervisor), so
``testbed clean`` removes it too; ``down`` removes it at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import names, runstate
from testbed.vagrant import boxes, guests, rtbudget
from testbed.vagrant import vagrantfile as vf


@dataclass(frozen=True)
class Machine:
    name: str
    address: str
    user: str
    key: str

    def hosts_entry(self) -> dict[str, Any]:
        """This machine as a topology ``hosts:`` entry."""
        return {"ssh": f"{self.user}@{self.address}", "key": self.key}


class Sandbox:
    def __init__(self, name: str, rdir: Path, machines: list[Machine]) -> None:
        self.name, self.rdir, self.machines = name, rdir, machines

    @classmethod
    def up(cls, name: str, hosts: list[str]) -> Sandbox:
        """Containers named ``hosts`` (``lntb-<hash>-<host>``), booted and reachable."""
        rdir = runstate.create_rundir(name)
        state: dict[str, Any] = {"name": name, "backend": "vagrant", "provider": "lxc",
                                 "phase": "sandbox", "created": [], "hosts": {}}

        def record(kind: str, **fields: Any) -> None:
            state["created"].append({"kind": kind, **fields})
            runstate.write_state(rdir, state)

        record("sandbox")
        try:
            box = str(boxes.ensure_boxes()["box"])
            net = guests.reserve_subnet(name, "lxc")
            record("subnet", name=str(net))
            h = names.short_hash(name)
            bridge = f"tb{h}m0"
            record("bridge", name=bridge)
            guests.make_bridge(bridge, f"{next(net.hosts())}/{net.prefixlen}")
            ips = list(net.hosts())
            gl = [vf.Guest(g, f"lntb-{h}-{g}", str(ips[9 + i]), (), vf.mac_for(h, i, 0xFF))
                  for i, g in enumerate(hosts)]
            lay = vf.Layout(name, "lxc", box, mgmt_bridge=bridge,
                            mgmt_prefixlen=net.prefixlen,
                            lxc_rt_us=rtbudget.guest_rt_us(len(gl)))  # as guests.py
            vdir = rdir / "vagrant"
            vdir.mkdir(mode=0o700)
            (vdir / "Vagrantfile").write_text(vf.render(lay, gl))
            record("vagrant_env", name=str(vdir), provider="lxc",
                   machines=[g.machine for g in gl])
            proc = guests.vagrant(rdir, "up", "--provider", "lxc", "--no-provision",
                                  timeout=guests.UP_TIMEOUT["lxc"] * len(gl),
                                  log=rdir / "vagrant.log")
            if proc.returncode != 0:
                raise guests.GuestError(f"vagrant up: {guests.last_words(proc.stdout)}")
            conf = guests.parse_ssh_config(guests.vagrant(rdir, "ssh-config", timeout=120)
                                           .stdout)
            machines = [Machine(g, conf[g]["hostname"], conf[g]["user"],
                                conf[g]["identityfile"]) for g in hosts]
        except BaseException:
            guests.destroy_recorded(name, rdir, state["created"])
            with contextlib.suppress(OSError):
                runstate.write_state(rdir, {})
            from testbed import clean

            clean.remove_files(rdir)
            raise
        return cls(name, rdir, machines)

    def subnet(self) -> ipaddress.IPv4Network:
        state = runstate.read_state(self.rdir)
        return ipaddress.ip_network(next(c["name"] for c in state["created"]
                                         if c["kind"] == "subnet"))

    def down(self) -> list[str]:
        from testbed import clean

        state = runstate.read_state(self.rdir)
        removed = guests.destroy_recorded(self.name, self.rdir, state.get("created", []))
        return removed + clean.remove_files(self.rdir)
