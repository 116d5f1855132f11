"""UDSP rules: syntax, application to constructs, order, delete, show (spec §7; cfg-095..165)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodes.lnet import udsp
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.lpstate import MULTI_RAIL as LNET_PEER_MULTI_RAIL
from nodes.lnet.nid import NID, Net
from testbed.sim import SimTestbed

TOPO = Path(__file__).resolve().parents[2] / "topologies" / "hetero-failover.yaml"
U = udsp.UINT_MAX


def _sim(seed: int) -> SimTestbed:
    """The hetero-failover topology on sim; its ``udsp:`` rules are applied by bring-up with
    the same verbs the Mininet supervisor sends (testbed/plan/verbs.py)."""
    return SimTestbed.up(TOPO, seed=seed)


def _engine() -> LNetEngine:
    eng = LNetEngine()
    eng.configure()
    eng.net_add(Net.parse("tcp"), "eth0", NID.parse("10.0.0.1@tcp"))
    eng.net_add(Net.parse("tcp"), "eth1", NID.parse("10.0.1.1@tcp"))
    eng.net_add(Net.parse("tcp1"), "eth2", NID.parse("10.1.0.1@tcp1"))
    eng.peer_add(NID.parse("10.0.0.2@tcp"), [NID.parse("10.0.1.2@tcp"),
                                             NID.parse("10.1.0.2@tcp1")])
    return eng


def _add(eng: LNetEngine, src: str | None = None, dst: str | None = None,
         rte: str | None = None, prio: int | None = None, idx: int | None = None) -> None:
    udsp.add(eng, udsp.make_rule(src, dst, rte, prio), idx)


def _lpni(eng: LNetEngine, nid: str):  # type: ignore[no-untyped-def]
    lpni = eng.peers.find_lpni(NID.parse(nid))
    assert lpni is not None
    return lpni


@pytest.mark.requirement("cfg-110", "cfg-095")
def test_src_net_rule_sets_local_net_priority_only() -> None:
    """§7.2: src net form -> lnet_net priority; NIs untouched."""
    eng = _engine()
    _add(eng, src="tcp1", prio=1)
    assert eng.nets[Net.parse("tcp1")].sel_priority == 1
    assert eng.nets[Net.parse("tcp")].sel_priority == U
    assert all(ni.sel_priority == U for ni in eng.local_nis())


@pytest.mark.requirement("cfg-115")
def test_src_nid_rule_sets_ni_priority() -> None:
    eng = _engine()
    _add(eng, src="10.0.1.[1-9]@tcp", prio=4)
    prios = {str(ni.nid): ni.sel_priority for ni in eng.local_nis()}
    assert prios == {"10.0.0.1@tcp": U, "10.0.1.1@tcp": 4, "10.1.0.1@tcp1": U}


@pytest.mark.requirement("cfg-110", "cfg-115", "cfg-155")
def test_dst_rules_set_peer_net_and_peer_ni_priority_default_zero() -> None:
    """§7.2: dst net form -> lpn priority, NID form -> lpni priority; no --priority = 0."""
    eng = _engine()
    _add(eng, dst="tcp1", prio=2)
    _add(eng, dst="10.0.1.2@tcp")
    peer = eng.peers.find_peer(NID.parse("10.0.0.2@tcp"))
    assert peer is not None
    assert {str(p.net): p.sel_priority for p in peer.nets} == {"tcp": U, "tcp1": 2}
    assert _lpni(eng, "10.0.1.2@tcp").sel_priority == 0
    assert _lpni(eng, "10.0.0.2@tcp").sel_priority == U
    assert udsp.show(eng)["udsp"][1] == {"idx": 1, "dst": "10.0.1.2@tcp",
                                         "action": {"priority": 0}}


@pytest.mark.requirement("cfg-120", "cfg-130", "cfg-135", "cfg-140")
def test_src_dst_pair_sets_preferred_local_nids() -> None:
    """§7.2: dst+src replaces each matching peer NI's preferred list with matching local NIs."""
    eng = _engine()
    _add(eng, src="10.0.*.1@tcp", dst="10.0.0.2@tcp")
    assert _lpni(eng, "10.0.0.2@tcp").pref_nids == [NID.parse("10.0.0.1@tcp"),
                                                   NID.parse("10.0.1.1@tcp")]
    assert _lpni(eng, "10.0.1.2@tcp").pref_nids == []
    assert "action" not in udsp.show(eng)["udsp"][0]  # preferred lists show no action


