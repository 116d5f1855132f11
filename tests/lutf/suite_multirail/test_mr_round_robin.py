"""Round robin over equal rails, one message at a time (seed 000 Figure 2 topology; spec §2.4,
§2.5, §2.7; snd-030, snd-035).

A burst wider than the credits is spread by the credits criterion alone, so it cannot tell
whether LNet still round-robins; PUTs sent one after the other, each completed before the
next, leave every NI and peer NI with all its credits, and only the sequence numbers
``lnet_handle_send`` stamps (``ni_seq``, ``lpni_seq``) choose. Strict alternation follows.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, local_nis, peer_nis, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

ONE_BY_ONE = 8


def _sends(view: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {nid: v["sent_stats"]["put"] for nid, v in view.items()}


@pytest.mark.requirement("snd-030", "snd-035")
def test_single_puts_alternate_over_equal_nis_and_peer_nis(topology: Any) -> None:
    """Real LNet: ``lnet_get_best_ni`` and ``lnet_select_peer_ni`` fall through health,
    priority, NUMA distance and credits to the sequence number when the candidates are equal,
    and ``lnet_handle_send`` bumps the chosen NI's ``ni_seq`` and peer NI's ``lpni_seq``
    (spec §2.7), so the next message takes the other rail. Eight PUTs, each completed before
    the next is sent: ``net show -v 3`` and ``peer show -v 3`` count exactly four PUTs out of
    each of c1's NIs and four to each of s1's NIs; s1's NIs received four each."""
    tb = reset_nodes(topology)
    c1, s1 = tb.node("c1"), tb.node("s1")
    ni0, pni0 = _sends(local_nis(c1)), _sends(peer_nis(c1, S1_NIDS[0]))
    rx0 = {nid: v["received_stats"]["put"] for nid, v in local_nis(s1).items()}
    for _ in range(ONE_BY_ONE):
        reply = c1.put(S1_NIDS[0], count=1, size=1024)
        assert reply["completed"] == 1, reply
    half = ONE_BY_ONE // 2
    assert delta(_sends(local_nis(c1)), ni0) == {C1_NIDS[0]: half, C1_NIDS[1]: half}
    assert delta(_sends(peer_nis(c1, S1_NIDS[0])), pni0) == {S1_NIDS[0]: half,
                                                            S1_NIDS[1]: half}
    rx = {nid: v["received_stats"]["put"] for nid, v in local_nis(s1).items()}
    assert delta(rx, rx0) == {S1_NIDS[0]: half, S1_NIDS[1]: half}
