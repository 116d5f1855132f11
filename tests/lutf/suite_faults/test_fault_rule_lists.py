"""LNet's own delay and drop rules as ``lctl net_*_list`` and ``lnetctl fault * show`` print
them, counted against real traffic (spec §8.1, §8.2; lnet/lnet/net_fault.c
``lnet_delay_rule_match_locked``, ``lnet_fault_attr_match``, ``lnet_delay_rule_reset``;
lnet/utils/portals.c ``fault_simul_rule_list``).

A delay rule on s1 matches received messages by source NID, destination NID and message
type; each match is counted (``fs_count``, per type) and, at rate 1, delayed (``ls_delayed``)
by its latency, then delivered. Round robin (the default topology, one PUT at a time) sends
half of c1's PUTs from each of its NIs to each of s1's, so a rule naming one NID sees half.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, local_nis, ok, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

PUTS = 4


def _counts(node: Any, key: str) -> dict[str, int]:
    return {nid: ni[key]["put"] for nid, ni in local_nis(node).items()}


def _rule(node: Any, kind: str) -> dict[str, Any]:
    (rule,) = node.yaml(f"fault {kind} show")["fault"]
    return dict(rule)


def _puts(c1: Any) -> None:
    for _ in range(PUTS):
        assert c1.put(S1_NIDS[0], count=1, size=1024)["completed"] == 1


def _stats(matched: int, delayed: int) -> dict[str, int]:
    return {"ls_delayed": delayed, "fs_count": matched, "fs_put": matched, "fs_ack": 0,
            "fs_get": 0, "fs_reply": 0}


@pytest.mark.requirement("hlth-stt-reset")
def test_delay_rule_counts_the_puts_it_matches_and_resets(topology: Any) -> None:
    """``net_delay_add -s <c1 eth0> -d * -r 1 -l 1 -m put`` on s1, four PUTs from c1 one at a
    time: the two c1 sent from eth0 (``net show -v 3``) are the two the rule matched and
    delayed, all four complete; ``fault delay show`` prints the rule's attributes and counters
    in the kernel's key order and ``net_delay_list`` the same as one line;
    ``net_delay_reset`` zeroes the counters and keeps the rule. Then ``-s * -d <s1 eth1>``
    matches the PUTs s1 received on eth1."""
    tb = reset_nodes(topology)
    c1, s1 = tb.node("c1"), tb.node("s1")
    try:
        out = ok(s1, "lctl", f"net_delay_add -s {C1_NIDS[0]} -d * -r 1 -l 1 -m put")
        assert out == f"Added delay rule {C1_NIDS[0]}-><?> (1/1)\n"
        sent0 = _counts(c1, "sent_stats")
        _puts(c1)
        assert delta(_counts(c1, "sent_stats"), sent0) == {C1_NIDS[0]: 2, C1_NIDS[1]: 2}
        assert _rule(s1, "delay") == {
            "rule_type": "delay", "fa_src": C1_NIDS[0], "fa_dst": "<?>", "fa_ptl_mask": 0,
            "fa_msg_mask": 2, "la_rate": 1, "la_interval": 0, "la_latency": 1,
            **_stats(2, 2)}
        assert ok(s1, "lctl", "net_delay_list") == (
            f"LNet delay rules:\n{C1_NIDS[0]}-><?> (1/1 | 0, latency 1) ptl 0, msg 2, 2/2, "
            "PUT 2, ACK 0, GET 0, REP 0\nfound total 1\n")
        ok(s1, "lctl", "net_delay_reset")
        assert _rule(s1, "delay") | _stats(0, 0) == _rule(s1, "delay")
        assert "0/0, PUT 0" in ok(s1, "lctl", "net_delay_list")
        assert ok(s1, "lctl", "net_delay_del -a") == "Removed 1 delay rules\n"

        ok(s1, "lctl", f"net_delay_add -s * -d {S1_NIDS[1]} -r 1 -l 1 -m put")
        recv0 = _counts(s1, "received_stats")
        _puts(c1)
        assert delta(_counts(s1, "received_stats"), recv0) == {S1_NIDS[0]: 2, S1_NIDS[1]: 2}
        assert _rule(s1, "delay")["fa_dst"] == S1_NIDS[1]
        assert {k: _rule(s1, "delay")[k] for k in _stats(0, 0)} == _stats(2, 2)
    finally:
        ok(s1, "lctl", "net_delay_del -a")


@pytest.mark.requirement("hlth-stt-reset")
def test_drop_rule_lists_its_attributes_and_counts_only_its_type(topology: Any) -> None:
    """A drop rule for GETs from s1's eth0 to c1's eth0, one in three, on c1: PUTs and their
    ACKs do not match its message type, so four PUTs leave every counter at 0;
    ``fault drop show`` and ``net_drop_list`` print its NIDs, rate, masks (``msg 4``: the
    GET bit) and counters; ``net_drop_reset`` leaves it in place."""
    tb = reset_nodes(topology)
    c1 = tb.node("c1")
    try:
        out = ok(c1, "lctl", f"net_drop_add -s {S1_NIDS[0]} -d {C1_NIDS[0]} -r 3 -m get")
        assert out == f"Added drop rule {S1_NIDS[0]}->{C1_NIDS[0]} (1/3)\n"
        _puts(c1)
        want = {"rule_type": "drop", "fa_src": S1_NIDS[0], "fa_dst": C1_NIDS[0],
                "fa_ptl_mask": 0, "fa_msg_mask": 4, "da_rate": 3, "da_interval": 0,
                "ds_dropped": 0, "fs_count": 0, "fs_put": 0, "fs_ack": 0, "fs_get": 0,
                "fs_reply": 0}
        assert _rule(c1, "drop") == want
        line = (f"LNet drop rules:\n{S1_NIDS[0]}->{C1_NIDS[0]} (1/3 | 0) ptl 0, msg 4, 0/0, "
                "PUT 0, ACK 0, GET 0, REP 0\nfound total 1\n")
        assert ok(c1, "lctl", "net_drop_list") == line
        ok(c1, "lctl", "net_drop_reset")
        assert _rule(c1, "drop") == want
    finally:
        ok(c1, "lctl", "net_drop_del -a")
    assert ok(c1, "lctl", "net_drop_list") == "LNet drop rules:\nfound total 0\n"
