"""The sans-I/O engine on the in-memory fabric: credits, selection, lifecycle, views."""

from __future__ import annotations

import pytest
import yaml
from enginekit import PORTAL, TCP, C, S, mr2_fabric, settle_discovery
from enginekit import make_node as _node

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.events import TxCompleted
from nodes.lnet.hdr import MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from nodes.lnet.tunables import Tunables
from nodes.tools.yamlfmt import dump
from testbed.sim.fabric import Fabric


@pytest.fixture
def mr2() -> Fabric:
    """Seed 000 Figure 2: client and server, two NIs each on one net, static MR peers."""
    return mr2_fabric()


def _put(fab: Fabric, dst: NID = S[0], size: int = 100, **kw: object) -> int:
    eng = fab.engines["c1"]
    return fab.call("c1", eng.put, fab.now, dst, payload=bytes(size), portal=PORTAL, **kw)


def test_put_completes_with_send_then_ack(mr2: Fabric) -> None:
    """spec §4.4: an initiator PUT gets SEND then a final ACK; exactly one final event."""
    h = _put(mr2)
    mr2.run_until(1)
    evs = [e for e in mr2.events["c1"] if e.handle == h]
    assert [(e.kind, e.status, e.unlinked) for e in evs] == [("SEND", 0, False), ("ACK", 0, True)]


def test_unlinked_md_lets_go_of_its_message(mr2: Fabric) -> None:
    """The MD <-> Msg reference cycle is broken once the MD is unlinked (its final event), so
    both are freed by reference counting, not left for the collector (issue 17 item 4)."""
    h = _put(mr2)
    md = mr2.engines["c1"].mds.mds[h]
    assert md.msg is not None
    mr2.run_until(1)
    assert md.unlinked and md.msg is None


def test_mr_spreads_over_both_rails(mr2: Fabric) -> None:
    """snd-005/030/035: with equal health and credits, round robin uses both NIs and peer NIs."""
    for _ in range(100):
        _put(mr2)
    mr2.run_until(5)
    c = mr2.engines["c1"]
    sent = [ni.stats.sent.put for ni in c.local_nis()]
    assert sent == [50, 50]
    assert sum(1 for e in mr2.events["c1"] if e.kind == "ACK" and e.status == 0) == 100
    to = [lp.stats.sent.put for lp in c.peers.find_peer(S[0]).lpnis]
    assert to == [50, 50]


def test_response_leaves_from_arriving_nid(mr2: Fabric) -> None:
    """snd-045: the ACK goes to the request's source NID from the NID the request came to."""
    _put(mr2, dst=S[1], src=C[1])
    mr2.run_until(1)
    acks = [t for _, n, t in mr2.transmits if n == "s1" and t.hdr.type == MsgType.ACK]
    assert len(acks) == 1
    assert (acks[0].ni, acks[0].lpni) == (S[1], C[1])


def test_credit_queue_forms_and_drains_fifo() -> None:
    """spec §1.5, seed 001: past the peer credits messages queue, then leave in FIFO order."""
    fab = Fabric()
    c, s = _node(11, C[:1]), _node(22, S[:1])
    s.attach_me(PORTAL, 0, 2**64 - 1)
    fab.add("c1", c)
    fab.add("s1", s)
    settle_discovery(fab, {"c1": [S[0]]})  # the first PUT would wait for discovery (§5.3)
    fab.hold = True  # nothing completes: credits are not returned
    handles = [_put(fab, hdr_data=i) for i in range(12)]
    lpni = c.peers.find_lpni(S[0])
    assert lpni is not None
    assert lpni.tx_credits == 8 - 12 and len(lpni.txq) == 4
    assert [m.hdr.hdr_data for m in lpni.txq] == [8, 9, 10, 11]
    assert len(fab.transmits) == 8
    fab.hold = False
    first = [t for _, _, t in fab.transmits]
    fab.transmits.clear()
    for t in first:  # complete the held ones: each completion posts the next waiter
        fab.apply("c1", c.handle(TxCompleted(tx_id=t.tx_id, rc=0, hstatus=HStatus.OK), fab.now))
    later = [t.hdr.hdr_data for _, _, t in fab.transmits]
    assert later == [8, 9, 10, 11]
    assert lpni.min_tx_credits == -4 and len(handles) == 12


def test_ni_credits_queue_fifo() -> None:
    """spec §1.5 step 4: the NI credit pool also queues in order once exhausted."""
    fab = Fabric()
    c, s = _node(11, C[:1]), _node(22, S[:1])
    c.nets[TCP].nis[0].tx_credits = 2  # a tiny NI pool (its one CPT's queue)
    c.nets[TCP].nis[0].max_tx_credits = 2
    c.nets[TCP].nis[0].tx_queues[0].credits = 2
    fab.add("c1", c)
    fab.add("s1", s)
    settle_discovery(fab, {"c1": [S[0]]})
    fab.hold = True
    for i in range(4):
        _put(fab, hdr_data=i)
    ni = c.nets[TCP].nis[0]
    assert ni.tx_credits == -2 and [m.hdr.hdr_data for m in ni.tx_queues[0].delayed] == [2, 3]


