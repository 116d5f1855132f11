"""Pathway selection (spec §2.2-2.8; snd-005..070): criteria order, NUMA, fatal, no path."""

from __future__ import annotations

import random

from enginekit import PORTAL, TCP, C, S, mr2_fabric
from enginekit import make_node as _node

from nodes.lnet.ni import LNetNet, LNetNI
from nodes.lnet.nid import NID, Net
from nodes.lnet.peer import Peer, PeerNet, PeerNI
from nodes.lnet.select import (
    best_lpni,
    best_ni,
    first_best_lpni,
    lpni_key,
    ni_key,
    numa_distance,
)
from testbed.sim.fabric import Fabric


def _fabric(c_numa: list[int | None] | None = None, s_nids: list[NID] = S,
            mr: bool = True) -> Fabric:
    return mr2_fabric(c_numa=c_numa, s_nids=s_nids, mr=mr)


def _puts(fab: Fabric, n: int, dst: NID = S[0], **kw: object) -> list[int]:
    c = fab.engines["c1"]
    hs = [fab.call("c1", c.put, fab.now, dst, payload=b"x", portal=PORTAL, **kw)
          for _ in range(n)]
    fab.run_until(fab.now + 1)
    return hs  # type: ignore[return-value]


def _sent_by_ni(fab: Fabric) -> list[int]:
    return [ni.stats.sent.put for ni in fab.engines["c1"].local_nis()]


def test_numa_nearest_ni_wins() -> None:
    """snd-010/020: the NI on the memory's NUMA node carries every message."""
    fab = _fabric(c_numa=[0, 1])
    _puts(fab, 10, numa=1)
    assert _sent_by_ni(fab) == [0, 10]
    _puts(fab, 10, numa=0)
    assert _sent_by_ni(fab) == [10, 10]


def test_numa_range_makes_distances_equal() -> None:
    """snd-025, spec §2.4 step 5: distances below numa_range count as equal -> round robin."""
    fab = _fabric(c_numa=[0, 1])
    fab.engines["c1"].set_tunable("numa_range", 2)
    _puts(fab, 10, numa=1)
    assert _sent_by_ni(fab) == [5, 5]


def test_numa_unknown_memory_is_neutral() -> None:
    """A send that names no NUMA node (or an unbound NI) has distance 0: round robin."""
    assert numa_distance(None, 3) == 0 and numa_distance(2, -1) == 0
    assert numa_distance(0, 3) == 3
    fab = _fabric(c_numa=[0, 3])
    _puts(fab, 10)
    assert _sent_by_ni(fab) == [5, 5]


def test_health_beats_numa_and_credits() -> None:
    """spec §2.4: health (2) is compared before NUMA (5) and credits (6)."""
    fab = _fabric(c_numa=[0, 1])
    c = fab.engines["c1"]
    c.local_nis()[1].healthv = 900
    _puts(fab, 6, numa=1)
    assert _sent_by_ni(fab) == [6, 0]


def test_sel_priority_hook_beats_numa() -> None:
    """spec §2.4 step 3: lower UDSP priority (``ni.sel_priority``) wins before NUMA."""
    fab = _fabric(c_numa=[0, 1])
    fab.engines["c1"].local_nis()[0].sel_priority = 1
    _puts(fab, 4, numa=1)
    assert _sent_by_ni(fab) == [4, 0]


def test_credits_then_round_robin() -> None:
    """snd-030: more NI tx credits wins; equal credits fall back to the lower seq."""
    eng = _node(1, C)
    net = eng.nets[TCP]
    a, b = net.nis
    a.tx_credits = 10
    assert best_ni(net) is b
    a.tx_credits = b.tx_credits
    a.seq, b.seq = 5, 4
    assert best_ni(net) is b
    a.seq = 4
    assert best_ni(net) is a  # tie keeps the earlier NI


def test_fatal_ni_is_avoided_and_restored() -> None:
    """hlt lnd-010, spec §2.4 step 1: a fatal NI loses to any other; clearing restores it."""
    fab = _fabric()
    c = fab.engines["c1"]
    c.ni_set_fatal(C[0], True, fab.now)
    assert c.local_nis()[0].status_str == "down"
    _puts(fab, 6)
    # the carrier change rebuilt the ping buffer and pushed it to the MR peer (a PUT on the
    # healthy NI; socklnd.c ksocknal_handle_link_state_change), then the 6 PUTs
    assert _sent_by_ni(fab) == [0, 7]
    c.ni_set_fatal(C[0], False, fab.now)
    assert c.local_nis()[0].status_str == "up"
    _puts(fab, 6)
    assert sum(_sent_by_ni(fab)) == 14 and _sent_by_ni(fab)[0] >= 3  # push + 6, spread


