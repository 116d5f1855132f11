"""sanity-lnet.sh tests 219, 234, 401, 500: own NIDs consolidated under one peer, NI status from
manual health values, a UDSP priority seen on a peer, a link flap under drop and delay rules --
each on node ``s`` and its own NIDs, as sanity-lnet runs them, at lustre-release c881f8ebcb.
(404 and 475 need own-NID peers created by traffic and import: docs/sanity-lnet.md E1, E2.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


@pytest.fixture(scope="module")
def s(tb: Any) -> Any:
    return tb.node("s")


def _nids(s: Any) -> list[str]:
    return s.lctl("list_nids").out.split()


def _ni(s: Any, nid: str, verbose: int = 2) -> dict[str, Any]:
    for net in yaml.safe_load(s.lnetctl(f"net show -v {verbose}").out)["net"]:
        for ni in net["local NI(s)"]:
            if ni["nid"] == nid:
                return ni  # type: ignore[no-any-return]
    raise AssertionError(nid)


def test_sanity_219_consolidate_peer_entries(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp1 --if eth0")
    nid1, nid2 = _nids(s)
    run(s, f"ping {nid1}")
    run(s, f"ping {nid2}")
    run(s, f"discover {nid2}")
    assert nid2 in s.lnetctl(f"peer show --nid {nid1}").out


def test_sanity_234_ni_status_with_manual_health_values(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    (nid,) = _nids(s)
    assert (_ni(s, nid)["status"], _ni(s, nid)["health stats"]["health value"]) == ("up",
                                                                                     1000)
    hs = yaml.safe_load(s.lnetctl("global show").out)["global"]["health_sensitivity"]
    run(s, "set health_sensitivity 0")
    try:
        run(s, f"net set --health 0 --nid {nid}")
        assert (_ni(s, nid)["status"], _ni(s, nid)["health stats"]["health value"]) == (
            "down", 0)
        run(s, f"net set --health 1000 --nid {nid}")
        assert (_ni(s, nid)["status"], _ni(s, nid)["health stats"]["health value"]) == (
            "up", 1000)
    finally:
        run(s, f"set health_sensitivity {hs}")


def _prios(s: Any, kind: str) -> list[tuple[str, int, int]]:
    """``check_udsp_prio``'s columns: each NID with its net and nid priority (-v 5)."""
    doc = yaml.safe_load(s.lnetctl(f"{kind} show -v 5").out)
    out = []
    for item in doc[kind]:
        for ni in item["local NI(s)" if kind == "net" else "peer ni"]:
            info = ni.get("udsp info")
            if info is not None:
                out.append((ni["nid"], info["net priority"], info["nid priority"]))
    return out


def test_sanity_401_discover_peer_after_adding_peer_net_udsp_rule(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "udsp add --dst tcp --prio 1")
    run(s, f"discover {_nids(s)[0]}")
    prios = [p for p in _prios(s, "peer") if p[0].endswith("@tcp")]
    assert prios and all(p[1:] == (1, -1) for p in prios), prios


def test_sanity_500_no_deadlock_on_ping_target_update(tb: Any, s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp --if eth1")
    nid1, nid2 = _nids(s)
    run(s, f"discover {nid1}")
    run(s, "fault delay add -s *@tcp -d *@tcp -r 1 -l 1 -m PUT")
    run(s, f"fault drop add -s *@tcp -d {nid1} -m PUT -e local_timeout -r 1")
    run(s, f"fault drop add -s *@tcp -d {nid2} -m PUT -e local_timeout -r 1")
    tb.link("s", "eth1", "down")
    tb.link("s", "eth1", "up")
    run(s, "net show")  # the node still answers: no deadlock
    run(s, "fault drop del -a")
    run(s, "fault delay del -a")