def test_no_path_fails_without_credits(mr2: Fabric) -> None:
    """spec §2.8: no route -> SEND event with -EHOSTUNREACH, nothing committed."""
    h = _put(mr2, dst=NID.parse("10.0.0.9@tcp9"))
    mr2.run_until(mr2.now + 1)  # the discovery ping fails first, then the PUT (spec §5.2)
    evs = [e for e in mr2.events["c1"] if e.handle == h]
    assert [(e.kind, e.status, e.unlinked) for e in evs] == [("SEND", -113, True)]
    assert all(ni.tx_credits == 256 for ni in mr2.engines["c1"].local_nis())


def test_failed_rail_resends_on_the_other(mr2: Fabric) -> None:
    """spec §3.2/3.3: REMOTE_DROPPED to an MR peer is resent; the PUT still succeeds."""
    mr2.engines["c1"].tunables.retry_count = 2
    mr2.down.add(S[1])
    for _ in range(10):
        _put(mr2)
    mr2.run_until(5)
    c = mr2.engines["c1"]
    acks = [e for e in mr2.events["c1"] if e.kind == "ACK" and e.status == 0]
    assert len(acks) == 10
    assert c.counters.values["resend_count"] > 0
    assert c.peers.find_lpni(S[1]).healthv < 1000
    assert c.peers.find_lpni(S[0]).healthv == 1000


def test_ping_returns_remote_nids(mr2: Fabric) -> None:
    from nodes.lnet.ping import PingInfo

    c = mr2.engines["c1"]
    h = mr2.call("c1", c.ping, mr2.now, S[1], timeout=3, src=C[1])
    mr2.run_until(1)
    final = [e for e in mr2.events["c1"] if e.handle == h][-1]
    assert final.kind == "REPLY"
    info = PingInfo.unpack(final.payload)
    assert [n for n, _ in info.nis] == S


def test_ping_timeout_unlinks(mr2: Fabric) -> None:
    """A ping to a NID that never answers ends in one UNLINK with -ETIMEDOUT at its timeout."""
    mr2.hold = True
    c = mr2.engines["c1"]
    h = mr2.call("c1", c.ping, mr2.now, S[0], timeout=3)
    mr2.run_until(2.9)
    assert not [e for e in mr2.events["c1"] if e.handle == h]
    mr2.run_until(3.1)
    assert [(e.kind, e.status) for e in mr2.events["c1"] if e.handle == h] == [("UNLINK", -110)]


def test_config_errors_carry_errno() -> None:
    eng = _node(1, C)
    with pytest.raises(LNetConfigError) as e:
        eng.net_add(TCP, "eth0", C[0])
    assert e.value.errno == -17
    eng.peer_add(S[0], [S[1]])
    with pytest.raises(LNetConfigError) as e:
        eng.peer_add(NID.parse("10.10.0.3@tcp"), [S[1]])  # cfg-080: NID of another peer
    assert e.value.errno == -17
    eng.peer_add(C[0], [])  # a local NID may be a peer (peer.c lnet_add_peer_ni: no check)
    assert eng.peers.find_peer(C[0]) is not None


def test_tunable_checks() -> None:
    t = Tunables()
    assert t.lnd_timeout == 49  # (150-1)/(2+1), spec §0
    with pytest.raises(LNetConfigError):
        t.set("health_sensitivity", 1001)
    t.set("health_sensitivity", 0)
    assert t.retry_count == 0  # sensitivity 0 forces retry_count 0
    with pytest.raises(LNetConfigError):
        t.set("retry_count", 1)
    with pytest.raises(LNetConfigError):
        t.set("transaction_timeout", 0)


def test_views_are_lnetctl_yaml(mr2: Fabric) -> None:
    """spec §9.2-9.3: keys, nesting and order of `net show -v 3`, `peer show`, `stats show`."""
    c = mr2.engines["c1"]
    text = dump(c.view("net", verbose=3))
    doc = yaml.safe_load(text)
    tcp = doc["net"][1]
    assert tcp["net type"] == "tcp"
    ni = tcp["local NI(s)"][0]
    assert list(ni) == ["nid", "status", "interfaces", "statistics", "sent_stats",
                        "received_stats", "dropped_stats", "health stats", "tunables",
                        "lnd tunables", "dev cpt", "CPT"]
    assert ni["interfaces"] == {0: "eth0"} and ni["CPT"] == "[0]"
    assert text.startswith("net:\n    - net type: lo\n      local NI(s):\n        - nid: 0@lo\n")
    peer = yaml.safe_load(dump(c.view("peer", verbose=3)))["peer"][0]
    # CONFIGURED|MULTI_RAIL|DISCOVERED|NIDS_UPTODATE: a static peer discovered (spec §1.3)
    assert peer["Multi-Rail"] is True and peer["peer state"] == 0x119
    stats = list(yaml.safe_load(dump(c.view("stats")))["statistics"])
    assert stats[0] == "msgs_alloc" and stats[-1] == "drop_length" and len(stats) == 26
