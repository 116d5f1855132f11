"""sanity-lnet.sh test 303 (a new local NI reaches the multi-rail peer by push, and its link
going down lowers that peer NI's health on the peer), at lustre-release c881f8ebcb. Real
LNet pushes its ping buffer to MR peers when an NI is added (api-ni.c
``lnet_update_ping_buffer`` -> ``lnet_push_update_to_peers``), and the peer lowers the health
of a peer NI whose status moved UP -> DOWN (peer.c ``handle_disc_lpni_health``). Nodes:
``fakeif.yaml``: this host ``s`` (setup_health_test's, multi-rail) and the remote node ``o``;
``s``'s eth1 is setup_fakeif's interface."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import advance_until
from lutf.suite_sanity.sanity import run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("fakeif.yaml")]


def _ni_status(node: Any, nid: str) -> str:
    doc = yaml.safe_load(node.lnetctl("net show").out)
    return " ".join(str(ni["status"]) for net in doc["net"]
                    for ni in net["local NI(s)"] if ni["nid"] == nid)


def _peer(node: Any, nid: str, verbose: str = "") -> dict[str, Any]:
    res = node.lnetctl(f"peer show --nid {nid}{verbose}")
    doc = yaml.safe_load(res.out or "{}") or {}
    return dict(doc["peer"][0]) if res.rc == 0 and doc.get("peer") else {}


def test_sanity_303_peer_ni_health_after_link_down(module_topology: Any) -> None:
    tb = module_topology
    h, rn = tb.node("h"), tb.node("rn")
    for node in (h, rn):  # setup_health_test true: multi-rail, tcp and tcp1 on eth0
        run(node, "lnet unconfigure")
        run(node, "lnet configure")
        run(node, "net add --net tcp --if eth0")
        run(node, "net add --net tcp1 --if eth0")
    run(h, f"discover {rn.lctl('list_nids').out.split()[0]}")
    run(h, "net add --net tcp99 --if eth1")
    nids = h.lctl("list_nids").out.split()
    prim, nid = nids[0], nids[-1]
    assert nid.endswith("@tcp99")
    # our updated configuration is pushed to the remote node
    advance_until(tb, lambda: _peer(rn, nid), 10, f"{nid} known to rn")
    assert _peer(rn, nid)["primary nid"] == prim
    try:
        tb.link("h", "eth1", "down")
        advance_until(tb, lambda: _ni_status(h, nid) == "down", 60, f"{nid} down")

        def health() -> int:
            lpnis = _peer(rn, nid, " -v 2").get("peer ni", [])
            return int(next(n for n in lpnis if n["nid"] == nid)["health stats"]
                       ["health value"])

        advance_until(tb, lambda: health() < 1000, 10, f"{nid} health < 1000 on rn")
    finally:
        tb.link("h", "eth1", "up")
