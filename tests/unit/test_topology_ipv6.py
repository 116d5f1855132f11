"""IPv6-only networks in the topology YAML (``subnet6`` alone): large NIDs, ``lnet configure
--large`` on their nodes, and one-line refusals (issue 26 item 8)."""

from __future__ import annotations

import ipaddress
import textwrap
from pathlib import Path

import pytest

from nodes.dlc import commands as C
from testbed.plan import TopologyError, load_topology
from testbed.plan.verbs import local_steps


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "topo.yaml"
    path.write_text(textwrap.dedent(text))
    return load_topology(path)


def test_ipv6_topology_nids_and_configure_large() -> None:
    plan = load_topology("ipv6")
    c1, s1 = plan.node("c1"), plan.node("s1")
    assert c1.nids == ("2001:db8:6::1@tcp", "2001:db8:7::1@tcp")
    assert s1.nids == ("2001:db8:6::2@tcp", "2001:db8:7::2@tcp")
    assert [i.address for i in c1.interfaces] == ["2001:db8:6::1", "2001:db8:7::1"]
    assert not any(i.ipv4 for i in c1.interfaces)
    assert local_steps(c1)[0] == C.LnetConfigure(large=True)


def test_mixed_routed_topology_routes_across_families() -> None:
    plan = load_topology("mixed-v4v6-routed")
    c1, r1, s1 = plan.node("c1"), plan.node("r1"), plan.node("s1")
    assert r1.nids == ("2001:db8:16::2@tcp6", "10.40.0.1@tcp")
    assert [(str(r.net), str(r.gateway)) for r in c1.routes] == [("tcp", "2001:db8:16::2@tcp6")]
    assert [(str(r.net), str(r.gateway)) for r in s1.routes] == [("tcp6", "10.40.0.1@tcp")]
    assert local_steps(c1)[0] == C.LnetConfigure(large=True)
    assert local_steps(r1)[0] == C.LnetConfigure(large=True)
    assert local_steps(s1)[0] == C.LnetConfigure(large=False)  # no IPv6-only interface


def test_dual_stack_network_keeps_ipv4_nids(tmp_path: Path) -> None:
    """``subnet`` and ``subnet6``: both addresses, the NI IPv4 (``lnet_inet_select`` takes an
    interface's IPv4 address first) and no --large needed."""
    plan = _load(tmp_path, """\
        networks:
          lan0: {lnet: tcp, subnet: 10.10.0.0/24, subnet6: "2001:db8:10::/64"}
        nodes:
          c1: {interfaces: [lan0]}
        """)
    c1 = plan.node("c1")  # type: ignore[attr-defined]
    assert c1.nids == ("10.10.0.1@tcp",)
    assert c1.interfaces[0].ip6 == ipaddress.IPv6Address("2001:db8:10::1")
    assert local_steps(c1)[0] == C.LnetConfigure(large=False)


@pytest.mark.parametrize(("body", "field", "why"), [
    ("lan6: {lnet: tcp}", "networks.lan6.subnet", "missing key 'subnet'"),
    ('lan6: {lnet: tcp, subnet6: "2001:db8::/127"}', "networks.lan6.subnet6", "too small"),
    ('lan6: {lnet: tcp, subnet6: "2001:db8:::/64"}', "networks.lan6.subnet6", "bad subnet6"),
    ('lan6: {lnet: tcp, subnet6: "fe80::/64"}', "networks.lan6.subnet6", "link-local"),
    ("lan6: {lnet: tcp, subnet: 0.1.0.0/16}", "networks.lan6.subnet", "0.0.0.0/8"),
])
def test_bad_ipv6_network_one_line(tmp_path: Path, body: str, field: str, why: str) -> None:
    with pytest.raises(TopologyError) as info:
        _load(tmp_path, f"networks:\n  {body}\nnodes:\n  c1: {{interfaces: [lan6]}}\n")
    assert info.value.field == field and why in info.value.reason, str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_ipv6_only_address_cannot_be_pinned(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as info:
        _load(tmp_path, """\
            networks:
              lan6: {lnet: tcp, subnet6: "2001:db8:6::/64"}
            nodes:
              c1: {interfaces: [{lan6: 2001:db8:6::9}]}
            """)
    assert "IPv6-only" in info.value.reason and info.value.line == 4


def test_bad_ipv6_gateway_nid_named(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as info:
        _load(tmp_path, """\
            networks:
              lan6: {lnet: tcp6, subnet6: "2001:db8:6::/64"}
              lan4: {lnet: tcp, subnet: 10.4.0.0/24}
            nodes:
              c1:
                interfaces: [lan6]
                routes: [{net: tcp, gateway: "2001:db8:6:::2@tcp6"}]
              r1: {interfaces: [lan6, lan4], routing: true}
            """)
    assert info.value.line == 7 and "is not an IPv6 address" in info.value.reason


def test_explore_draws_no_routed_pair_across_nid_sizes() -> None:
    """testbed explore's workload and liveness probes: c1 (large NID) and s1 (nid4) never
    reach each other through r1 in today's LNet (the V3 hop cuts c1's NID), so they are no
    routed pair; each keeps r1 as a local peer."""
    from testbed.explore.topo import load

    topo = load("mixed-v4v6-routed")
    assert topo.routed_peers("c1") == [] and topo.routed_peers("s1") == []
    assert topo.mr_peers("c1") == ["r1"] and topo.mr_peers("s1") == ["r1"]
    assert topo.probes() == [("c1", "2001:db8:16::2@tcp6"), ("s1", "10.40.0.1@tcp")]
    routed = load("routed")
    assert routed.routed_peers("c1") == ["s1", "s2"]  # nid4 on both sides: unchanged
