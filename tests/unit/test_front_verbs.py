"""The verbs and options issue 14 lists as missing, each against the real tool's source:
lnetctl ``peer list``, ``debug peer|nidlist``, ``cpt-of-nid``, ``setup-mrrouting``, ``net add
--nid|--ip2net|--conns-per-peer|--peer-buffer-credits``, ``net del --nid``, ``net set
--conns-per-peer``, ``peer set --state``, ``import -e`` and ``ip2nets``, the import details;
lctl ``show_route``, ``which_nid``, ``get_param``/``set_param``, ``dk``, ``net up|down``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.sim import SimTestbed

TOPO = """
name: verbs
networks:
  lan0: {lnet: tcp, subnet: 10.43.0.0/24}
  lan1: {lnet: tcp, subnet: 10.44.0.0/24}
nodes:
  a: {interfaces: [lan0, lan1]}
  b: {interfaces: [lan0, lan1]}
"""


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    topo = tmp_path / "verbs.yaml"
    topo.write_text(TOPO)
    return SimTestbed.up(topo, seed=6)


def _y(text: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(text) or {}


def test_peer_list_and_debug_verbs(tb: SimTestbed) -> None:
    a = tb.node("a")
    assert a.lnetctl("peer", "add", "--prim_nid", "1.1.1.1@tcp", "--nid", "7.7.7.7@tcp").rc == 0
    assert a.lnetctl("peer", "add", "--prim_nid", "1.1.1.2@tcp", "--nid", "7.7.7.8@tcp").rc == 0
    assert _y(a.lnetctl("peer", "list").out) == {  # jt_list_peer: primary NIDs only
        "peer list": [{"nid": "1.1.1.1@tcp"}, {"nid": "1.1.1.2@tcp"}]}
    res = a.lnetctl("debug", "peer", "--nid", "1.1.1.1@tcp")
    assert (res.rc, res.out, res.err) == (0, "", "")
    dk = a.lctl("dk").out.splitlines()
    line = f"{'1.1.1.1@tcp':<24} {1:4d} {'NA':>5}" + f" {8:5d}" * 5 + " 0"
    assert any(x.endswith(") " + line) for x in dk), dk  # lnet_debug_peer's line
    assert dk[-1].startswith("Debug log: ")
    assert a.lctl("dk").out.startswith("Debug log: 0 lines")  # dumped and cleared
    nl = a.lnetctl("debug", "nidlist", "10.0.0.[1-3]@tcp", "10.0.0.2@tcp")
    assert nl.rc == 0 and nl.out.endswith("10.0.0.2@tcp matches nidlist 10.0.0.[1-3]@tcp\n")
    assert _y(a.lnetctl("cpt-of-nid", "10.43.0.1@tcp").out) == {
        "cpt-of-nid": [{"nid": "10.43.0.1@tcp", "cpt": 0}]}
    mr = a.lnetctl("setup-mrrouting")  # no ksocklnd-config on a node: it says so
    assert mr.rc != 0 and "failed to execute ksocklnd-config" in mr.err


def test_net_add_and_del_by_nid_ip2net_and_lnd_tunables(tb: SimTestbed) -> None:
    """``jt_add_ni`` --nid (sanity-lnet 110, 112), --ip2net (199), --conns-per-peer and
    --peer-buffer-credits (230); ``jt_del_ni --nid``; ``net set --conns-per-peer`` (-1
    ignored, 128 refused)."""
    a = tb.node("a")
    assert a.lnetctl("net", "add", "--nid", "10.44.0.1@tcp2", "--conns-per-peer", "4",
                     "--peer-buffer-credits", "16").rc == 0
    ni = _y(a.lnetctl("net", "show", "-v", "--net", "tcp2").out)["net"][0]["local NI(s)"][0]
    assert (ni["nid"], ni["interfaces"], ni["lnd tunables"]["conns_per_peer"],
            ni["tunables"]["peer_buffer_credits"]) == ("10.44.0.1@tcp2", {0: "eth1"}, 4, 16)
    res = a.lnetctl("net", "add", "--net", "tcp2", "--nid", "10.44.0.1@tcp2")
    assert (res.rc, res.out) == (234, "--net is invalid with --nid option\n")
    assert a.lnetctl("net", "del", "--nid", "10.44.0.1@tcp2").rc == 0
    assert a.lnetctl("net", "show", "--net", "tcp2").rc != 0
    assert a.lnetctl("net", "add", "--ip2net", "tcp3 10.44.0.*").rc == 0
    assert _y(a.lnetctl("net", "show", "--net", "tcp3").out)["net"][0]["local NI(s)"][0][
        "nid"] == "10.44.0.1@tcp3"
    assert a.lnetctl("net", "add", "--ip2net", "tcp3 10.44.0.*").rc != 0  # configured twice
    assert a.lnetctl("net", "set", "--all", "--conns-per-peer", "6").rc == 0
    bad = a.lnetctl("net", "set", "--all", "--conns-per-peer", "128")
    assert bad.rc == 255 and "valid range 0-127" in bad.err
    assert a.lnetctl("net", "set", "--all", "--conns-per-peer", "-1").rc == 0
    cpps = [n["lnd tunables"]["conns_per_peer"] for net in _y(a.lnetctl(
        "net", "show", "-v").out)["net"] for n in net["local NI(s)"] if "lnd tunables" in n]
    assert cpps == [6, 6, 6], cpps
    res = a.lnetctl("net", "add", "--net", "tcp4", "--if", "eth0", "--conns-per-peer", "128")
    assert res.rc == 255 and a.lnetctl("net", "show", "--net", "tcp4").rc != 0


def test_peer_set_state(tb: SimTestbed) -> None:
    """``peer set --state`` (sanity-lnet 304): the kernel stores the bits as given."""
    a = tb.node("a")
    assert a.lnetctl("peer", "add", "--prim_nid", "3.3.3.3@tcp", "--lock_prim").rc == 0
    state = _y(a.lnetctl("peer", "show", "-v", "4", "--nid", "3.3.3.3@tcp").out)["peer"][0][
        "peer state"]
    assert state & (1 << 20)
    assert a.lnetctl("peer", "set", "--nid", "3.3.3.3@tcp", "--state", "1048577").rc == 0
    assert _y(a.lnetctl("peer", "show", "-v", "4", "--nid", "3.3.3.3@tcp").out)["peer"][0][
        "peer state"] == 1048577
    assert a.lnetctl("peer", "set", "--nid", "9.9.9.9@tcp", "--state", "1").rc != 0


def test_import_details(tb: SimTestbed, tmp_path: Path) -> None:
    """--del of listed peer NIs only (18a); --del of a two-interface entry (450);
    peer_timeout -1 is the default (231); bad CPT (265) and non-boolean Multi-Rail (99b)
    create nothing; -e runs ping:/discover: nids (350); ip2nets (150, 155, 157)."""
    a = tb.node("a")
    f = tmp_path / "f.yaml"

    def imp(text: str, *opts: str) -> tuple[int, str, str]:
        f.write_text(text)
        res = a.lnetctl("import", *opts, str(f))
        return res.rc, res.out, res.err

    peer = ("peer:\n  - primary nid: 1.1.1.1@tcp\n    peer ni:\n" + "".join(
        f"      - nid: {n}\n" for n in ("1.1.1.1@tcp", "2.2.2.2@tcp", "4.4.4.4@tcp", "5@gni")))
    assert imp(peer)[0] == 0
    assert imp("peer:\n  - primary nid: 1.1.1.1@tcp\n    peer ni:\n"
               "      - nid: 2.2.2.2@tcp\n      - nid: 5@gni\n", "--del")[0] == 0
    nids = [n["nid"] for n in _y(a.lnetctl("peer", "show").out)["peer"][0]["peer ni"]]
    assert nids == ["1.1.1.1@tcp", "4.4.4.4@tcp"]
    net = ("net:\n  - net type: tcp9\n    local NI(s):\n      - interfaces:\n"
           "          0: eth0\n          1: eth1\n        tunables:\n"
           "          peer_timeout: -1\n")
    assert imp(net)[0] == 0
    nis = _y(a.lnetctl("net", "show", "-v", "--net", "tcp9").out)["net"][0]["local NI(s)"]
    assert [n["tunables"]["peer_timeout"] for n in nis] == [180, 180]
    assert imp(net, "--del")[0] == 0 and a.lnetctl("net", "show", "--net", "tcp9").rc != 0
    before = a.lnetctl("export", "--backup").out
    for bad in ('net:\n  - net type: tcp8\n    local NI(s):\n      - interfaces: {0: eth0}\n'
                '        CPT: "[1-0]"\n',
                "peer:\n  - primary nid: 9.9.9.9@tcp\n    Multi-Rail: Foobar\n"):
        rc, _out, err = imp(bad)
        assert rc != 0 and "import:" in err, err
    assert a.lnetctl("export", "--backup").out == before
    own = tb.node("a").nids[0]
    rc, out, _ = imp(f"ping:\n  nids:\n    0: {own}\n", "-e")
    assert rc == 0 and _y(out)["ping"][0]["primary nid"] == own
    rc, out, _ = imp(f"discover:\n  nids:\n    0: {own}\n", "-e")
    assert rc == 0 and _y(out)["discover"][0]["primary nid"] == own
    ip2 = "ip2nets:\n  - net-spec: tcp5\n    ip-range:\n        0: 10.43.0.*\n"
    assert imp(ip2)[0] == 0
    assert _y(a.lnetctl("net", "show", "--net", "tcp5").out)["net"][0]["local NI(s)"][0][
        "interfaces"] == {0: "eth0"}
    rc, _, err = imp("ip2nets:\n  - net-spec: tcp6\n    ip-range:\n        0: 10.99.0.1\n")
    assert rc != 0 and "No ip2nets rules applied" in err
    rc, _, err = imp("ip2nets:\n  - interfaces: {0: eth0}\n")
    assert rc != 0 and "Expect 'net-spec'" in err


def test_lctl_routes_which_nid_and_params(tb: SimTestbed) -> None:
    a = tb.node("a")
    assert a.lnetctl("route", "add", "--net", "tcp7", "--gateway", "10.43.0.2@tcp").rc == 0
    assert a.lctl("show_route").out == (f"net {'tcp7':>18} hops -1 gw {'10.43.0.2@tcp':>32} "
                                        "down pri 0\n")
    n1, n2 = tb.node("a").nids
    assert a.lctl("which_nid", n1, n2).out == f"{n1}\n"   # sanity-lnet 213
    assert a.lctl("which_nid", n2, n1).out == f"{n2}\n"
    assert a.lctl("which_nid", "1.2.3.4@o2ib").err == "No reachable NID\n"
    routes = a.lctl("get_param", "-n", "routes").out.splitlines()
    assert routes[:2] == ["Routing disabled", "net      hops priority   state router"]
    assert routes[2].split() == ["tcp7", "-1", "0", "down", "10.43.0.2@tcp"]
    peers = a.lctl("get_param", "peers").out.splitlines()
    assert peers[0] == "peers=" and peers[1].split() == [
        "nid", "refs", "state", "last", "max", "rtr", "min", "tx", "min", "queue"]
    nis = a.lctl("get_param", "nis").out.splitlines()
    assert [line.split()[0] for line in nis[2:]] == ["0@lo", n1, n2]
    assert len(a.lctl("get_param", "-n", "stats").out.split()) == 11
    assert a.lctl("get_param", "-n", "cpu_partition_table").out.count("\n") == 1
    assert a.lctl("set_param", "fail_loc=0xe004").out == "fail_loc=0xe004\n"  # E11
    assert a.lctl("get_param", "fail_loc").out == "fail_loc=57348\n"  # %lu, as libcfs reads it
    assert a.lctl("set_param", "fail_loc=0").rc == 0
    assert a.lctl("get_param", "nosuch").rc != 0
    assert a.lctl("net", "down").out == "LNET ready to unload\n"
    assert a.lnetctl("net", "show").rc != 0
    assert a.lctl("net", "up").out == "LNET configured: New Created\n"
