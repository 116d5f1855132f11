"""sanity-lnet.sh tests 40, 219, 234, 304, 401, 404, 500: own NIDs consolidated under one peer,
NI status from manual health values, a UDSP priority seen on a peer, a link flap under drop and
delay rules, LNetAddPeer (``lctl add_uuid``) merging a discovered peer into a locked primary, a
locked primary surviving discovery's consolidation, UDSP priorities on own-NID peers across an
``export --backup`` / ``import`` round trip -- each on node ``s`` and its own NIDs, as
sanity-lnet runs them, at lustre-release c881f8ebcb (docs/sanity-lnet.md E1, E2, E7, E16).

``setup_fakeif``'s interface is ``eth1`` of ``s``; ``wait_update`` is ``advance_until``
(virtual time on the sim, where the merge of test 40 is timed exactly)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from lutf.lnet_views import advance_until
from lutf.suite_sanity.sanity import export, import_text, reinit, run

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


def _count_w(text: str, word: str) -> int:
    """``grep -cFw WORD``: lines holding WORD as a whole word."""
    pat = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    return sum(1 for line in text.splitlines() if pat.search(line))


def _lctl(s: Any, cmd: str) -> None:
    res = s.lctl(cmd)
    assert res.rc == 0, f"lctl {cmd}: rc {res.rc}: {res.out}{res.err}"


def test_sanity_40_lnetaddpeer_merges_a_pre_existing_non_primary_peer_nid(tb: Any,
                                                                          s: Any) -> None:
    """sanity-lnet skips unless ``lock_prim_nid`` is 1, its default (api-ni.c), which the
    daemon runs with; ``load_modules_local`` (Lustre's modules, for add_uuid) has no
    counterpart: ``lctl add_uuid`` is always there."""
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    secondary = _nids(s)[0]
    # a primary on a net with no local NI: never in the secondary's ping reply
    primary = secondary.split("@")[0] + "@tcp99"
    uuid = "lnet_add_peer_uuid"
    run(s, f"discover {secondary}")
    assert _count_w(run(s, f"peer show --nid {secondary}").out, primary) == 0
    _lctl(s, f"add_uuid {uuid} {primary}")
    _lctl(s, f"add_uuid {uuid} {secondary}")
    t0 = tb.now
    try:
        advance_until(tb, lambda: _count_w(s.lnetctl(f"peer show --nid {primary}").out,
                                           secondary) == 1,
                      20, f"{secondary} merged into peer {primary}")
    finally:
        _lctl(s, f"del_uuid {uuid}")
    if tb.status().get("backend") == "sim":  # one ping of the secondary: the next poll
        assert tb.now - t0 == pytest.approx(0.25), tb.now - t0
    peer = yaml.safe_load(run(s, f"peer show -v 4 --nid {primary}").out)["peer"][0]
    # the primary stays the locked one Lustre gave first; the secondary's net comes first
    assert (peer["primary nid"], peer["peer state"] & 0x100000) == (primary, 0x100000), peer
    assert [ni["nid"] for ni in peer["peer ni"]] == [secondary, primary], peer


def _state(s: Any, nid: str) -> int:
    """``peer show -v 4 --nid NID | awk '/peer state/{print $NF}'``."""
    return int(yaml.safe_load(run(s, f"peer show -v 4 --nid {nid}").out)
               ["peer"][0]["peer state"])


def test_sanity_304_check_locked_primary_peer_nid_consolidation(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp --if eth1")
    nids = _nids(s)
    nid1, nid2 = nids[0], nids[-1]
    assert (_ni(s, nid1, 0)["status"], _ni(s, nid2, 0)["status"]) == ("up", "up")
    run(s, f"peer add --prim_nid {nid2} --lock_prim")
    # LNET_PEER_MULTI_RAIL(0) | LNET_PEER_CONFIGURED(3) | LNET_PEER_LOCK_PRIMARY(20)
    assert _state(s, nid2) == 1048585
    run(s, f"peer set --nid {nid2} --state 1048577")  # LNET_PEER_CONFIGURED cleared
    assert _state(s, nid2) == 1048577
    run(s, f"discover {nid1}")
    # consolidated into one peer, nid2 staying primary
    assert yaml.safe_load(run(s, "peer show").out) == {"peer": [{
        "primary nid": nid2, "Multi-Rail": True,
        "peer ni": [{"nid": nid1, "state": "NA"}, {"nid": nid2, "state": "NA"}]}]}
    # + LNET_PEER_DISCOVERED(4) | LNET_PEER_NIDS_UPTODATE(8)
    assert _state(s, nid2) == 1048849


def _check_udsp_prio(s: Any, kind: str, net: str, nid: str) -> None:
    """``check_udsp_prio NET NID 1 -1 net|peer``: every NI listed by ``KIND show -v 5`` has
    its priorities (as many ``net priority`` lines as ``- nid`` lines), and the ones on NET
    with NID have net priority 1 and nid priority -1."""
    doc = yaml.safe_load(run(s, f"{kind} show -v 5").out)
    key = "local NI(s)" if kind == "net" else "peer ni"
    nis = [ni for item in doc[kind] for ni in item[key]]
    assert all("udsp info" in ni for ni in nis), nis
    hits = [(ni["udsp info"]["net priority"], ni["udsp info"]["nid priority"])
            for ni in nis if ni["nid"].split("@")[1] == net and ni["nid"] == nid]
    assert hits and all(h == (1, -1) for h in hits), (kind, net, nid, nis)


def _check_udsp_priorities(s: Any, rule_type: str, net: str, nid: str) -> None:
    if rule_type in ("both", "src"):
        _check_udsp_prio(s, "net", net, nid)
    if rule_type in ("both", "dst"):
        _check_udsp_prio(s, "peer", net, nid)


def _do_udsp_test(s: Any, rule_type: str, net: str, nid: str) -> None:
    """``do_udsp_test RULE_TYPE NET NID``."""
    for kind in (("src", "dst") if rule_type == "both" else (rule_type,)):
        run(s, f"udsp add --{kind} {net} --prio 1")
    run(s, f"discover {_nids(s)[0]}")
    _check_udsp_priorities(s, rule_type, net, nid)
    expected = run(s, "export --backup").out
    reinit(s)
    res = import_text(s, expected)
    assert res.rc == 0, res
    assert export(s) == yaml.safe_load(expected)
    run(s, f"discover {_nids(s)[0]}")
    _check_udsp_priorities(s, rule_type, net, nid)


def test_sanity_404_check_udsp_src_dst_net_rule(s: Any) -> None:
    for rule_type in ("src", "dst", "both"):
        reinit(s)
        run(s, "net add --net tcp --if eth0")
        run(s, "net add --net tcp2 --if eth0")
        _do_udsp_test(s, rule_type, "tcp", _nids(s)[0])
        reinit(s)
        run(s, "net add --net tcp --if eth0")
        run(s, "net add --net tcp2 --if eth0")
        nid = _nids(s)[-1]
        run(s, f"discover {_nids(s)[0]}")
        _do_udsp_test(s, rule_type, "tcp2", nid)