def test_dst_rte_rule_fills_preferred_routers_from_gateways() -> None:
    """§7.2: dst+rte adds the primary NIDs of route gateways matching rte."""
    eng = _engine()
    eng.peer_add(NID.parse("10.0.0.9@tcp"), [])
    gw = eng.peers.find_peer(NID.parse("10.0.0.9@tcp"))
    assert gw is not None
    gw.rtr_refcount = 1  # a route uses it
    _add(eng, dst="10.0.0.2@tcp", rte="10.0.0.[8-9]@tcp")
    assert _lpni(eng, "10.0.0.2@tcp").rtr_pref_nids == [NID.parse("10.0.0.9@tcp")]
    info = udsp.lpni_info(_lpni(eng, "10.0.0.2@tcp"))
    assert info["Preferred gateway NIDs"] == {"NID-0": "10.0.0.9@tcp"}


@pytest.mark.requirement("cfg-150")
def test_lowest_index_wins_and_idx_inserts_before() -> None:
    """§7.3: reverse walk, so index 0 is applied last; --idx N inserts before rule N."""
    eng = _engine()
    _add(eng, src="tcp", prio=5)
    _add(eng, src="tcp", prio=7)        # same criteria, both priority: updates in place
    assert [r.priority for r in eng.udsp.rules] == [7]
    _add(eng, src="tcp[0-1]", prio=3, idx=0)
    assert eng.nets[Net.parse("tcp")].sel_priority == 3
    assert [r.show(i).get("src") for i, r in enumerate(eng.udsp.rules)] == ["tcp[0-1]", "tcp"]


def test_duplicate_preferred_rule_is_ealready() -> None:
    eng = _engine()
    _add(eng, src="10.0.0.1@tcp", dst="10.0.0.2@tcp")
    with pytest.raises(LNetConfigError) as e:
        _add(eng, src="10.0.0.1@tcp", dst="10.0.0.2@tcp")
    assert e.value.errno == -114


def test_delete_reverts_only_its_targets_and_does_not_reapply() -> None:
    """§7.3/§11.12: del resets the deleted rule's targets, other rules are not re-applied."""
    eng = _engine()
    _add(eng, src="tcp", prio=9)
    _add(eng, src="tcp", prio=1, idx=0) if False else _add(eng, src="tcp[0-1]", prio=1, idx=0)
    _add(eng, dst="tcp1", prio=2)
    udsp.delete(eng, 0)                      # the winning tcp[0-1] rule
    assert eng.nets[Net.parse("tcp")].sel_priority == U      # not re-applied to 9
    peer = eng.peers.find_peer(NID.parse("10.0.0.2@tcp"))
    assert peer is not None and peer.nets[1].sel_priority == 2
    with pytest.raises(LNetConfigError) as e:
        udsp.delete(eng, 7)
    assert e.value.errno == -2
    udsp.delete(eng, None)
    assert udsp.show(eng) == {}
    # --all is lnet_udsp_destroy(false): every rule's targets are reverted
    assert peer.nets[1].sel_priority == U


def test_delete_all_reverts_every_rule() -> None:
    """udsp.c ``lnet_udsp_destroy(false)`` (``udsp del --all``) reverts each rule's targets:
    no peer NI, peer net, NI or net keeps a priority of a deleted rule."""
    eng = _engine()
    _add(eng, src="tcp1", prio=1)
    _add(eng, src="10.0.0.1@tcp", prio=2)
    _add(eng, dst="tcp1", prio=0)
    _add(eng, dst="10.0.1.2@tcp", prio=0)
    assert _lpni(eng, "10.0.1.2@tcp").sel_priority == 0
    udsp.delete(eng, None)
    peer = eng.peers.find_peer(NID.parse("10.0.0.2@tcp"))
    assert peer is not None and all(pn.sel_priority == U for pn in peer.nets)
    assert all(_lpni(eng, n).sel_priority == U
               for n in ("10.0.0.2@tcp", "10.0.1.2@tcp", "10.1.0.2@tcp1"))
    assert all(net.sel_priority == U for net in eng.nets.values())
    assert all(ni.sel_priority == U for ni in eng.local_nis())


