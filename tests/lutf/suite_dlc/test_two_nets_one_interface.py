"""Two LNet nets on one interface (cfg-020, cfg-060; lnet/lnet/acceptor.c)."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import local_nis, ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

C1_TCP, C1_TCP7 = "10.11.0.1@tcp", "10.11.0.1@tcp7"
S1_TCP, S1_TCP7 = "10.11.0.2@tcp", "10.11.0.2@tcp7"


def _counts(node: Any, nid: str) -> tuple[int, int]:
    st = local_nis(node)[nid]["statistics"]
    return st["send_count"], st["recv_count"]


def _ping_over(c1: Any, s1: Any, dst: str, src: str) -> None:
    """``lnetctl ping DST --source SRC`` succeeds and LNet traffic crossed both NIs."""
    before_c1, before_s1 = _counts(c1, src), _counts(s1, dst)
    res = c1.ping(dst, source=src, timeout=10)
    assert res.rc == 0 and dst in res.out, res
    after_c1, after_s1 = _counts(c1, src), _counts(s1, dst)
    assert after_c1[0] > before_c1[0] and after_c1[1] > before_c1[1], (before_c1, after_c1)
    assert after_s1[0] > before_s1[0] and after_s1[1] > before_s1[1], (before_s1, after_s1)


@pytest.mark.requirement("cfg-020", "cfg-060")
def test_tcp_and_tcp7_on_one_interface_both_carry_traffic(topology: Any) -> None:
    """Real LNet runs one acceptor (port 988) for all NIs and the connreq names the NI it
    wants (``lnet_accept``), so ``lnetctl net add --net tcp7 --if eth1`` next to the tcp NI
    on eth1 succeeds, a ping over each net lands on its own NI, and ``net del`` of one leaves
    the other accepting new connections (the acceptor goes only with the last NI)."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    for node in (c1, s1):
        ok(node, "lnetctl", "net add --net tcp7 --if eth1")
    assert local_nis(c1)[C1_TCP7]["status"] == "up"
    _ping_over(c1, s1, S1_TCP, C1_TCP)
    _ping_over(c1, s1, S1_TCP7, C1_TCP7)

    ok(s1, "lnetctl", "net del --net tcp --if eth1")
    assert S1_TCP not in local_nis(s1) and S1_TCP7 in local_nis(s1)
    # c1 re-creates its tcp7 NI, so the next ping needs a new connection to s1's acceptor
    ok(c1, "lnetctl", "net del --net tcp7 --if eth1")
    ok(c1, "lnetctl", "net add --net tcp7 --if eth1")
    _ping_over(c1, s1, S1_TCP7, C1_TCP7)
