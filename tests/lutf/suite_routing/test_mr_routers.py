"""Multi-Rail routers on topologies/mr-routers.yaml (seed 002, seed 003, lib-move.c).

MR forwarding on the final hop (``lnet_mr_forwarding_allowed``) is proven on Mininet by
test_mr_forwarding.py (health lowered on the router, no link change: on this topology taking
one of s1's links down also breaks the reverse path of connections from the routers' other
subnet, weak host model, see docs/differences.md socklnd device binding); its per-attempt
decision and the router's discovery of the final destination on the fabric by
tests/unit/test_route_alive.py.

c1 (two NIs on tcp) -- r1, r2 (two NIs on tcp, two on tcp1) -- s1 (two NIs on tcp1). Runs on
both backends; waiting uses ``tb.advance``.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import advance_until as _until
from lutf.lnet_views import local_nis, ok, stats

pytestmark = [pytest.mark.mininet, pytest.mark.slow, pytest.mark.topology("mr-routers")]



def _nids(node: Any, net: str) -> list[str]:
    return sorted(n for n in local_nis(node, 1) if n.endswith("@" + net))


def _routes_up(tb: Any, name: str) -> None:
    def up() -> bool:
        view = tb.node(name).yaml("route show -v") or {"route": []}
        return bool(view["route"]) and all(r["state"] == "up" for r in view["route"])
    _until(tb, up, 20, f"routes of {name} up")


@pytest.mark.requirement("hlth-lnt-router-any-ni")
def test_router_resends_forwarded_message_over_another_local_ni(topology: Any) -> None:
    """Seed 003 (real LNet: a forwarded message is ``msg_routing``, so
    ``lnet_handle_any_local_nmr_dst`` may pick any local NI on the destination net, and a
    failed send is resent with full reselection): every second PUT r1 sends fails in its LND
    with LOCAL_DROPPED (``lctl net_drop_add -r 2 -e local_dropped``); r1 resends each at
    once, from its healthier tcp1 NI, so every PUT of c1 completes (c1 never sees the
    failures), r1 counts the resends and both its tcp1 NIs carried PUTs. The drop point is
    random within each window of 2 (``lnet_drop_rule_match``), so a PUT whose resends wait
    for credits behind others may be dropped on every try: r1 gives it up
    (``failed_resends``) and c1's PUT ends at its response timeout; rare, and only that."""
    tb = topology
    c1, r1, s1 = tb.node("c1"), tb.node("r1"), tb.node("s1")
    _routes_up(tb, "c1")
    _routes_up(tb, "s1")
    dst = _nids(s1, "tcp1")[0]
    ok(r1, "lctl", "net_drop_add -s * -d * -r 2 -m put -e local_dropped")
    before = stats(r1)
    nis_before = local_nis(r1)
    res = c1.put(dst, count=40, size=1024)
    after = stats(r1)
    exhausted = after["failed_resends"] - before["failed_resends"]
    assert exhausted <= 2 and res["completed"] == 40 - exhausted, (res, exhausted)
    assert (res.get("errors") or {}) == ({"UNLINK:-110": exhausted} if exhausted else {}), res
    assert after["local_dropped_count"] > before["local_dropped_count"]
    assert after["resend_count"] > before["resend_count"]
    sent = {nid: local_nis(r1)[nid]["statistics"]["send_count"]
            - nis_before[nid]["statistics"]["send_count"] for nid in _nids(r1, "tcp1")}
    assert all(v > 0 for v in sent.values()), sent  # both local NIs carried PUTs