def test_new_constructs_get_rules_at_creation() -> None:
    """§7.3: a net, NI and peer added after the rule get it applied on creation."""
    eng = _engine()
    _add(eng, src="tcp2", prio=6)
    _add(eng, src="10.2.0.1@tcp2", prio=8)
    _add(eng, dst="tcp2", prio=4)
    _add(eng, dst="10.2.0.[2-3]@tcp2", prio=3)
    eng.net_add(Net.parse("tcp2"), "eth3", NID.parse("10.2.0.1@tcp2"))
    assert eng.nets[Net.parse("tcp2")].sel_priority == 6
    assert eng.nets[Net.parse("tcp2")].nis[0].sel_priority == 8
    eng.peer_add(NID.parse("10.2.0.3@tcp2"), [])
    lpni = _lpni(eng, "10.2.0.3@tcp2")
    assert (lpni.peer_net.sel_priority, lpni.sel_priority) == (4, 3)
    assert lpni.peer.state & LNET_PEER_MULTI_RAIL


@pytest.mark.parametrize(("src", "dst", "rte", "msg"), [
    (None, None, None, "Missing required argument(s)"),
    ("tcp", "tcp", "10.0.0.1@tcp", "The combination of src, dst and rte is not supported"),
    ("tcp", None, "10.0.0.1@tcp", "src and rte cannot be combined"),
    ("nonsense", None, None, "failed to parse src parameter"),
])
def test_userspace_checks(src: str | None, dst: str | None, rte: str | None, msg: str) -> None:
    """§7.1 / liblnetconfig_udsp.c checks, each a clear -EINVAL."""
    with pytest.raises(LNetConfigError) as e:
        udsp.make_rule(src, dst, rte, None)
    assert e.value.errno == -22 and msg in e.value.descr


def test_rte_only_and_pair_with_priority_are_stored_without_effect() -> None:
    eng = _engine()
    _add(eng, rte="10.0.0.9@tcp")
    _add(eng, src="10.0.0.1@tcp", dst="10.0.0.2@tcp", prio=3)
    assert len(eng.udsp.rules) == 2
    assert _lpni(eng, "10.0.0.2@tcp").pref_nids == []


# ----------------------------------------------------------------- lnetctl verbs, on sim
@pytest.mark.requirement("cfg-160", "cfg-050")
def test_lnetctl_udsp_verbs_and_v4_views() -> None:
    tb = _sim(3)
    c1 = tb.node("c1")
    shown = yaml.safe_load(c1.lnetctl("udsp", "show").out)
    assert shown == {"udsp": [{"idx": 0, "src": "tcp", "action": {"priority": 0}},
                              {"idx": 1, "src": "tcp1", "action": {"priority": 1}}]}
    net = yaml.safe_load(c1.lnetctl("net", "show", "-v", "4").out)
    infos = [ni["udsp info"] for n in net["net"][1:] for ni in n["local NI(s)"]]
    assert infos == [{"net priority": 0, "nid priority": -1},
                     {"net priority": 1, "nid priority": -1}]
    assert "udsp info" not in c1.lnetctl("net", "show", "-v", "3").out
    r = c1.lnetctl("udsp", "del", "--all", "--idx", "0")
    # jt_del_udsp/jt_add_udsp printf these on stdout, then return -EINVAL
    assert r.rc != 0 and "Cannot combine --all with --idx" in r.out
    r = c1.lnetctl("udsp", "add", "--src", "tcp", "--priority", "-1")
    assert r.rc != 0 and "Invalid priority" in r.out
    assert c1.lnetctl("udsp", "del", "--idx", "1").rc == 0
    peer = yaml.safe_load(c1.lnetctl("peer", "show", "-v", "4").out)
    assert peer["peer"][0]["peer ni"][0]["udsp info"]["nid priority"] == -1
    tb.down()


