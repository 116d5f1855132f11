"""Faults on nodes with IPv6 addresses (large NIDs, issue 26 item 8): DROP rules on IPv6
traffic are ip6tables rules; the NFQUEUE kinds queue IPv6 traffic through ip6tables too."""

from __future__ import annotations

from faults.realise import Activation, NodeSite, Site, resources_for
from faults.resources import Interposer, IptablesRule
from faults.spec import parse_fault

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


def test_interposer_on_large_nids_queues_both_families() -> None:
    """The NFQUEUE kinds work on a node with large NIDs: the interposer (IPv4 and IPv6,
    socklnd V3 and V4) and an NFQUEUE rule per table and chain."""
    out = resources_for(parse_fault({"kind": "loss", "node": "c1", "rate": 0.5,
                                     "direction": "both"}, nodes=NODES), SITE, ACT)
    assert isinstance(out[0], Interposer)
    assert out[0].interposer.local_nids == ("2001:db8:16::1@tcp6",)
    rules = [(r.tool, r.rule) for r in out if isinstance(r, IptablesRule)]
    assert sorted(tool for tool, _ in rules) == ["ip6tables", "ip6tables", "iptables",
                                                 "iptables"]
    assert all("NFQUEUE" in rule for _, rule in rules)


def test_icmp_match_is_ipv6_icmp_in_ip6tables() -> None:
    rules = _rules({"kind": "loss", "node": "c1", "rate": 0.5, "match": {"proto": "icmp"}})
    protos = {tool: rule[rule.index("-p") + 1] for tool, rule in rules}
    assert protos == {"iptables": "icmp", "ip6tables": "ipv6-icmp"}
