"""UDSP rules over large (IPv6) NIDs (issue 26): an IPv6 address or ``ADDR/PREFIX`` in
``--src``/``--dst`` (the kernel NID-list ``<netmask>``/``<ipv6_addr>`` forms, nidstrings.c
``parse_nidmask``; matched by ``libcfs_ip_in_netmask``) steers PUTs between the two IPv6 rails
of topologies/ipv6.yaml, and ``udsp show`` prints the rule back as ``print_nidmask`` does.
Real ``lnetctl udsp`` takes only IPv4 ranges (docs/differences.md). Counted on s1's own NIs
(``received_stats: put``) and c1's (``sent_stats: put``), which selection cannot fake.
Both backends; one module testbed.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import delta, lnet_error, local_nis, ok, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("ipv6"),
              pytest.mark.xdist_group("suite_ipv6_udsp")]

BURST = 40
C1 = ("2001:db8:6::1@tcp", "2001:db8:7::1@tcp")
S1 = ("2001:db8:6::2@tcp", "2001:db8:7::2@tcp")


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _burst(tb: Any, *rules: str) -> tuple[dict[str, int], dict[str, int]]:
    """PUTs c1's NIs sent and s1's NIs received over a burst c1 sends to s1 under ``rules``."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    reset_nodes(tb)
    try:
        ok(c1, "lnetctl", f"discover {S1[0]}")
        for rule in rules:
            ok(c1, "lnetctl", f"udsp add {rule}")
        sent0 = {n: v["sent_stats"]["put"] for n, v in local_nis(c1).items()}
        recv0 = {n: v["received_stats"]["put"] for n, v in local_nis(s1).items()}
        reply = c1.put(S1[0], count=BURST, size=1024)
        assert reply["ok"] and reply["completed"] == BURST, reply
        sent = delta({n: v["sent_stats"]["put"] for n, v in local_nis(c1).items()}, sent0)
        recv = delta({n: v["received_stats"]["put"] for n, v in local_nis(s1).items()}, recv0)
    finally:
        ok(c1, "lnetctl", "udsp del --all")
    return sent, recv


def test_without_rules_puts_use_both_ipv6_rails(tb: Any) -> None:
    """The control: Multi-Rail spreads the burst over both of s1's large NIDs."""
    _sent, recv = _burst(tb)
    assert sum(recv.values()) == BURST and all(recv[n] > 0 for n in S1), recv


@pytest.mark.requirement("cfg-115")
@pytest.mark.parametrize("rail", [0, 1], ids=["lan6", "lan7"])
def test_dst_ipv6_prefix_priority_picks_that_rail(tb: Any, rail: int) -> None:
    """``--dst 2001:db8:N::/64@tcp --priority 0``: only s1's NID inside the prefix receives."""
    prefix = ("2001:db8:6::/64@tcp", "2001:db8:7::/64@tcp")[rail]
    _sent, recv = _burst(tb, f"--dst {prefix} --priority 0")
    assert recv[S1[rail]] == BURST and recv[S1[1 - rail]] == 0, recv


@pytest.mark.requirement("cfg-105")
def test_src_ipv6_address_priority_picks_the_local_ni(tb: Any) -> None:
    """``--src <c1's lan7 large NID> --priority 0`` (one address: /128): every PUT leaves
    on that NI."""
    sent, _recv = _burst(tb, f"--src {C1[1]} --priority 0")
    assert sent[C1[1]] == BURST and sent[C1[0]] == 0, sent


def test_udsp_show_prints_ipv6_rules_back_and_refuses_bad_ones(tb: Any) -> None:
    """``udsp show`` prints the address in %pI6c form and ``/prefix`` under 128; a bracket
    range inside an IPv6 address or a prefix past 128: errno -22 naming argument and fault,
    no rule added."""
    c1 = tb.node("c1")
    try:
        for arg, why in (("2001:db8::[1-4]@tcp", "write the range as a prefix"),
                         ("2001:db8:7::/129@tcp", "prefix length '129' is not in 1-128"),
                         ("2001:db8:::2@tcp", "'2001:db8:::2' is not an IPv6 address")):
            res = c1.lnetctl(f"udsp add --dst {arg} --priority 1")
            assert res.rc != 0, res.out
            entry = lnet_error(res)
            assert entry["errno"] == -22, entry
            assert entry["descr"].startswith(
                f"failed to parse dst parameter: invalid NID range '{arg}': "), entry
            assert why in entry["descr"], entry
        assert c1.lnetctl("udsp show").out == ""
        ok(c1, "lnetctl", "udsp add --dst 2001:0DB8:0007::/64@tcp --priority 1")
        ok(c1, "lnetctl", "udsp add --src 2001:db8:6:0::1/128@tcp --priority 2")
        rules = yaml.safe_load(ok(c1, "lnetctl", "udsp show"))["udsp"]
        assert [(r.get("src"), r.get("dst")) for r in rules] == [
            (None, "2001:db8:7::/64@tcp"), ("2001:db8:6::1@tcp", None)], rules
    finally:
        ok(c1, "lnetctl", "udsp del --all")