def test_peer_ni_health_then_preference() -> None:
    """snd-035, spec §2.5: healthier peer NI wins; at equal health the preferred one."""
    fab = _fabric()
    c = fab.engines["c1"]
    lp0, lp1 = c.peers.find_peer(S[0]).lpnis
    lp0.healthv = 500
    _puts(fab, 4)
    assert [lp0.stats.sent.put, lp1.stats.sent.put] == [0, 4]
    lp0.healthv = 1000
    lp0.pref_nids.append(C[0])
    lp1.pref_nids.append(C[0])  # both preferred for C[0]: credits/seq decide
    lp1.pref_nids.clear()
    c.local_nis()[1].fatal_error = True  # force NI C[0]
    _puts(fab, 3)
    assert lp0.stats.sent.put == 3


def test_non_mr_peer_sticks_to_preferred_ni() -> None:
    """spec §2.2 SRC_ANY+LOCAL+NMR: a non-MR peer is always sent to from the same NI.
    With discovery off (``lnetctl set discovery 0``) a traffic-created peer stays non-MR
    after its one ping round (spec §5.3)."""
    fab = _fabric(mr=False)
    fab.engines["c1"].set_tunable("discovery", 0)
    _puts(fab, 10)
    c = fab.engines["c1"]
    assert sorted(_sent_by_ni(fab)) == [0, 10]
    lpni = c.peers.find_lpni(S[0])
    assert lpni is not None and not lpni.peer.multi_rail and len(lpni.pref_nids) == 1


def test_source_given_pins_the_pair() -> None:
    """snd-045/spec §2.2 SRC_SPEC: NI = the given source, peer NI = the exact destination."""
    fab = _fabric()
    _puts(fab, 4, dst=S[1], src=C[1])
    c = fab.engines["c1"]
    assert _sent_by_ni(fab) == [0, 4]
    assert c.peers.find_lpni(S[1]).stats.sent.put == 4


def test_no_path_and_bad_source() -> None:
    """spec §2.8: unknown net -> SEND -EHOSTUNREACH; a non-local source -> -EINVAL."""
    fab = _fabric()
    c = fab.engines["c1"]
    h1 = fab.call("c1", c.put, 0.0, NID.parse("10.0.0.9@tcp9"), payload=b"", portal=PORTAL)
    h2 = fab.call("c1", c.put, 0.0, S[0], payload=b"", portal=PORTAL,
                  src=NID.parse("10.10.0.77@tcp"))
    evs = {e.handle: (e.kind, e.status, e.unlinked) for e in fab.events["c1"]}
    assert evs[h1] == ("SEND", -113, True) and evs[h2] == ("SEND", -22, True)
    assert c.counters.values["send_count"] == 0
    assert all(ni.tx_credits == ni.max_tx_credits for ni in c.local_nis())


def test_written_out_orders_match_the_keys() -> None:
    """``best_ni``/``best_lpni``/``first_best_lpni`` compare criteria one by one (no tuples):
    each picks what the first-smallest of its key (``ni_key``, ``lpni_key``, the gateway NI
    order of ``route.py``) picks, ties and all, over random candidates."""
    rng = random.Random(17)
    tcpn = Net.parse("tcp")
    net = LNetNet(tcpn)
    pnet = PeerNet(tcpn, Peer(NID(tcpn, 99)))
    for _ in range(400):
        net.nis = [LNetNI(NID(tcpn, i), f"eth{i}", net, fatal_error=rng.random() < .2,
                          healthv=rng.choice((0, 500, 1000)), sel_priority=rng.randint(0, 1),
                          dev_cpt=rng.randint(-1, 2), tx_credits=rng.randint(-1, 1),
                          seq=rng.randint(0, 2)) for i in range(rng.randint(2, 4))]
        md_cpt = rng.choice((None, -1, 0, 2))
        numa_range = rng.choice((-1, 0, 1, 3))
        want_ni = min(net.nis, key=lambda ni: ni_key(ni, md_cpt, numa_range))
        assert best_ni(net, md_cpt, numa_range) is want_ni
        pnet.lpnis = [PeerNI(NID(tcpn, 100 + i), pnet, healthv=rng.choice((500, 1000)),
                             sel_priority=rng.randint(0, 1), tx_credits=rng.randint(-1, 1),
                             seq=rng.randint(0, 2),
                             pref_nids=[want_ni.nid] if rng.random() < .3 else [])
                      for i in range(rng.randint(2, 4))]
        assert best_lpni(pnet, want_ni) is min(pnet.lpnis, key=lambda p: lpni_key(p, want_ni))
        assert first_best_lpni(pnet.lpnis) is min(pnet.lpnis, key=lambda p: (
            -p.healthv, p.sel_priority, -p.tx_credits, p.seq))
