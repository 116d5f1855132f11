"""Dynamic discovery: ping on first use, push back, feature bits (seed 000 dyn-*; spec §5).

topologies/discovery.yaml: c1 and s1, two rails on net ``tcp``, no static peers. One module
testbed; each test makes its own traffic (xdist may run them on different workers). With no
static peers, a peer holding both NIDs of a node can only come from discovery. Runs on both
backends; waiting uses ``tb.advance`` (wall clock on Mininet, virtual time on the sim).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS
from lutf.lnet_views import advance_until as _poll

pytestmark = [pytest.mark.mininet, pytest.mark.topology("discovery"),
              pytest.mark.xdist_group("suite_discovery")]


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology



def _peer(node: Any, nid: str) -> dict[str, Any] | None:
    res = node.lnetctl("peer show -v 3")
    if res.rc != 0 or not res.out.strip():
        return None
    import yaml

    return next((p for p in yaml.safe_load(res.out)["peer"]
                 if nid in [x["nid"] for x in p["peer ni"]]), None)


@pytest.mark.requirement("dyn-020", "dyn-025", "dyn-040", "bck-030")
def test_first_send_discovers_all_nids(tb: Any) -> None:
    """The first PUT to s1's primary NID waits for a discovery ping whose REPLY lists all of
    s1's NIs; c1's peer show then holds both, Multi-Rail, peer state 273 (0x111)."""
    c1 = tb.node("c1")
    assert c1.put(S1_NIDS[0], count=2)["completed"] == 2
    peer = _peer(c1, S1_NIDS[0])
    assert peer is not None and [x["nid"] for x in peer["peer ni"]] == list(S1_NIDS)
    assert peer["Multi-Rail"] is True and peer["peer state"] == 273


@pytest.mark.requirement("dyn-005", "dyn-015", "dyn-035", "dyn-055")
def test_push_tells_the_passive_side(tb: Any) -> None:
    """Seeing the MULTI_RAIL bit in the reply, c1 pushes its buffer (a PUT on portal 0): s1,
    which never pinged c1, knows both of c1's NIDs."""
    assert tb.node("c1").put(S1_NIDS[1], count=1)["completed"] == 1
    peer = _poll(tb, lambda: _peer(tb.node("s1"), C1_NIDS[0]))
    assert [x["nid"] for x in peer["peer ni"]] == list(C1_NIDS)
    assert peer["Multi-Rail"] is True


@pytest.mark.requirement("dyn-025", "dyn-030")
def test_ping_reply_has_ni_list_and_mr_bit(tb: Any) -> None:
    """lnetctl ping shows the NI list of the reply and the Multi-Rail feature bit."""
    out = tb.node("c1").yaml(f"ping {S1_NIDS[1]}")["ping"][0]
    assert out["Multi-Rail"] is True
    assert [x["nid"] for x in out["peer_ni"]] == list(S1_NIDS)


@pytest.mark.requirement("dyn-040", "dyn-060")
def test_discover_verb_blocks_and_lists_nids(tb: Any) -> None:
    """lnetctl discover [--force] NID returns the peer's NIDs (spec §9.3), a bad NID gives
    an error document and a non-zero status."""
    c1 = tb.node("c1")
    out = c1.yaml(f"discover --force {S1_NIDS[1]}")["discover"][0]
    assert out["primary nid"] == S1_NIDS[0] and out["Multi-Rail"] is True
    bad = c1.lnetctl("discover 10.99.0.1@tcp9")
    assert bad.rc != 0 and "discover:" in bad.err and "errno" in bad.err
