"""UDSP NID ranges as ``lnetctl udsp`` takes and prints them (cfg-095, cfg-050, cfg-110;
spec §7.1, §7.4; nidstrings.c ``cfs_parse_nid_parts``, ``cfs_expr_list_parse``,
``cfs_match_nid_net``, ``cfs_expr_list_print``; liblnetconfig ``lustre_lnet_add_udsp``).

A ``--src``/``--dst`` argument is an ip2nets-style range: an LND name with a net number, a
``*`` or a ``[lo-hi/stride,...]`` list, and for a NID rule an address range (four octet ranges
for tcp, one number for gni). What a user sees of it: ``udsp show`` printing the range back
in the kernel's form, the error YAML naming the bad part, the ``udsp info`` priorities of the
NIs and peer NIs a rule matched (``net show -v 4``, ``peer show -v 4``), and where PUTs go.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, lnet_error, local_nis, ok, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

#: (argument as typed, as ``udsp show`` prints it: ``cfs_expr_list_print`` brackets a list of
#: more than one range, prints a single value bare, drops net number 0 and ``/1`` strides)
FORMS = (
    ("src", "10.11.[0-3/2].[1,5-9]@tcp", "10.11.[0-3/2].[1,5-9]@tcp"),
    ("src", "10.[1-2].*.[3-4]@tcp", "10.[1-2].*.[3-4]@tcp"),
    ("src", "10.11.0.[7]@tcp", "10.11.0.7@tcp"),
    ("src", "10.11.0.[0-255/1]@tcp", "10.11.0.[0-255]@tcp"),
    ("dst", "*@tcp", "*@tcp"),
    ("dst", "[22-25]@gni", "[22-25]@gni"),
    ("dst", "[4,9-12/3]@gni3", "[4,9-12/3]@gni3"),
    ("src", "tcp[1-3]", "tcp[1-3]"),
    ("src", "tcp[1,3]", "tcp[1,3]"),
    ("src", "tcp[0]", "tcp"),
    ("src", "o2ib7", "o2ib7"),
    ("dst", "o2ib[2-4/2]", "o2ib[2-4/2]"),
)


def _errno_descr(res: Any) -> tuple[int, str]:
    assert res.rc != 0, res.out
    entry = lnet_error(res)
    return entry["errno"], entry["descr"]


@pytest.mark.requirement("cfg-095", "cfg-050")
def test_udsp_show_prints_every_range_form_back(topology: Any) -> None:
    """Real LNet: ``udsp show`` prints each descriptor with ``cfs_expr_list_print`` (a list
    bracketed, one value bare, a ``*`` as written; ``lustre_lnet_nid_descr2str`` drops net
    number 0). Twelve rules, one per form: their ``src``/``dst`` come back as the table says,
    in the order added, each with its priority."""
    c1 = topology.node("c1")
    try:
        for i, (key, typed, _shown) in enumerate(FORMS):
            ok(c1, "lnetctl", f"udsp add --{key} {typed} --priority {10 + i}")
        rules = yaml.safe_load(ok(c1, "lnetctl", "udsp show"))["udsp"]
        assert [(r["idx"], r.get("src") or r.get("dst"), r["action"]["priority"])
                for r in rules] == [(i, shown, 10 + i) for i, (_, _, shown) in enumerate(FORMS)]
        assert [next(k for k in ("src", "dst") if k in r) for r in rules] == [
            key for key, _, _ in FORMS]
    finally:
        ok(c1, "lnetctl", "udsp del --all")


#: (argument, what the error says after "invalid NID range 'ARG': ") for ``--src``
BAD = (
    ("lo1", "the lo net takes no number"),
    ("foo3", "unknown net type in 'foo3'"),
    ("10.1.1.256@tcp", "256 is larger than 255"),
    ("10.1.1.255@tcp65536", "65536 is larger than 65535"),
    ("10.1.1.[5-3]@tcp", "bad range '5-3' (need lo <= hi <= 255, stride >= 1)"),
    ("10.1.1.[1-256]@tcp", "bad range '1-256' (need lo <= hi <= 255, stride >= 1)"),
    ("10.1.1.[1-3/0]@tcp", "bad range '1-3/0' (need lo <= hi <= 255, stride >= 1)"),
    ("10.1.1.[]@tcp", "cannot parse '[]'"),
    ("10.1.1.[3@tcp", "cannot parse '[3'"),
    ("10.1.1.3]@tcp", "cannot parse '3]'"),
    ("10.1.1.[3,4@tcp", "cannot parse '[3,4'"),
    ("10.1.1.1@tcp@tcp", "cannot parse '@tcp'"),
    ("1.2@gni", "cannot parse '1.2'"),
    ("10.1.1.[1,a]@tcp", "cannot parse range 'a'"),
    ("10.1.1.[1-2-3]@tcp", "cannot parse range '1-2-3'"),
    ("10.1.1@tcp", "an IPv4 address range needs four parts"),
    ("10.1.1.1.1@tcp", "an IPv4 address range needs four parts"),
    ("[1-4294967296]@gni", "bad range '1-4294967296' (need lo <= hi <= 4294967295, "
                           "stride >= 1)"),
)


@pytest.mark.requirement("cfg-095")
def test_udsp_add_refuses_a_bad_range_naming_it(topology: Any) -> None:
    """Real LNet: ``lustre_lnet_add_udsp`` fails with -EINVAL "failed to parse src
    parameter" when ``cfs_parse_nid_parts`` rejects the range (unknown LND, a number past
    255 or past a net number's 65535, lo > hi, a zero stride, unbalanced brackets, not four
    octets). Each bad argument: errno -22, the error names the argument and what is wrong
    with it, and no rule is added; the largest values that fit (255, 65535, 4294967295) are
    taken."""
    c1 = topology.node("c1")
    try:
        for arg, why in BAD:
            res = c1.lnetctl(f"udsp add --src {arg} --priority 1")
            assert _errno_descr(res) == (
                -22, f"failed to parse src parameter: invalid NID range '{arg}': {why}"), arg
        assert c1.lnetctl("udsp show").out == ""
        for arg in ("10.1.1.255@tcp65535", "[4294967295]@gni", "[0-4294967295/7]@gni"):
            ok(c1, "lnetctl", f"udsp add --dst {arg} --priority 1")
        assert [r["dst"] for r in yaml.safe_load(ok(c1, "lnetctl", "udsp show"))["udsp"]] == [
            "10.1.1.255@tcp65535", "4294967295@gni", "[0-4294967295/7]@gni"]
    finally:
        ok(c1, "lnetctl", "udsp del --all")


@pytest.mark.requirement("cfg-095")
def test_udsp_add_refuses_bad_combinations_and_priorities(topology: Any) -> None:
    """Real LNet: ``lustre_lnet_add_udsp`` takes src+dst, dst+rte or one of them, a priority
    0..4294967295; src+dst+rte and src+rte are -EINVAL with their own message, so is a
    priority past u32."""
    c1 = topology.node("c1")
    try:
        for cmd, descr in (
                ("--src tcp --dst tcp --rte tcp",
                 "The combination of src, dst and rte is not supported"),
                ("--src tcp --rte tcp", "src and rte cannot be combined"),
                ("--src tcp --priority 4294967296", 'Invalid priority "4294967296"')):
            assert _errno_descr(c1.lnetctl(f"udsp add {cmd}")) == (-22, descr), cmd
        ok(c1, "lnetctl", "udsp add --src tcp --priority 4294967295")
        ok(c1, "lnetctl", "udsp add --dst tcp")
        rules = yaml.safe_load(ok(c1, "lnetctl", "udsp show"))["udsp"]
        # cfg-155: a lone dst without a priority gets 0, the highest
        assert [r["action"] for r in rules] == [{"priority": 4294967295}, {"priority": 0}]
    finally:
        ok(c1, "lnetctl", "udsp del --all")


@pytest.mark.requirement("cfg-115", "cfg-050")
def test_net_show_prints_a_nid_priority_as_a_signed_int(topology: Any) -> None:
    """Real lnetctl prints ``udsp info`` priorities through ``(int)`` (liblnetconfig
    ``create_local_udsp_info``): a u32 from 2^31 on shows negative, as the untouched
    UINT_MAX shows -1. Priorities 2147483647 and 2147483648 on c1's two NIDs."""
    c1 = topology.node("c1")
    try:
        ok(c1, "lnetctl", f"udsp add --src {C1_NIDS[0]} --priority 2147483647")
        ok(c1, "lnetctl", f"udsp add --src {C1_NIDS[1]} --priority 2147483648")
        assert _nid_prio(c1) == {C1_NIDS[0]: 2147483647, C1_NIDS[1]: -2147483648}
    finally:
        ok(c1, "lnetctl", "udsp del --all")


