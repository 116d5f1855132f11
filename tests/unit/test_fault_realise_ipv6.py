"""Faults on nodes with IPv6 addresses (large NIDs, issue 26 item 8): DROP rules on IPv6
traffic are ip6tables rules; the NFQUEUE interposer (IPv4 and lnet_hdr_nid4 only) is refused
on a node with large NIDs."""

from __future__ import annotations

import pytest

from faults.realise import Activation, NodeSite, Site, resources_for
from faults.resources import IptablesRule
from faults.spec import FaultError, parse_fault

SITE = Site(nodes={
    "c1": NodeSite(name="c1", ns_pid=11, interfaces=("eth0",), ips=("2001:db8:16::1",),
                   nids=("2001:db8:16::1@tcp6",), ports={"eth0": "tb-c1-0"}, daemon_pid=1),
    "r1": NodeSite(name="r1", ns_pid=22, interfaces=("eth0", "eth1"),
                   ips=("2001:db8:16::2", "10.40.0.1"),
                   nids=("2001:db8:16::2@tcp6", "10.40.0.1@tcp"),
                   ports={"eth0": "tb-r1-0", "eth1": "tb-r1-1"}, daemon_pid=2),
}, fault_dir="/run/tb/faults")
ACT = Activation(fid="f1", k=0, seed=1, queue=3)
NODES = {"c1": ["eth0"], "r1": ["eth0", "eth1"]}


def _rules(raw: dict[str, object]) -> list[tuple[str, tuple[str, ...]]]:
    out = resources_for(parse_fault(raw, nodes=NODES), SITE, ACT)
    return [(r.tool, r.rule) for r in out if isinstance(r, IptablesRule)]


def test_partition_uses_the_address_family_of_each_address() -> None:
    rules = _rules({"kind": "partition", "a": ["c1"], "b": ["r1"]})
    by_dst = {rule[rule.index("-d") + 1]: tool for tool, rule in rules}
    assert by_dst == {"2001:db8:16::2": "ip6tables", "10.40.0.1": "iptables",
                      "2001:db8:16::1": "ip6tables"}


def test_blackhole_on_a_node_with_ipv6_drops_both_families() -> None:
    rules = _rules({"kind": "blackhole", "node": "c1", "direction": "both"})
    assert sorted(tool for tool, _ in rules) == ["ip6tables", "ip6tables", "iptables",
                                                 "iptables"]


def test_interposer_refused_on_large_nids_in_one_line() -> None:
    with pytest.raises(FaultError, match="c1 has large \\(IPv6\\) NIDs") as info:
        resources_for(parse_fault({"kind": "loss", "node": "c1", "rate": 0.5}, nodes=NODES),
                      SITE, ACT)
    assert "\n" not in str(info.value)
