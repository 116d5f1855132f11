"""Router buffer pools per CPT (issue 26 item 10 left them; nodes/lnet/rtrpool.py).

Real behaviour followed: router.c ``lnet_rtrpools_alloc`` (a tiny, small and large pool on
every CPT, each ``lnet_nrb_*_calculate``: the module parameter divided by the CPT count, at
least one), ``lnet_rtrpools_adjust_helper`` (a resize gives each CPT its share), lib-move.c
``lnet_parse`` (``msg_rx_cpt`` = the CPT of the NID the message came from on the receiving
NI) and ``lnet_msg2bufpool`` (the smallest pool of that CPT that holds the payload);
``lnetctl routing show`` prints a ``cpt[N]`` entry per CPT and ``lctl get_param buffers`` a
line per pool per CPT (lnet_debugfs.c ``proc_lnet_buffers``). Both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import ok

pytestmark = [pytest.mark.mininet, pytest.mark.topology("cpt-router.yaml")]

C1, S1 = "10.82.0.1@tcp", "10.83.0.2@tcp1"


def _cpts(router: Any) -> list[dict[str, dict[str, int]]]:
    """``routing show``'s ``cpt[N]`` entries, in order."""
    items = yaml.safe_load(ok(router, "lnetctl", "routing show"))["routing"]
    cpts = [item for item in items if "enable" not in item]
    assert [next(iter(c)) for c in cpts] == [f"cpt[{i}]" for i in range(len(cpts))], items
    return [c[f"cpt[{i}]"] for i, c in enumerate(cpts)]


def test_router_pools_split_per_cpt_and_used_by_the_senders_cpt(topology: Any) -> None:
    c1, r1 = topology.node("c1"), topology.node("r1")
    cpts = _cpts(r1)
    assert [{k: v["nbuffers"] for k, v in c.items()} for c in cpts] == [
        {"tiny": 256, "small": 2048, "large": 128}] * 2, cpts
    buffers = ok(r1, "lctl", "get_param -n buffers").splitlines()
    assert buffers[1:] == [f"{p:>5} {n:>5} {n:>7} {n:>7}"
                           for p, n in ((0, 256), (1, 2048), (256, 128))] * 2, buffers
    assert [e["cpt"] for e in r1.yaml(f"cpt-of-nid {C1} {S1}")["cpt-of-nid"]] == [1, 0]
    res = c1.put(S1, count=50, size=4096)
    assert res["completed"] == 50, res
    cpts = _cpts(r1)
    # c1's PUTs (one page) took CPT 1's small buffers, s1's ACKs (no payload) CPT 0's tiny
    # ones, up to the peer credits in flight; the other CPT saw only discovery's few messages
    low = {(i, k): 256 * (k == "tiny") + 2048 * (k == "small") - c[k]["mincredits"]
           for i, c in enumerate(cpts) for k in ("tiny", "small")}
    assert low[(1, "small")] >= 4 and low[(0, "small")] <= 1, cpts
    assert low[(0, "tiny")] >= 4 and low[(1, "tiny")] <= 1, cpts
    assert all(p["credits"] == p["nbuffers"] for c in cpts for p in c.values()), cpts


def test_router_pool_resize_gives_each_cpt_its_share(topology: Any) -> None:
    """``lnetctl set small_buffers N``: ``lnet_rtrpools_adjust_helper`` sets each CPT's pool
    to N / 2; an odd total rounds down per CPT."""
    r1 = topology.node("r1")
    try:
        ok(r1, "lnetctl", "set small_buffers 5001")
        assert [c["small"]["nbuffers"] for c in _cpts(r1)] == [2500, 2500]
    finally:
        ok(r1, "lnetctl", "set small_buffers 4096")
    assert [c["small"]["nbuffers"] for c in _cpts(r1)] == [2048, 2048]