def _nid_prio(node: Any) -> dict[str, int]:
    return {nid: ni["udsp info"]["nid priority"] for nid, ni in local_nis(node, 4).items()}


def _put_sends(node: Any) -> dict[str, int]:
    return {nid: ni["sent_stats"]["put"] for nid, ni in local_nis(node).items()}


@pytest.mark.requirement("cfg-095", "cfg-115", "snd-030")
def test_a_stride_range_steers_puts_to_the_nis_it_matches(topology: Any) -> None:
    """Real LNet: ``cfs_match_nid_net`` matches a NID when every octet is in its range, a
    range ``lo-hi/s`` holding lo, lo+s, ...; ``lnet_udsp_apply_prio_rule_on_ni`` writes the
    priority of the NIs matched, and ``lnet_get_best_ni`` prefers the lower priority (spec
    §7.2). ``10.[9-11/2].0.[1-3/2]@tcp`` holds 10.11.0.1 and not 10.10.0.1 (10 is not 9+2k):
    only c1's eth1 gets priority 0, and eight PUTs to s1 all leave by 10.11.0.1; the rule
    ``10.[10-11/2].0.1@tcp`` (10, not 11) turns it round."""
    tb = reset_nodes(topology)
    c1 = tb.node("c1")
    try:
        for rule, preferred in (("10.[9-11/2].0.[1-3/2]@tcp", C1_NIDS[1]),
                                ("10.[10-11/2].0.[0,1]@tcp", C1_NIDS[0])):
            ok(c1, "lnetctl", "udsp del --all")
            ok(c1, "lnetctl", f"udsp add --src {rule} --priority 0")
            assert _nid_prio(c1) == {nid: 0 if nid == preferred else -1 for nid in C1_NIDS}
            before = _put_sends(c1)
            for _ in range(8):
                assert c1.put(S1_NIDS[0], count=1, size=1024)["completed"] == 1
            assert delta(_put_sends(c1), before) == {
                nid: 8 if nid == preferred else 0 for nid in C1_NIDS}, rule
    finally:
        ok(c1, "lnetctl", "udsp del --all")
    assert _nid_prio(c1) == {nid: -1 for nid in C1_NIDS}


