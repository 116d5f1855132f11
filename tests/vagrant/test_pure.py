"""The pure parts of the vagrant/hosts backends: placement, VXLAN plan, Vagrantfile, merged
clock (issue 15 items 2 and 4). No root, no guest."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import pytest

from testbed.plan import TopologyError, parse_topology
from testbed.vagrant import eventmerge, guests, placement, vxlan
from testbed.vagrant import vagrantfile as vf

NETS = ("networks:\n  lan0: {lnet: tcp, subnet: 10.10.0.0/24}\n"
        "  lan1: {lnet: tcp, subnet: 10.11.0.0/24}\n")


def plan_of(hosts: str, nodes: str) -> object:
    return parse_topology(f"name: pt\n{hosts}{NETS}nodes:\n{nodes}")


def test_explicit_placement_then_least_loaded_in_order() -> None:
    plan = plan_of("hosts:\n  h1: {ssh: r@10.0.0.1}\n  h2: {ssh: r@10.0.0.2}\n",
                   "  a: {interfaces: [lan0], host: h1}\n  b: {interfaces: [lan0], host: h1}\n"
                   "  c: {interfaces: [lan0]}\n  d: {interfaces: [lan0]}\n"
                   "  e: {interfaces: [lan0]}\n")
    hosts, where = placement.place(plan, "hosts")
    assert where == {"a": "h1", "b": "h1", "c": "h2", "d": "h2", "e": "h1"}
    assert [h.name for h in hosts] == ["h1", "h2"]
    assert hosts[0].user == "r" and hosts[0].ssh_address == "10.0.0.1"


def test_vagrant_without_hosts_is_one_guest_per_node() -> None:
    plan = plan_of("", "  a: {interfaces: [lan0]}\n  b: {interfaces: [lan0]}\n")
    hosts, where = placement.place(plan, "vagrant")
    assert where == {"a": "a", "b": "b"} and [h.name for h in hosts] == ["a", "b"]
    _hosts, here = placement.place(plan, "hosts")
    assert set(here.values()) == {"local"}


def test_vagrant_refuses_ssh_hosts_and_hosts_refuses_two_locals() -> None:
    plan = plan_of("hosts:\n  h1: {ssh: r@10.0.0.1}\n", "  a: {interfaces: [lan0]}\n")
    with pytest.raises(placement.PlacementError, match="reached over SSH"):
        placement.place(plan, "vagrant")
    plan = plan_of("hosts:\n  h1: {}\n  h2: {}\n", "  a: {interfaces: [lan0]}\n"
                   "  b: {interfaces: [lan0]}\n")
    with pytest.raises(placement.PlacementError, match="only one host may be this machine"):
        placement.place(plan, "hosts")
    assert placement.place(plan, "vagrant")[1] == {"a": "h1", "b": "h2"}  # two guests


def test_schema_errors_name_the_line() -> None:
    with pytest.raises(TopologyError, match=r":8: nodes.a.host: unknown host .h9. \(hosts: h1\)"):
        plan_of("hosts:\n  h1: {}\n", "  a: {interfaces: [lan0], host: h9}\n")
    with pytest.raises(TopologyError, match=r"hosts.h1.address: bad IPv4 address"):
        plan_of("hosts:\n  h1: {address: nope}\n", "  a: {interfaces: [lan0]}\n")


def test_spanning_segments_get_one_vni_each_unicast_fdb_and_mtu_minus_50() -> None:
    plan = plan_of("hosts:\n  h1: {ssh: r@10.0.0.1}\n  h2: {ssh: r@10.0.0.2}\n"
                   "  h3: {ssh: r@10.0.0.3}\n",
                   "  a: {interfaces: [lan0, lan1], host: h1}\n"
                   "  b: {interfaces: [lan0, lan1], host: h2}\n"
                   "  c: {interfaces: [lan0], host: h3}\n"
                   "  d: {interfaces: [lan1], host: h2}\n")
    _hosts, where = placement.place(plan, "hosts")
    segs = vxlan.host_segments(plan, where, {"h1": "192.0.2.1", "h2": "192.0.2.2",
                                             "h3": "192.0.2.3"},
                               {"h1": 1500, "h2": 9000, "h3": 1500})
    lan0 = {h: next(s for s in segs[h] if s.name == "lan0") for h in ("h1", "h2", "h3")}
    lan1 = {h: next(s for s in segs[h] if s.name == "lan1") for h in ("h1", "h2")}
    assert "lan1" not in [s.name for s in segs["h3"]]
    assert {s.vxlan.vni for s in lan0.values() if s.vxlan} == {vxlan.vni_base("pt")}
    assert {s.vxlan.vni for s in lan1.values() if s.vxlan} == {vxlan.vni_base("pt") + 1}
    assert lan0["h1"].vxlan is not None and lan0["h1"].vxlan.remotes == ("192.0.2.2",
                                                                          "192.0.2.3")
    assert lan1["h2"].vxlan is not None and lan1["h2"].vxlan.remotes == ("192.0.2.1",)
    assert {s.mtu for s in lan0.values()} == {1450}  # smallest underlay minus 50
    cmds = lan0["h1"].vxlan.argv()
    assert ["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", lan0["h1"].vxlan.device,
            "dst", "192.0.2.3"] in cmds
    assert "group" not in cmds[0]  # unicast, no multicast group


def test_segment_on_one_host_has_no_vxlan() -> None:
    plan = plan_of("hosts:\n  h1: {}\n", "  a: {interfaces: [lan0]}\n"
                   "  b: {interfaces: [lan0]}\n")
    segs = vxlan.host_segments(plan, {"a": "h1", "b": "h1"}, {"h1": "127.0.0.1"},
                               {"h1": 1500})
    assert segs["h1"][0].vxlan is None and segs["h1"][0].mtu == 1500
    assert vxlan.vni_base("pt") != vxlan.vni_base("pu")


def test_vagrantfile_lxc_and_libvirt() -> None:
    nic = vf.Nic("02:aa:bb:cc:00:00", "tbaabbccs0", "tbaabbccs0p0")
    g = vf.Guest("h1", "lntb-aabbcc-h1", "10.213.5.10", (nic,), "02:aa:bb:cc:00:ff")
    text = vf.render(vf.Layout("t", "lxc", "box/x", mgmt_bridge="tbaabbccm0"), [g])
    assert 'lxc.customize "net.1.veth.pair", "tbaabbccs0p0"' in text
    assert 'lxc.ssh_ip_addr = "10.213.5.10"' in text
    assert 'lxc.customize "net.0.hwaddr", "02:aa:bb:cc:00:ff"' in text
    assert "synced_folder \".\", \"/vagrant\", disabled: true" in text
    assert "vm.hostname" not in text
    text = vf.render(vf.Layout("t", "libvirt", "box/x", mgmt_network="m", mgmt_cidr="10.214.5.0/24",
                               libvirt_driver="qemu", domain_prefix="lntb-aabbcc-"),
                     [vf.Guest("h1", "lntb-aabbcc-h1", None, (nic,))])
    assert 'lv.driver = "qemu"' in text and 'lv.management_network_mode = "none"' in text
    assert 'dev: "tbaabbccs0", mode: "bridge", type: "bridge", mac: "02:aa:bb:cc:00:00"' in text
    assert vf._q('a"#{x}') == '"a\\"\\#{x}"'  # no Ruby interpolation from names


def test_ssh_config_parse() -> None:
    conf = guests.parse_ssh_config("Host c1\n  HostName 10.213.1.10\n  User vagrant\n"
                                   "  Port 22\n  IdentityFile /x/private_key\n\nHost s1\n"
                                   "  HostName 10.213.1.11\n")
    assert conf["c1"]["identityfile"] == "/x/private_key"
    assert conf["s1"]["hostname"] == "10.213.1.11"


def test_ssh_config_is_asked_again_until_every_guest_has_an_entry(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """vagrant-libvirt lists a domain only once its DHCP lease is seen, which can come after
    ``vagrant up`` returned (CI 2026-12-03): asked again, bounded, then one line naming it."""
    c1 = "Host c1\n  HostName 10.213.1.10\n  User vagrant\n  Port 22\n  IdentityFile /k\n"
    s1 = "Host s1\n  HostName 10.213.1.11\n  User vagrant\n  Port 22\n  IdentityFile /k\n"
    answers = [s1, s1 + c1]
    asked = []

    def fake(rdir: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        asked.append(args)
        return subprocess.CompletedProcess(["vagrant", *args], 0, answers.pop(0), "")

    monkeypatch.setattr(guests, "vagrant", fake)
    monkeypatch.setattr(guests, "SSH_CONFIG_WAIT", 0.0)
    g = guests.Guests.__new__(guests.Guests)
    g.rdir, g.log = tmp_path, None
    g.hosts = [types.SimpleNamespace(name="c1"), types.SimpleNamespace(name="s1")]
    assert set(g._ssh_configs()) == {"c1", "s1"} and len(asked) == 2
    answers[:] = [s1] * guests.SSH_CONFIG_TRIES
    g.placement, g.nics = {}, {}
    with pytest.raises(guests.GuestError, match="no entry for guest c1 after 6 tries"):
        g.runtimes(None)  # type: ignore[arg-type]


def test_merge_corrects_a_skewed_host_and_releases_in_order() -> None:
    m = eventmerge.Merger()
    m.add_host("h1")
    m.add_host("h2")  # h2's clock is 2 s ahead
    m.push({"t": 100.05, "kind": "link_down", "node": "s1"})
    m.batch("h2", 100.5, 102.51, 100.52, [{"t": 102.3, "kind": "ni_status", "node": "s1"}])
    m.batch("h1", 100.6, 100.6, 100.61, [{"t": 100.4, "kind": "ni_status", "node": "c1"}])
    out = m.release(101.0)
    # uncorrected, s1's ni_status (102.3) would come after c1's (100.4)
    assert [(e["kind"], e["node"]) for e in out] == [("link_down", "s1"), ("ni_status", "s1"),
                                                      ("ni_status", "c1")]
    assert out[1]["t"] == pytest.approx(100.3, abs=0.02) and out[1]["t_host"] == 102.3
    m.push({"t": 100.7, "kind": "late"})
    assert m.release(101.0) == []  # not every host has been read past 100.7 yet
    m.batch("h1", 101.0, 101.0, 101.0, [])
    m.batch("h2", 101.0, 103.0, 101.0, [])
    assert [e["kind"] for e in m.release(101.2)] == ["late"]


def test_clock_filter_keeps_least_delayed_sample() -> None:
    c = eventmerge.HostClock()
    c.sample(0.0, 10.5, 1.0)   # delay 1 s: offset 10.0 +- 0.5
    c.sample(2.0, 12.0, 2.02)  # delay 20 ms: offset 9.99
    c.sample(3.0, 14.0, 4.0)   # worse: ignored
    assert c.offset == pytest.approx(9.99) and c.delay == pytest.approx(0.02)
