"""Large (IPv6) NIDs on the ``hosts`` backend and on ``vagrant`` LXC guests (issue 26 item 8:
"on Mininet, vagrant, hosts and the simulator").

The host agent gives a node's interface the plan's IPv6 address (``testbed/vagrant/agentnet.py``
``make_node``: no link-local address, no DAD, IPv4 only where the network has it), the node
daemon binds it (socklnd over AF_INET6, KSOCK_PROTO_V4 as ``ksocknal_create_conn`` picks for an
IPv6 peer), and a packet fault is an ip6tables rule and the NFQUEUE interposer in the node's
namespace (``faults.realise`` sees the node's IPv6 addresses). Two topologies, each brought up
once per backend: topologies/ipv6.yaml (IPv6-only, two rails, ``lnet configure --large``) and
topologies/mixed-v4v6-routed.yaml (c1's IPv6 net routed to s1's IPv4 net through r1).

The ``hosts`` leg runs here as root in seconds (namespaces on this machine, as
tests/vagrant/test_hosts_local.py); the LXC leg is marked ``lxc_guests`` (``make
smoke-vagrant`` runs those; about 40 s per bring-up of two or three containers).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lutf.lnet_views import ok, peer_nis
from testbed.clean import leftovers
from testbed.pytest.fixtures import lnet_backend, unique_name
from testbed.vagrant.boxes import unavailable

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"
C1 = ("2001:db8:6::1@tcp", "2001:db8:7::1@tcp")
S1 = ("2001:db8:6::2@tcp", "2001:db8:7::2@tcp")
R1_V6, R1_V4, S1_V4 = "2001:db8:16::2@tcp6", "10.40.0.1@tcp", "10.40.0.2@tcp"
LEGS = [pytest.param("hosts", id="hosts"),
        pytest.param("vagrant", id="lxc", marks=pytest.mark.lxc_guests)]


def _up(request: pytest.FixtureRequest, topology: str) -> Iterator[Any]:
    backend = str(request.param)
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, bridges, containers)")
    if lnet_backend(request.config).virtual_time:
        pytest.skip("the simulator's pass: these testbeds are processes on hosts")
    kw: dict[str, Any] = {}
    if backend == "vagrant":
        why = unavailable("lxc")
        if why is not None:
            pytest.skip(f"LXC guests: {why}")
        kw["provider"] = "lxc"
    import testbed

    name = unique_name(request.config)
    tb = testbed.up(TOPOLOGIES / f"{topology}.yaml", backend=backend, name=name, **kw)
    try:
        yield tb
    finally:
        tb.down()
    assert leftovers(name) == []


@pytest.fixture(scope="module", params=LEGS)
def v6only(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from _up(request, "ipv6")


@pytest.fixture(scope="module", params=LEGS)
def mixed(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from _up(request, "mixed-v4v6-routed")


def _addresses(node: Any) -> set[tuple[str, str, str]]:
    """(interface, family, address) of every address but loopback's (``ip -o addr show``)."""
    out = set()
    for line in node.exec(["ip", "-o", "addr", "show"]).out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[1] != "lo" and f[2] in ("inet", "inet6"):
            out.add((f[1], f[2], f[3]))
    return out


def test_ipv6_only_interfaces_carry_only_their_planned_address(v6only: Any) -> None:
    """An IPv6-only network's interface has its subnet6 address and nothing else: no IPv4, no
    link-local fe80:: (addr_gen_mode=1), so the NI's address is the one the plan names."""
    assert _addresses(v6only.node("c1")) == {("eth0", "inet6", "2001:db8:6::1/64"),
                                             ("eth1", "inet6", "2001:db8:7::1/64")}
    assert list(v6only.node("c1").nids) == list(C1)


def test_large_nids_bound_discovered_and_carrying_puts(v6only: Any) -> None:
    """``net show`` prints the large NIDs (``lnet configure --large``), the socklnd listens on
    the IPv6 address, a ping lists both of s1's large NIDs (the ping buffer's large-address
    entries) and PUTs over both rails complete."""
    c1 = v6only.node("c1")
    assert "nid: 2001:db8:6::1@tcp\n" in ok(c1, "lnetctl", "net show")
    assert "[2001:db8:6::1]:988" in c1.exec(["ss", "-tln"]).out
    view = c1.yaml(f"ping {S1[0]}")["ping"][0]
    assert view["primary nid"] == S1[0] and [p["nid"] for p in view["peer_ni"]] == list(S1)
    res = c1.put(S1[0], count=32, size=4096)
    assert res["completed"] == 32, res
    sent = {nid: int(p["statistics"]["send_count"]) for nid, p in peer_nis(c1, S1[0]).items()}
    assert set(sent) == set(S1) and all(n > 0 for n in sent.values()), sent


def test_loss_fault_is_an_ip6tables_rule_in_the_node(v6only: Any) -> None:
    """A loss fault on an IPv6-only node: its NFQUEUE rule is in ip6tables too (the node's
    traffic never passes iptables), the interposer drops segments of the PUTs, TCP
    retransmits so every PUT completes, and nothing of the fault is left after it is
    deleted."""
    c1 = v6only.node("c1")
    loss = v6only.fault.add("loss", node="c1", rate=0.3, seed=7, match={"type": "PUT"})
    try:
        assert "lntb:" in c1.exec(["ip6tables", "-S"]).out
        assert c1.put(S1[0], count=20, size=4096)["completed"] == 20
    finally:
        counters = v6only.fault.delete(loss["id"])["counters"]
    assert counters["dropped"] > 0 and counters["messages_matched"] >= 20, counters
    assert "lntb:" not in c1.exec(["ip6tables", "-S"]).out


def test_mixed_routes_up_and_the_ipv4_nid_reached_over_ipv6(mixed: Any) -> None:
    """c1 (IPv6 only) and s1 (IPv4 only) each reach r1; c1's route to tcp through r1's large
    NID is up, and PUTs from c1 to r1's IPv4 NID go through it (a V4 hop carries the nid4
    destination whole)."""
    c1, s1 = mixed.node("c1"), mixed.node("s1")
    assert {a[1] for a in _addresses(c1)} == {"inet6"}
    assert {a[1] for a in _addresses(s1)} == {"inet"}
    route = next(r for r in c1.yaml("route show -v")["route"] if r["net"] == "tcp")
    assert route["gateway"] == R1_V6 and route["state"] == "up", route
    assert c1.put(R1_V4, count=8, size=4096)["completed"] == 8
    assert sorted(ok(s1, "lctl", f"ping {R1_V4}").split()) == sorted(
        ["12345-0@lo", f"12345-{R1_V6}", f"12345-{R1_V4}"])
