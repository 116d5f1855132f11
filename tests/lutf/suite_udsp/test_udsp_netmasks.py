"""UDSP rules with IPv4 netmasks in CIDR form (issue 26): ``--src``/``--dst``
``ADDR/PREFIX@NET``, the kernel NID-list ``<netmask>`` form (nidstrings.c ``parse_nidrange``
picks it for a ``/`` outside ``[...]``, ``parse_nidmask``/``parse_prefix_len``: an IPv4
prefix 1..32 and required), matched by ``match_nidmask``/``libcfs_ip_in_netmask`` and printed
back by ``udsp show`` as ``print_nidmask`` does. Real ``lnetctl udsp`` takes IPv4 ranges only
(docs/differences.md). Counted on c1's own NIs (``sent_stats: put``) and s1's
(``received_stats: put``), which selection cannot fake. Both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, lnet_error, local_nis, ok, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

BURST = 16


def _burst(tb: Any, rule: str) -> tuple[dict[str, int], dict[str, int]]:
    """PUTs c1's NIs sent and s1's NIs received over a burst c1 sends to s1 under ``rule``."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    try:
        ok(c1, "lnetctl", f"udsp add {rule}")
        sent0 = {n: v["sent_stats"]["put"] for n, v in local_nis(c1).items()}
        recv0 = {n: v["received_stats"]["put"] for n, v in local_nis(s1).items()}
        for _ in range(BURST):
            assert c1.put(S1_NIDS[0], count=1, size=1024)["completed"] == 1
        sent = delta({n: v["sent_stats"]["put"] for n, v in local_nis(c1).items()}, sent0)
        recv = delta({n: v["received_stats"]["put"] for n, v in local_nis(s1).items()}, recv0)
    finally:
        ok(c1, "lnetctl", "udsp del --all")
    return sent, recv


@pytest.mark.requirement("cfg-115", "snd-030")
@pytest.mark.parametrize(("mask", "rail"), [("10.11.0.0/16@tcp", 1), ("10.10.0.77/24@tcp", 0),
                                            ("10.10.0.0/15@tcp", 0)],
                         ids=["lan1-16", "lan0-24-host-bits", "lan0-15"])
def test_src_ipv4_netmask_steers_puts_to_the_ni_inside_it(topology: Any, mask: str,
                                                          rail: int) -> None:
    """``--src MASK --priority 0``: only c1's NI inside the prefix gets priority 0
    (``lnet_udsp_apply_prio_rule_on_ni``), and every PUT leaves by it; a host part in the
    base address (``.77``) does not matter. 10.10.0.0/15 holds both 10.10.0.1 and 10.11.0.1:
    both NIs share the burst, so the single-NI results are the prefix compare."""
    tb = reset_nodes(topology)
    sent, _recv = _burst(tb, f"--src {mask} --priority 0")
    if mask.endswith("/15@tcp"):
        assert sum(sent[n] for n in C1_NIDS) == BURST and all(sent[n] > 0 for n in C1_NIDS), sent
        return
    assert sent[C1_NIDS[rail]] == BURST and sent[C1_NIDS[1 - rail]] == 0, sent


@pytest.mark.requirement("cfg-115")
def test_dst_ipv4_netmask_picks_the_peer_ni_inside_it(topology: Any) -> None:
    """``--dst 10.11.0.0/24@tcp --priority 0``: only s1's 10.11.0.2 receives the burst."""
    tb = reset_nodes(topology)
    ok(tb.node("c1"), "lnetctl", f"discover {S1_NIDS[0]}")
    _sent, recv = _burst(tb, "--dst 10.11.0.0/24@tcp --priority 0")
    assert recv[S1_NIDS[1]] == BURST and recv[S1_NIDS[0]] == 0, recv


BAD = (("10.10.0.0/33@tcp", "IPv4 prefix length '33' is not in 1-32"),
       ("10.10.0.0/@tcp", "IPv4 prefix length '' is not in 1-32"),
       ("10.10.[0-1].0/24@tcp", "an IPv4 netmask takes no '[...]' range in "
                                "'10.10.[0-1].0/24'; write the range as a prefix, "
                                "e.g. 10.0.0.0/24"),
       ("10.10.0/24@tcp", "'10.10.0' is not an IPv4 address"))


@pytest.mark.requirement("cfg-095")
@pytest.mark.parametrize(("arg", "why"), BAD, ids=[a for a, _ in BAD])
def test_udsp_add_refuses_a_bad_ipv4_netmask_naming_it(topology: Any, arg: str,
                                                       why: str) -> None:
    """A prefix past 32, none after ``/``, a range inside a netmask, a bad address
    (``parse_prefix_len``, ``rpc_pton``): errno -22, the argument and the fault named, no
    rule added."""
    c1 = topology.node("c1")
    res = c1.lnetctl(f"udsp add --dst {arg} --priority 1")
    entry = lnet_error(res)
    assert res.rc != 0 and entry["errno"] == -22, entry
    assert entry["descr"] == f"failed to parse dst parameter: invalid NID range '{arg}': {why}"
    assert c1.lnetctl("udsp show").out == ""


@pytest.mark.requirement("cfg-095", "cfg-050")
def test_udsp_show_prints_ipv4_netmasks_back(topology: Any) -> None:
    """``udsp show`` prints the base address as given (``rpc_ntop``: leading zeros gone) and
    ``/prefix`` only under 32; a stride range keeps its ``/`` inside the brackets."""
    c1 = topology.node("c1")
    try:
        ok(c1, "lnetctl", "udsp add --dst 010.11.0.5/024@tcp --priority 1")
        ok(c1, "lnetctl", "udsp add --src 10.10.0.1/32@tcp1 --priority 2")
        ok(c1, "lnetctl", "udsp add --src 10.10.0.[1-9/4]@tcp --priority 3")
        rules = yaml.safe_load(ok(c1, "lnetctl", "udsp show"))["udsp"]
        assert [(r.get("src"), r.get("dst")) for r in rules] == [
            (None, "10.11.0.5/24@tcp"), ("10.10.0.1@tcp1", None), ("10.10.0.[1-9/4]@tcp", None)]
    finally:
        ok(c1, "lnetctl", "udsp del --all")
