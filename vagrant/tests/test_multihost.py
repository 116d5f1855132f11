"""Two hosts over VXLAN: two LXC containers play two machines reached over SSH (issue 15
item 4). The ``hosts`` backend runs c1 on h1 and s1 on h2, each in a namespace; both
segments span the hosts, so each becomes a VXLAN (one VNI each, unicast FDB, MTU 1450).
Multi-Rail traffic crosses both, survives a rail cut, and the event log merges both hosts on
one clock although h2 reports its clock 2 s ahead."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from vgkit import multirail_then_rail_cut

from testbed.clean import leftovers
from testbed.vagrant import vxlan
from testbed.vagrant.boxes import unavailable
from testbed.vagrant.client import VagrantTestbed
from testbed.vagrant.sandbox import Sandbox
from testbed.vagrant.shell import SshShell

pytestmark = pytest.mark.skipif(unavailable("lxc") is not None, reason=str(unavailable("lxc")))


@pytest.fixture(scope="module")
def machines() -> Iterator[Sandbox]:
    import uuid

    box = Sandbox.up(f"hs{uuid.uuid4().hex[:8]}", ["h1", "h2"])
    try:
        yield box
    finally:
        box.down()
        assert leftovers(box.name) == []


def topology(tmp_path: Path, box: Sandbox, name: str) -> Path:
    topo = {"name": name,
            "global": {"health_sensitivity": 100, "retry_count": 2, "transaction_timeout": 10},
            "hosts": {m.name: m.hosts_entry() for m in box.machines},
            "networks": {"lan0": {"lnet": "tcp", "subnet": "10.10.0.0/24"},
                         "lan1": {"lnet": "tcp", "subnet": "10.11.0.0/24"}},
            "nodes": {"c1": {"interfaces": ["lan0", "lan1"], "host": "h1", "peers": ["s1"]},
                      "s1": {"interfaces": ["lan0", "lan1"], "host": "h2", "peers": ["c1"]}}}
    path = tmp_path / "twohosts.yaml"
    path.write_text(yaml.safe_dump(topo))
    return path


def events_of(tb: VagrantTestbed, kind: str, node: str) -> list[dict]:  # type: ignore[type-arg]
    return [e for e in tb.events() if e["kind"] == kind and e.get("node") == node]


def test_two_hosts_vxlan_multirail_rail_cut_and_one_clock(machines: Sandbox, tmp_path: Path,
                                                          tb_name: str) -> None:
    started = time.monotonic()
    tb = VagrantTestbed.up(topology(tmp_path, machines, tb_name), backend="hosts",
                           clock_skew={"h2": 2.0})
    try:
        print(f"two-host bring-up {time.monotonic() - started:.1f}s")
        st = tb.status()
        assert {n: i["host"] for n, i in st["nodes"].items()} == {"c1": "h1", "s1": "h2"}
        c1, s1 = tb.node("c1"), tb.node("s1")
        # the plumbing: a VXLAN per segment, unicast all-zero FDB to the other host, MTU - 50
        h1 = next(m for m in machines.machines if m.name == "h1")
        h2 = next(m for m in machines.machines if m.name == "h2")
        sh1 = SshShell("h1", f"{h1.user}@{h1.address}", key=h1.key, user=h1.user,
                       ssh_dir=tb.rundir / "ssh")
        for seg in (0, 1):
            dev = vxlan.vxlan_name(tb_name, seg)
            link = sh1.run(["ip", "-d", "-j", "link", "show", dev]).out
            info = json.loads(link)[0]
            assert info["linkinfo"]["info_kind"] == "vxlan"
            assert info["linkinfo"]["info_data"]["id"] == vxlan.vni_base(tb_name) + seg
            assert info["mtu"] == 1450
            fdb = sh1.run(["bridge", "fdb", "show", "dev", dev]).out
            assert f"00:00:00:00:00:00 dst {h2.address}" in fdb, fdb
        assert c1.exec(["cat", "/sys/class/net/eth1/mtu"]).out.strip() == "1450"
        # LNet across hosts, both rails
        for nid in s1.nids:
            res = c1.ping(nid)
            assert res.rc == 0, res.err
        multirail_then_rail_cut(tb, "c1", "s1", count=300)
        # one clock: h2 says it is 2 s ahead; its events must still fall in real order
        tb.link("s1", "eth1", "down")   # -> s1 ni_status down, stamped by h2 (+2 s)
        time.sleep(1.5)
        tb.link("c1", "eth1", "up")     # -> c1 ni_status up, stamped by h1
        # wait for exactly the four events asserted below: c1's NI on eth1 back up (ni_link
        # then ni_status, ~0.5 s: the linkwatch's poll) reaches the log only after the next
        # read of h1 (~1 s); c1's other ni_status "up" notices (its eth0 NI's health moving)
        # are no sign of it.
        wanted = {("link_down", "s1", None), ("ni_status", "s1", s1.nids[1]),
                  ("link_up", "c1", None), ("ni_status", "c1", c1.nids[1])}
        deadline = time.monotonic() + 40
        while True:
            events = tb.events()
            ts = [e["t"] for e in events]
            assert ts == sorted(ts), "the merged log is not in time order"
            mark = next((i for i, e in enumerate(events)
                         if e["kind"] == "link_down" and e.get("node") == "s1"), len(events))
            seq = [(e["kind"], e.get("node"), e.get("nid")) for e in events[mark:]
                   if (e["kind"], e.get("node"), e.get("nid")) in wanted]
            if len(seq) >= 4 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [x[:2] for x in seq[:4]] == [("link_down", "s1"), ("ni_status", "s1"),
                                            ("link_up", "c1"), ("ni_status", "c1")], \
            (seq, [(e["kind"], e.get("node"), e.get("nid"), e.get("status"), e["t"])
                   for e in events[mark:]])
        skewed = next(e for e in events_of(tb, "ni_status", "s1") if e["nid"] == s1.nids[1])
        assert skewed["host"] == "h2" and skewed["t_host"] - skewed["t"] == pytest.approx(
            2.0, abs=0.2)
        assert tb.status()["clocks"]["h2"]["offset"] == pytest.approx(2.0, abs=0.2)
    finally:
        removed = tb.down()
    assert leftovers(tb_name) == [], removed
    for m in machines.machines:  # nothing of the testbed left inside the "hosts"
        sh = SshShell(m.name, f"{m.user}@{m.address}", key=m.key, user=m.user,
                      ssh_dir=tmp_path / "ssh")
        assert sh.run(["ip", "netns", "list"]).out.strip() == ""
        assert tb_name not in sh.run(["ls", "/run/lnet-testbed-hosts"]).out
        assert "vxlan" not in sh.run(["ip", "-d", "link"]).out
        sh.close()