@pytest.mark.requirement("cfg-110", "cfg-125")
def test_failover_policy_prefers_tcp_then_falls_back_to_tcp1() -> None:
    """seed 000 "Failover Policy": all traffic on the preferred net until it fails, then on
    the other net (hetero-failover topology, sim backend)."""
    tb = _sim(5)
    c1 = tb.node("c1")
    s1 = tb.plan.node("s1").nids[0]

    def sends() -> list[int]:
        doc = yaml.safe_load(c1.lnetctl("net", "show", "-v", "1").out)
        return [ni["statistics"]["send_count"] for n in doc["net"][1:]
                for ni in n["local NI(s)"]]

    assert c1.put(s1, count=50, size=1024)["completed"] == 50
    before = sends()
    assert before[0] >= 50 and before[1] == 0          # preferred net only
    tb.link("c1", "eth0", "down")
    res = c1.put(s1, count=50, size=1024)
    assert res["completed"] == 50
    after = sends()
    assert after[1] - before[1] >= 45                  # moved to tcp1
    tb.down()


# ------------------------------------------------- IPv4 netmasks (CIDR) in rules (issue 26)
@pytest.mark.requirement("cfg-115")
def test_ipv4_netmask_rules_set_priorities_and_preferences_by_prefix() -> None:
    """``--src 10.0.1.0/24@tcp`` / ``--dst 10.0.0.0/24@tcp`` (nidstrings.c ``parse_nidmask``;
    matched by ``match_nidmask``/``libcfs_ip_in_netmask``) pick NIs and peer NIs by prefix,
    and ``udsp show`` prints them as ``print_nidmask`` does (no /32)."""
    eng = _engine()
    _add(eng, src="10.0.1.9/24@tcp", prio=4)
    prios = {str(ni.nid): ni.sel_priority for ni in eng.local_nis()}
    assert prios == {"10.0.0.1@tcp": U, "10.0.1.1@tcp": 4, "10.1.0.1@tcp1": U}
    _add(eng, dst="10.0.0.0/23@tcp", prio=2)
    assert [_lpni(eng, n).sel_priority for n in ("10.0.0.2@tcp", "10.0.1.2@tcp",
                                                 "10.1.0.2@tcp1")] == [2, 2, U]
    _add(eng, src="10.0.0.1/32@tcp", dst="10.0.1.2/31@tcp")
    assert _lpni(eng, "10.0.1.2@tcp").pref_nids == [NID.parse("10.0.0.1@tcp")]
    assert _lpni(eng, "10.0.0.2@tcp").pref_nids == []
    assert [(r.get("src"), r.get("dst")) for r in udsp.show(eng)["udsp"]] == [
        ("10.0.1.9/24@tcp", None), (None, "10.0.0.0/23@tcp"),
        ("10.0.0.1@tcp", "10.0.1.2/31@tcp")]


def test_rte_ipv4_netmask_picks_gateways_by_prefix() -> None:
    """``--rte 10.0.0.8/30@tcp``: a gateway's primary NID inside the prefix is preferred."""
    eng = _engine()
    for gw_s in ("10.0.0.9@tcp", "10.0.0.13@tcp"):
        eng.peer_add(NID.parse(gw_s), [])
        gw = eng.peers.find_peer(NID.parse(gw_s))
        assert gw is not None
        gw.rtr_refcount = 1
    _add(eng, dst="10.0.0.2@tcp", rte="10.0.0.8/30@tcp")
    assert _lpni(eng, "10.0.0.2@tcp").rtr_pref_nids == [NID.parse("10.0.0.9@tcp")]


@pytest.mark.parametrize(("arg", "names"), [
    ("10.0.0.0/33@tcp", "IPv4 prefix length '33' is not in 1-32"),
    ("10.0.[0-1].0/24@tcp", "takes no '[...]' range"),
])
def test_bad_ipv4_netmask_rule_is_one_einval_line(arg: str, names: str) -> None:
    """A malformed netmask: -EINVAL naming the argument and the part, no rule added."""
    eng = _engine()
    with pytest.raises(LNetConfigError) as e:
        _add(eng, dst=arg, prio=1)
    assert e.value.errno == -22 and names in e.value.descr and "\n" not in e.value.descr
    assert udsp.show(eng).get("udsp", []) == []
