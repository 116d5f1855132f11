"""o2iblnd's tunables reach the LND (issue 28): a topology network's ``tunables:`` and ``lnd
tunables:`` (lnetctl's YAML for ``net add``), and ``lnetctl net add --peer-credits/--credits/
--conns-per-peer``, go through ``kiblnd_tunables_setup``'s clamps (nodes/o2ib/kibtx.py) into
the o2iblnd's connections and into ``lnetctl net show -v``'s ``lnd tunables:`` block in
``lustre_o2iblnd_show_tun``'s order (lnet/utils/lnetconfig/liblnetconfig_lnd.c). On the
simulator, which runs the daemon's own DLC modules."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import testbed
from testbed.plan.load import parse_topology
from testbed.plan.model import TopologyError
from testbed.sim import SimTestbed

S1 = "10.31.0.2@o2ib"
TOPO = textwrap.dedent("""\
    name: o2tun
    global: {transaction_timeout: 10, retry_count: 2}
    networks:
      ibnet:
        lnet: o2ib
        subnet: 10.31.0.0/24
        tunables: {peer_credits: 32, credits: 512}
        lnd tunables: {peercredits_hiw: 16, concurrent_sends: 64, conns_per_peer: 2,
                       ntx: 1024}
    nodes:
      c1: {interfaces: [ibnet], peers: [s1]}
      s1: {interfaces: [ibnet], peers: [c1]}
    """)
SHOW_KEYS = ["peercredits_hiw", "map_on_demand", "concurrent_sends", "fmr_pool_size",
             "fmr_flush_trigger", "fmr_cache", "ntx", "conns_per_peer", "timeout", "tos"]


def up(tmp_path: Path, text: str) -> SimTestbed:
    path = tmp_path / "o2tun.yaml"
    path.write_text(text)
    t = testbed.up(str(path), backend="sim", seed=5)
    assert isinstance(t, SimTestbed)
    return t


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    return up(tmp_path, TOPO)


def ni_show(tb: SimTestbed, node: str, net: str, v: str = "") -> dict:
    doc = tb.node(node).lnetctl_yaml(f"net show -v {v} --net {net}")
    return doc["net"][0]["local NI(s)"][0]


def test_topology_lnd_tunables_reach_o2iblnd_and_net_show(tb: SimTestbed) -> None:
    ni = ni_show(tb, "c1", "o2ib")
    assert ni["tunables"]["peer_credits"] == 32 and ni["tunables"]["credits"] == 512
    lnd = ni["lnd tunables"]
    assert list(lnd) == SHOW_KEYS
    assert (lnd["peercredits_hiw"], lnd["concurrent_sends"], lnd["ntx"],
            lnd["conns_per_peer"], lnd["map_on_demand"], lnd["tos"]) == (16, 64, 1024, 2, 1, -1)
    assert tb.node("c1").put(S1, count=40, size=1 << 20)["completed"] == 40
    o2 = tb.fabric.o2ib.lnds["c1"]
    (tun,) = [n.tun for n in o2.nets.values()]
    assert (tun.peer_credits, tun.peer_credits_hiw, tun.concurrent_sends, tun.credits) == \
        (32, 16, 64, 512)
    (peer,) = o2.peers.values()
    assert len(peer.conns) == 2 and {c.queue_depth for c in peer.conns} == {32}
    # net show -v statistics count o2ib traffic as tcp's (item: stats for o2ib NIs)
    stats = ni_show(tb, "c1", "o2ib", "3")
    assert stats["statistics"]["send_count"] >= 40 and stats["sent_stats"]["put"] >= 40
    assert stats["health stats"]["health value"] == 1000


def test_lnetctl_net_add_credits_and_conns_per_peer_on_o2ib(tb: SimTestbed) -> None:
    n = tb.node("c1")
    res = n.lnetctl("net add --net o2ib1 --if ib0 --peer-credits 64 --credits 1024 "
                    "--conns-per-peer 3")
    assert res.rc == 0, res
    ni = ni_show(tb, "c1", "o2ib1")
    assert ni["tunables"]["peer_credits"] == 64 and ni["tunables"]["credits"] == 1024
    lnd = ni["lnd tunables"]
    # kiblnd_tunables_setup: hiw = peer_credits / 2, concurrent_sends = peer_credits
    assert (lnd["peercredits_hiw"], lnd["concurrent_sends"], lnd["conns_per_peer"]) == \
        (32, 64, 3)
    res = n.lnetctl("net add --net o2ib2 --if ib0")
    lnd = ni_show(tb, "c1", "o2ib2")["lnd tunables"]
    assert (lnd["peercredits_hiw"], lnd["concurrent_sends"], lnd["conns_per_peer"],
            lnd["ntx"], lnd["fmr_pool_size"]) == (4, 8, 1, 512, 512)  # the defaults


def test_tcp_net_show_keeps_the_socklnd_block(tmp_path: Path) -> None:
    t = up(tmp_path, TOPO.replace("o2ib", "tcp").replace(
        "lnd tunables: {peercredits_hiw: 16, concurrent_sends: 64, conns_per_peer: 2,\n"
        "                   ntx: 1024}", "lnd tunables: {conns_per_peer: 2}"))
    assert list(ni_show(t, "c1", "tcp")["lnd tunables"]) == ["conns_per_peer", "timeout", "tos"]


@pytest.mark.parametrize(("lnd", "why"), [
    ("{peer_credits_hiw: 4}", "lnd tunables.peer_credits_hiw: unknown key"),
    ("{ntx: 0}", "lnd tunables: o2iblnd: ntx=0 out of range"),
    ("{concurrent_sends: many}", "concurrent_sends: expected an integer"),
])
def test_bad_lnd_tunables_are_one_line(lnd: str, why: str) -> None:
    text = TOPO.replace("lnd tunables: {peercredits_hiw: 16, concurrent_sends: 64, "
                        "conns_per_peer: 2,\n                   ntx: 1024}",
                        f"lnd tunables: {lnd}")
    with pytest.raises(TopologyError) as e:
        parse_topology(text, source="o2tun.yaml")
    line = str(e.value)
    assert why in line and "o2tun.yaml:" in line and "Traceback" not in line


def test_kiblnd_tunables_setup_peer_credits_shown_clamped(tmp_path: Path) -> None:
    """kiblnd_tunables_setup writes the clamped lct_peer_tx_credits back into the net's
    tunables (at least IBLND_CREDITS_DEFAULT = 8, at most the net's credits): lnetctl net show
    prints that value, and LNet's peer NI credits on the net are the clamped ones."""
    t = up(tmp_path, TOPO.replace("{peer_credits: 32, credits: 512}",
                                  "{peer_credits: 4, credits: 512}"))
    ni = ni_show(t, "c1", "o2ib")
    assert ni["tunables"]["peer_credits"] == 8
    assert ni["lnd tunables"]["peercredits_hiw"] == 7  # 16 given: below the clamped 8
    assert t.node("c1").put(S1, count=4, size=8)["completed"] == 4
    (lpni,) = t.node("c1").lnetctl_yaml(f"peer show --nid {S1} -v")["peer"][0]["peer ni"]
    assert lpni["max_ni_tx_credits"] == 8
    n = t.node("c1")
    assert n.lnetctl("net add --net o2ib1 --if ib0 --peer-credits 64 --credits 32").rc == 0
    assert ni_show(t, "c1", "o2ib1")["tunables"]["peer_credits"] == 32  # <= credits
