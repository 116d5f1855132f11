"""Multi-Rail and non-Multi-Rail nodes together (seed 000 Backwards Compatibility, bck-025;
dyn-010). topologies/compat.yaml: c1, s1 MR; s2 downrev (nets tcp and tcp1)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.topology("compat"),
              pytest.mark.xdist_group("suite_compat")]

S2 = ("10.10.0.3@tcp", "10.11.0.3@tcp1")


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _peers(node: Any) -> dict[str, dict[str, Any]]:
    res = node.lnetctl("peer show -v 3")
    if res.rc != 0 or not res.out.strip():
        return {}
    import yaml

    return {p["primary nid"]: p for p in yaml.safe_load(res.out)["peer"]}


@pytest.mark.requirement("bck-025")
def test_mr_node_uses_non_mr_peer_on_its_nid_only(tb: Any) -> None:
    """c1 discovers s2 (no MULTI_RAIL bit in its reply): s2 stays a non-MR peer with the one
    NID c1 addressed, and every PUT goes to that NID."""
    c1 = tb.node("c1")
    assert c1.put(S2[0], count=10)["completed"] == 10
    peer = _peers(c1)[S2[0]]
    assert peer["Multi-Rail"] is False
    assert [x["nid"] for x in peer["peer ni"]] == [S2[0]]
    assert S2[1] not in _peers(c1)


@pytest.mark.requirement("bck-025", "dyn-010")
def test_non_mr_node_answers_but_never_discovers(tb: Any) -> None:
    """s2 answers pings without the MR bit and sends to c1 without discovering it (the NID it
    addresses is all it knows); s1 and c1 meanwhile discover each other fully."""
    s2, s1 = tb.node("s2"), tb.node("s1")
    reply = tb.node("s1").yaml(f"ping {S2[1]}")["ping"][0]
    assert reply["Multi-Rail"] is False
    assert s2.put("10.11.0.1@tcp1", count=3)["completed"] == 3
    assert [x["nid"] for x in _peers(s2)["10.11.0.1@tcp1"]["peer ni"]] == ["10.11.0.1@tcp1"]
    assert s1.put("10.10.0.1@tcp", count=1)["completed"] == 1
    mr = _peers(s1)["10.10.0.1@tcp"]
    assert mr["Multi-Rail"] is True
    assert [x["nid"] for x in mr["peer ni"]] == ["10.10.0.1@tcp", "10.11.0.1@tcp1"]
