"""Peer-side UDSP priorities steer traffic (issue 14 item 3; cfg-110, cfg-115; spec §7).

A ``--dst NID --priority P`` rule sets that peer NI's ``lpni_sel_priority`` and a ``--dst NET
--priority P`` rule the peer net's ``lpn_sel_priority`` (udsp.c ``lnet_udsp_apply_rule_on_lpni``
/ ``_on_lpn``). Selection compares them right after health: lib-move.c
``lnet_find_best_ni_on_local_net`` prefers the peer net of lowest ``lpn_sel_priority`` before
local net health, priority and round robin, and ``lnet_select_peer_ni`` the peer NI of lowest
``lpni_sel_priority`` before credits and round robin. So under such a rule every PUT to the
Multi-Rail peer s1 arrives on the preferred peer NI (or net); without it they spread over all
three. Counted on s1's own NIs (``received_stats: put``), which selection on c1 cannot fake.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import delta, local_nis, ok, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("mr3.yaml")]

BURST = 60
S1 = ("10.30.0.2@tcp", "10.31.0.2@tcp", "10.32.0.2@tcp1")


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _puts_received(tb: Any, *rules: str) -> dict[str, int]:
    """PUTs each s1 NI received from a burst c1 sends to s1 under UDSP ``rules`` on c1."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    reset_nodes(tb)
    try:
        for rule in rules:
            ok(c1, "lnetctl", f"udsp add {rule}")
        before = {nid: v["received_stats"]["put"] for nid, v in local_nis(s1).items()}
        reply = c1.put(S1[0], count=BURST, size=1024)
        assert reply["ok"] and reply["completed"] == BURST, reply
        after = {nid: v["received_stats"]["put"] for nid, v in local_nis(s1).items()}
    finally:
        ok(c1, "lnetctl", "udsp del --all")
    return delta(after, before)


@pytest.mark.requirement("cfg-095")
def test_without_rules_puts_spread_over_every_peer_ni(tb: Any) -> None:
    """The control: no rule, so both peer nets and both tcp peer NIs take a share."""
    got = _puts_received(tb)
    assert sum(got.values()) == BURST, got
    assert all(got[nid] > 0 for nid in S1), got


@pytest.mark.requirement("cfg-115")
@pytest.mark.parametrize("preferred", [0, 1], ids=["lan0", "lan1"])
def test_dst_nid_priority_picks_the_peer_ni(tb: Any, preferred: int) -> None:
    """``--dst <s1 tcp NID> --priority 0``: of s1's two tcp NIs only the preferred one
    receives; the peer net choice (tcp or tcp1) is not the rule's business, so tcp1 may still
    get its round-robin share."""
    nid, other = S1[preferred], S1[1 - preferred]
    got = _puts_received(tb, f"--dst {nid} --priority 0")
    assert sum(got.values()) == BURST, got
    assert got[other] == 0, got
    assert got[nid] > 0, got


@pytest.mark.requirement("cfg-110")
@pytest.mark.parametrize("net", ["tcp", "tcp1"])
def test_dst_net_priority_picks_the_peer_net(tb: Any, net: str) -> None:
    """``--dst NET --priority 0``: every PUT arrives on s1's NIs of that net."""
    got = _puts_received(tb, f"--dst {net} --priority 0")
    on_net = {nid: n for nid, n in got.items() if nid.endswith(f"@{net}")}
    assert sum(on_net.values()) == BURST, got
    assert sum(got.values()) == BURST, got