#: peers c1 knows only by configuration (never reached): NID, the dst rules that hold it,
#: the ones that do not
PEERS = (
    ("10.1.2.3@tcp", ("10.1.2.3@tcp", "10.1.[2].[1-3]@tcp", "*.*.2.*@tcp"),
     ("10.1.1.3@tcp", "10.1.2.[4-9]@tcp", "3.2.1.10@tcp", "10.1.2.3@tcp1")),
    ("10.7.1.9@tcp2", ("10.7.1.[1-9/4]@tcp[1-3]", "*@tcp2", "10.7.1.9@tcp[2,5]"),
     ("10.7.1.[1-9/3]@tcp2", "10.7.1.9@tcp[3-5]", "*@tcp")),
    ("23@gni", ("[20-26/3]@gni", "[1,23]@gni", "*@gni"),
     ("[22-25/2]@gni", "[24-30]@gni", "23@gni1")),
    ("0@gni2", ("*@gni2", "[0-1]@gni2"), ("[1-9]@gni2", "*@gni")),
)


@pytest.mark.requirement("cfg-095", "cfg-115")
def test_dst_ranges_set_the_priority_of_the_peer_nis_they_match(topology: Any) -> None:
    """Real LNet: a dst NID rule writes the priority of every peer NI whose NID it matches
    (``lnet_udsp_apply_prio_rule_on_lpni`` via ``cfs_match_nid_net``: the LND, the net
    number and each address part in range, octets in order for tcp, one number for gni).
    Three configured peers: each rule that holds a peer's NID shows its priority in that peer
    NI's ``udsp info`` (``peer show -v 4``), each one that does not leaves it at -1."""
    c1 = topology.node("c1")
    try:
        for nid, _, _ in PEERS:
            ok(c1, "lnetctl", f"peer add --prim_nid {nid} --non_mr")
        for nid, hits, misses in PEERS:
            for prio, rule in enumerate((*hits, *misses), start=1):
                ok(c1, "lnetctl", "udsp del --all")
                ok(c1, "lnetctl", f"udsp add --dst {rule} --priority {prio}")
                view = c1.yaml(f"peer show -v 4 --nid {nid}")["peer"][0]["peer ni"][0]
                want = prio if rule in hits else -1
                assert view["udsp info"]["nid priority"] == want, (nid, rule)
    finally:
        ok(c1, "lnetctl", "udsp del --all")
        for nid, _, _ in PEERS:
            c1.lnetctl(f"peer del --prim_nid {nid}")
