"""Discovery on first use, for learnt and for statically configured peers (seed 000 cfg-085,
dyn-020/040; spec §5.2-5.4). One testbed per test (each starts from an empty peer table);
runs on both backends, waiting with ``tb.advance`` (wall clock on Mininet, virtual time on
the sim).

topologies/discovery.yaml: c1 and s1, two rails on net ``tcp``, no static peers.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, ok
from lutf.lnet_views import advance_until as _poll

pytestmark = [pytest.mark.mininet, pytest.mark.topology("discovery")]

#: lp_state bits (spec §1.3)
MULTI_RAIL, CONFIGURED, DISCOVERED, NIDS_UPTODATE = 0x1, 0x8, 0x10, 0x100


def _peers(node: Any) -> dict[str, dict[str, Any]]:
    """primary nid -> ``peer show -v 3`` entry ({} when there is no peer)."""
    import yaml

    out = ok(node, "lnetctl", "peer show -v 3")
    return {p["primary nid"]: p for p in yaml.safe_load(out)["peer"]} if out.strip() else {}


def _nids(entry: dict[str, Any]) -> list[str]:
    return [x["nid"] for x in entry["peer ni"]]



@pytest.mark.requirement("cfg-085", "dyn-020", "dyn-040")
def test_unconfigured_peer_nids_discovered_on_first_connection(topology: Any) -> None:
    """Real LNet: a peer created by traffic is not up to date, so the first PUT to it waits
    on ``lp_dc_pendq`` for a discovery ping whose REPLY lists all the peer's NIs
    (``lnet_initiate_peer_discovery``, spec §2.2 step 5, §5.2); peer show then has every
    NID of s1 although none was configured, Multi-Rail, peer state 273 (0x111)."""
    c1 = topology.node("c1")
    assert _peers(c1) == {}
    assert c1.put(S1_NIDS[0], count=1)["completed"] == 1
    peer = _peers(c1)[S1_NIDS[0]]
    assert _nids(peer) == list(S1_NIDS) and peer["Multi-Rail"] is True
    assert peer["peer state"] == MULTI_RAIL | DISCOVERED | NIDS_UPTODATE


@pytest.mark.requirement("dyn-020", "dyn-040", "cfg-070")
def test_static_peer_is_discovered_on_first_use(topology: Any) -> None:
    """Real LNet: ``lnetctl peer add`` makes a CONFIGURED|MULTI_RAIL peer that is not
    NIDS_UPTODATE, so it is discovered on first use like any other peer (spec §5.3); the
    merge adds the NIDs it did not configure and keeps the configured ones (DLC wins, §5.4):
    after the first PUT peer show lists both of s1's NIDs, peer state 281 (0x119)."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    ok(c1, "lnetctl", f"peer add --prim_nid {S1_NIDS[0]}")
    before = _peers(c1)[S1_NIDS[0]]
    assert _nids(before) == [S1_NIDS[0]] and before["peer state"] == CONFIGURED | MULTI_RAIL
    assert c1.put(S1_NIDS[0], count=1)["completed"] == 1
    after = _peers(c1)[S1_NIDS[0]]
    assert _nids(after) == list(S1_NIDS)
    assert after["peer state"] == CONFIGURED | MULTI_RAIL | DISCOVERED | NIDS_UPTODATE
    # c1's push told s1 (which never sent anything) both of c1's NIDs (dyn-035/055)
    back = _poll(topology, lambda: _peers(s1).get(C1_NIDS[0]))
    assert _nids(back) == list(C1_NIDS) and back["Multi-Rail"] is True


@pytest.mark.requirement("dyn-040")
def test_static_peer_with_discovery_off_gets_one_ping_round(topology: Any) -> None:
    """Real LNet with ``lnet_peer_discovery_disabled=1`` (``set discovery 0``): the first
    message to a peer still waits for one ping round (``lnet_discover_peer_locked`` runs one
    round, spec §5.3/§11.8) but the merge adds no NID: the configured peer keeps its one
    NID, is marked NO_DISCOVERY and is up to date (peer state 0x11b)."""
    c1 = topology.node("c1")
    ok(c1, "lnetctl", "set discovery 0")
    ok(c1, "lnetctl", f"peer add --prim_nid {S1_NIDS[0]}")
    assert c1.put(S1_NIDS[0], count=1)["completed"] == 1
    peer = _peers(c1)[S1_NIDS[0]]
    assert _nids(peer) == [S1_NIDS[0]]
    assert peer["peer state"] == (CONFIGURED | MULTI_RAIL | DISCOVERED | NIDS_UPTODATE
                                  | 0x2)  # NO_DISCOVERY
