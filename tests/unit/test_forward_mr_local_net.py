"""A router forwarding a PUT/GET to a Multi-Rail peer's NID on a remote net sends it over the
peer's net local to the router, addressed to the peer's NID there (lib-move.c
``lnet_select_pathway``: a forwarded message is SRC_ANY + MR_DST; ``lnet_handle_any_mr_dst``
-> ``lnet_handle_any_mr_dsta`` prefers a local peer net to the route, and ``lnet_handle_send``
puts that NID in the header). Kept with the header naming the remote NID, the peer refuses
it as its own NID on another net (``lnet_parse``: -EPROTO) and the PUT's ACK never comes
(explore multihop seed 0, tests/lutf/suite_routing/test_explore_multihop_seed0_any_mr_dsta.py).
"""

from __future__ import annotations

from pathlib import Path

from testbed.explore.replay import Replay
from testbed.observe.pytest_check import events_of
from testbed.sim import SimTestbed

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "multihop.yaml"


def test_lnet_handle_any_mr_dsta_router_forwards_to_mr_peers_local_nid() -> None:
    tb = SimTestbed.up(TOPOLOGY)
    try:
        r = Replay(tb)
        r.at(10.0)  # r1 has discovered its gateway r2 (a Multi-Rail peer: tcp1 and tcp2)
        start = len(events_of(tb))
        ok, what = r.probe("c1", "10.30.0.1@tcp2", 20.0)  # r2's NID on tcp2, 2 hops away
        assert ok, what
        fwd = [e for e in events_of(tb)[start:] if e.get("kind") == "send"
               and e.get("node") == "r1" and e.get("type") == "PUT"
               and e.get("src") == "10.10.0.1@tcp"]
        assert fwd and all(e["dst"] == "10.20.0.2@tcp1" for e in fwd), fwd
    finally:
        tb.down()
