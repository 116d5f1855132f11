"""Multi-Rail selection over two rails (seed 000 Figure 2 topology; spec §3, snd-*).

Module-scoped testbed: each test measures counter *deltas* around its own traffic.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, local_nis, peer_nis
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

BURST = 400


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _counts(view: dict[str, dict[str, Any]], key: str = "send_count") -> dict[str, int]:
    return {nid: v["statistics"][key] for nid, v in view.items()}


def _typed(view: dict[str, dict[str, Any]], block: str, kind: str) -> dict[str, int]:
    return {nid: v[block][kind] for nid, v in view.items()}


@pytest.mark.requirement("snd-005", "snd-060", "snd-030", "dbg-010", "dbg-050", "dbg-055")
def test_puts_spread_over_both_local_and_peer_nis(tb: Any) -> None:
    """With two healthy rails of equal credits, LNet's selection (health, then credits, then
    round robin: lnet_select_best_ni / lnet_select_peer_ni) uses both local NIs and both peer
    NIs about evenly; each NI's send_count and each peer NI's counters show it (dbg-010,
    dbg-050)."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    ni0, pni0, srv0 = _counts(local_nis(c1)), _counts(peer_nis(c1)), _counts(local_nis(s1),
                                                                              "recv_count")
    reply = c1.put(S1_NIDS[0], count=BURST, size=4096)
    assert reply["ok"] and reply["completed"] == BURST, reply
    ni = delta(_counts(local_nis(c1)), ni0)
    pni = delta(_counts(peer_nis(c1)), pni0)
    srv = delta(_counts(local_nis(s1), "recv_count"), srv0)
    for counts in (ni, pni, srv):
        assert sum(counts.values()) >= BURST, counts
        for nid, n in counts.items():
            assert 0.3 * BURST <= n <= 0.7 * BURST, (nid, counts)  # both rails, about evenly
    assert set(ni) == set(C1_NIDS) and set(pni) == set(S1_NIDS)


@pytest.mark.requirement("snd-030", "snd-035", "dbg-060")
def test_peer_credits_are_used_and_all_returned(tb: Any) -> None:
    """Each PUT takes a peer NI tx credit until the LND is done with it (lnet_post_send_locked
    / lnet_return_tx_credits_locked): a burst wider than peer_credits (8) drives
    min_tx_credits below the maximum on both peer NIs (both were chosen while credits ran
    out on the other, snd-035) and every credit is back afterwards."""
    c1 = tb.node("c1")
    reply = c1.put(S1_NIDS[0], count=BURST, size=65536)
    assert reply["ok"] and reply["completed"] == BURST, reply
    pnis = wait_for(lambda: (v := peer_nis(c1)) and all(
        p["available_tx_credits"] == p["max_ni_tx_credits"] for p in v.values()) and v, 10,
        message="all peer NI tx credits returned")
    for nid, p in pnis.items():
        assert p["min_tx_credits"] < p["max_ni_tx_credits"], (nid, p)
        assert p["tx_q_num_of_buf"] == 0, (nid, p)


@pytest.mark.parametrize("rail", [0, 1], ids=["rail0", "rail1"])
@pytest.mark.requirement("snd-045", "snd-070")
def test_reply_leaves_from_the_nid_the_request_arrived_on(tb: Any, rail: int) -> None:
    """A GET (lnetctl ping) sent from c1's NI on one rail to s1's NI on that rail is
    answered by s1 *from the NI the GET arrived on, to the GET's source NID* (snd-045;
    lnet_parse_get replies with the request's destination NID as source)."""
    c1, s1 = tb.node("c1"), tb.node("s1")
    before_s = _typed(local_nis(s1), "sent_stats", "reply")
    before_c = _typed(local_nis(c1), "received_stats", "reply")
    for _ in range(5):
        res = c1.ping(S1_NIDS[rail], source=C1_NIDS[rail])
        assert res.rc == 0, res
    sent = delta(_typed(local_nis(s1), "sent_stats", "reply"), before_s)
    got = delta(_typed(local_nis(c1), "received_stats", "reply"), before_c)
    assert sent == {S1_NIDS[rail]: 5, S1_NIDS[1 - rail]: 0}
    assert got == {C1_NIDS[rail]: 5, C1_NIDS[1 - rail]: 0}


@pytest.mark.requirement("cfg-020", "snd-060")
def test_source_nid_pins_the_local_ni(tb: Any) -> None:
    """PUTs are spread, but a ping with --source goes out of that NI only: the local NI is
    chosen first, then a peer NI on its net (snd-060)."""
    c1 = tb.node("c1")
    before = _typed(local_nis(c1), "sent_stats", "get")
    for _ in range(4):
        assert c1.ping(S1_NIDS[0], source=C1_NIDS[1]).rc == 0
    assert delta(_typed(local_nis(c1), "sent_stats", "get"), before) == {
        C1_NIDS[1]: 4, C1_NIDS[0]: 0}
