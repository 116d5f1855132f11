"""lnet_selftest over the engine on the in-memory fabric (issue 13 item 1).

Each node runs ``nodes.selftest`` as its driver's upper layer (as the daemon and the sim do);
a console on ``con`` drives test nodes through framework RPCs. What is checked is what real
lnet_selftest does on the wire and in its counters: framework RPCs on portal 51 and test RPCs
on 50 with the service id as match bits, replies and bulk on 52; the brw *server* moves the
bulk (GET for write, PUT for read); a payload altered on its way is caught by check=full;
RPCs and sessions time out; a node in another session is Busy (lnet/selftest/*.c).
"""

from __future__ import annotations

from typing import Any

import pytest
from enginekit import make_node

from nodes import selftest
from nodes.lnet.actions import Transmit
from nodes.lnet.hdr import MsgType as LMsg
from nodes.lnet.nid import NID
from nodes.selftest import bulk, wire
from nodes.selftest.contypes import ACTIVE, BUSY, DOWN
from testbed.sim.fabric import Fabric

KEY = 4242
MIB = 1 << 20


class Bed:
    """Nodes on one fabric, each serving selftest; ``nid(n)`` is node n's one NID."""

    def __init__(self, *names: str) -> None:
        self.fab = Fabric()
        self.st: dict[str, selftest.Selftest] = {}
        for i, name in enumerate(names):
            self.fab.add(name, make_node(100 + i, [NID.parse(f"10.9.0.{i + 1}@tcp")]))
            self.st[name] = selftest.attach(self.fab.drivers[name])
        self.names = names

    def nid(self, name: str) -> str:
        return f"10.9.0.{self.names.index(name) + 1}@tcp"

    def ioctl(self, node: str, opc: str, key: int = KEY, **args: Any) -> dict[str, Any]:
        st, drv = self.st[node], self.fab.drivers[node]
        h, acts = st.ioctl(self.fab.now, opc, key, args)
        done: list[Any] = []
        drv.watch(h, done.append)
        drv.execute(acts)
        while not done:
            assert self.fab.step(), f"{opc}: nothing left to run"
        return st.result(h)

    def session(self, con: str = "con", **groups: list[str]) -> None:
        assert self.ioctl(con, "session_new", name="t", timeout=300)["rc"] == 0
        for g, nodes in groups.items():
            assert self.ioctl(con, "group_add", name=g)["rc"] == 0
            r = self.ioctl(con, "nodes_add", name=g, nids=[self.nid(n) for n in nodes])
            assert r["rc"] == 0 and r["trans"]["rpc_errno"] == 0, r

    def brw(self, opc: int, size: int, check: int, loop: int, concur: int = 1,
            batch: str = "b", src: str = "c", dst: str = "s", con: str = "con") -> None:
        assert self.ioctl(con, "batch_add", name=batch)["rc"] == 0
        r = self.ioctl(con, "test_add", batch=batch, type=1, loop=loop, concur=concur,
                       dist=1, span=1, param={"opc": opc, "size": size, "flags": check},
                       **{"from": src, "to": dst})
        assert r["rc"] == 0 and not r["trans"]["fwk_errno"], r

    def run_batch(self, batch: str = "b", con: str = "con", limit: float = 600) -> None:
        assert self.ioctl(con, "batch_start", name=batch)["trans"]["fwk"][0] > 0
        end = self.fab.now + limit
        while self.ioctl(con, "batch_query", name=batch)["trans"]["fwk"][1]:
            assert self.fab.now < end, "batch still running"
            self.fab.run_until(self.fab.now + 0.5)


def _sent(bed: Bed, node: str) -> list[Transmit]:
    return [t for _, n, t in bed.fab.transmits if n == node]


@pytest.mark.parametrize("opc", [bulk.LST_BRW_WRITE, bulk.LST_BRW_READ])
def test_brw_server_moves_the_bulk_and_counts_it(opc: int) -> None:
    """20 RPCs of 1 MiB with check=full: the server GETs the client's data (write) or PUTs
    its own (read) on SRPC_RDMA_PORTAL; bulk_get/bulk_put count 20 MiB; nothing is wrong."""
    bed = Bed("con", "c1", "s1")
    bed.session(c=["c1"], s=["s1"])
    bed.brw(opc, MIB, bulk.CHECK_FULL, loop=20, concur=2)
    bed.fab.transmits.clear()
    bed.run_batch()
    s1, c1 = bed.st["s1"], bed.st["c1"]
    big_s = [t for t in _sent(bed, "s1") if len(t.payload) == MIB]
    big_c = [t for t in _sent(bed, "c1") if len(t.payload) == MIB]
    if opc == bulk.LST_BRW_WRITE:
        gets = [t for t in _sent(bed, "s1") if t.hdr.type == LMsg.GET]
        assert len(gets) == 40 and {t.hdr.ptl_index for t in gets} == {52}
        assert len(big_c) == 40 and {t.hdr.type for t in big_c} == {LMsg.REPLY} and not big_s
        assert s1.srpc.counters.bulk_get == 40 * MIB and s1.srpc.counters.bulk_put == 0
    else:
        assert len(big_s) == 40 and {t.hdr.type for t in big_s} == {LMsg.PUT} and not big_c
        assert {t.hdr.ptl_index for t in big_s} == {52}
        assert s1.srpc.counters.bulk_put == 40 * MIB and s1.srpc.counters.bulk_get == 0
    reqs = [t for t in _sent(bed, "c1") if t.hdr.ptl_index == wire.SRPC_REQUEST_PORTAL]
    assert len(reqs) == 40 and {t.hdr.match_bits for t in reqs} == {wire.Service.BRW}
    assert {len(t.payload) for t in reqs} == {wire.SRPC_MSG_SIZE}
    assert c1.srpc.counters.rpcs_sent >= 40 and s1.srpc.counters.rpcs_rcvd >= 40
    sn = c1.framework.session
    assert sn is not None and (sn.brw_errors, s1.srpc.counters.rpcs_dropped) == (0, 0)
    replies = [t for t in _sent(bed, "s1") if t.hdr.match_bits >> 48 == 0
               and t.hdr.ptl_index == 52 and t.hdr.type == LMsg.PUT
               and len(t.payload) == wire.SRPC_MSG_SIZE]
    assert len(replies) == 40  # replies go to the client's rpyid on the RDMA portal


def test_framework_rpcs_go_to_the_framework_portal() -> None:
    bed = Bed("con", "n1")
    bed.session(g=["n1"])
    mksn = [t for t in _sent(bed, "con") if t.hdr.ptl_index == 51]
    assert [t.hdr.match_bits for t in mksn] == [wire.Service.MAKE_SESSION]
    msg = wire.unpack(mksn[0].payload)
    assert (msg.type, wire.cstr(msg.body["name"]), msg.body["sid_nid"]) == (
        wire.MsgType.MKSN_REQST, "t", NID.parse(bed.nid("con")).nid4)
    assert bed.st["n1"].framework.session.name == "t"


@pytest.mark.parametrize(("opc", "side"), [(bulk.LST_BRW_WRITE, "c1"),
                                           (bulk.LST_BRW_READ, "s1")])
def test_a_payload_altered_on_its_way_is_a_brw_error(opc: int, side: str) -> None:
    """The fabric flips one bit of every bulk it carries from ``side``: check=full catches
    it (the server for a write, replying EBADMSG; the client for a read), the client counts
    brw errors and, stopping units on error as the console asks, the batch ends early."""
    bed = Bed("con", "c1", "s1")
    bed.session(c=["c1"], s=["s1"])
    bed.brw(opc, 64 * 1024, bulk.CHECK_FULL, loop=50, concur=2)

    def tamper(name: str, act: Transmit) -> Transmit:
        if name == side and len(act.payload) == 64 * 1024:
            data = bytearray(act.payload)
            data[1234] ^= 0x04
            act = Transmit(tx_id=act.tx_id, ni=act.ni, lpni=act.lpni, hdr=act.hdr,
                           payload=bytes(data))
        return act

    bed.fab.interpose = tamper
    bed.run_batch()
    sn = bed.st["c1"].framework.session
    assert sn is not None and sn.brw_errors == 2  # one per unit, then the unit stops
    assert bed.st["c1"].srpc.counters.rpcs_sent < 20


def test_check_none_does_not_look_at_the_data() -> None:
    bed = Bed("con", "c1", "s1")
    bed.session(c=["c1"], s=["s1"])
    bed.brw(bulk.LST_BRW_WRITE, 8192, bulk.CHECK_NONE, loop=5)
    bed.fab.interpose = lambda n, a: Transmit(
        tx_id=a.tx_id, ni=a.ni, lpni=a.lpni, hdr=a.hdr,
        payload=b"\x55" * len(a.payload) if len(a.payload) == 8192 else a.payload)
    bed.run_batch()
    assert bed.st["c1"].framework.session.brw_errors == 0
    assert bed.st["s1"].srpc.counters.bulk_get == 5 * 8192


@pytest.mark.parametrize("check", [bulk.CHECK_NONE, bulk.CHECK_SIMPLE])
def test_a_read_client_keeps_the_bulk_only_when_it_checks_it(check: int) -> None:
    """brw read: with check=none nobody reads the data, so the client drops each bulk as
    it arrives (the socklnd then reuses the buffer at once, instead of holding one per RPC
    in flight); with check=simple it is kept until the RPC is done and checked there."""
    bed = Bed("con", "c1", "s1")
    bed.session(c=["c1"], s=["s1"])
    bed.brw(bulk.LST_BRW_READ, 8192, check, loop=4, concur=2)
    tests = bed.st["c1"].tests
    done, held = tests.rpc_done, []

    def spy(rpc: Any) -> None:  # sees each RPC as it completes, before the brw check
        held.append(len(rpc.bulk.data))
        done(rpc)

    tests.rpc_done = spy
    bed.run_batch()
    assert len(held) == 8 and set(held) == {0 if check == bulk.CHECK_NONE else 8192}
    assert bed.st["c1"].framework.session.brw_errors == 0
    assert bed.st["s1"].srpc.counters.bulk_put == 8 * 8192


def test_ping_test_sequences_and_stat_counts() -> None:
    bed = Bed("con", "c1", "s1", "s2")
    bed.session(c=["c1"], s=["s1", "s2"])
    assert bed.ioctl("con", "batch_add", name="p")["rc"] == 0
    r = bed.ioctl("con", "test_add", batch="p", type=2, loop=100, concur=4, dist=1, span=2,
                  param={}, **{"from": "c", "to": "s"})
    assert r["rc"] == 0
    before = bed.ioctl("con", "stat", name="s")["ents"]
    bed.run_batch("p")
    after = bed.ioctl("con", "stat", name="s")["ents"]
    # span 2: c1 pings both servers, 4 units each, 100 loops each
    for b, a in zip(before, after, strict=True):
        assert a["payload"]["rpc_rpcs_rcvd"] - b["payload"]["rpc_rpcs_rcvd"] == 400 + 1
    assert bed.st["c1"].framework.session.ping_errors == 0
    assert bed.st["c1"].tests.ping_seq == 800


def test_distribution_one_to_one_and_spans() -> None:
    """``--distribute 1:1``: client i tests server i; ``1:2``: two consecutive servers."""
    bed = Bed("con", "c1", "c2", "s1", "s2")
    bed.session(c=["c1", "c2"], s=["s1", "s2"])
    for name, span in (("one", 1), ("two", 2)):
        bed.ioctl("con", "batch_add", name=name)
        bed.ioctl("con", "test_add", batch=name, type=2, loop=1, concur=1, dist=1, span=span,
                  param={}, **{"from": "c", "to": "s"})
    dests = {n: {str(u.dest) for b in bed.st[n].framework.session.batches.values()
                 if b.tests and len(b.tests[0].units) == 1 for u in b.tests[0].units}
             for n in ("c1", "c2")}
    assert dests == {"c1": {bed.nid("s1")}, "c2": {bed.nid("s2")}}
    two = next(b for b in bed.st["c2"].framework.session.batches.values()
           if len(b.tests[0].units) == 2)
    # client 1: start ((1 // dist) * span) % 2 = 0 (lstcon_dstnodes_prep)
    assert [str(u.dest) for u in two.tests[0].units] == [bed.nid("s1"), bed.nid("s2")]


def test_an_rpc_without_answer_expires_after_rpc_timeout() -> None:
    """The fabric swallows everything (held): the client's brw RPC expires at 64 s
    (``rpc_timeout``), counted in rpcs_expired and as a brw error."""
    bed = Bed("con", "c1", "s1")
    bed.session(c=["c1"], s=["s1"])
    bed.brw(bulk.LST_BRW_WRITE, 4096, bulk.CHECK_NONE, loop=1)
    assert bed.ioctl("con", "batch_start", name="b")["rc"] == 0
    bed.fab.hold = True
    start = bed.fab.now
    bed.fab.run_until(start + 63.9)
    c1 = bed.st["c1"]
    assert c1.srpc.counters.rpcs_expired == 0
    bed.fab.run_until(start + 64.5)
    assert c1.srpc.counters.rpcs_expired == 1 and c1.framework.session.brw_errors == 1


def test_an_unreachable_node_is_down_after_the_transaction_timeout() -> None:
    bed = Bed("con", "n1")
    assert bed.ioctl("con", "session_new", name="t")["rc"] == 0
    bed.ioctl("con", "group_add", name="g")
    bed.fab.hold = True
    t0 = bed.fab.now
    r = bed.ioctl("con", "nodes_add", name="g", nids=[bed.nid("n1")])
    assert 30 <= bed.fab.now - t0 < 31  # LST_TRANS_TIMEOUT
    assert r["trans"]["rpc_errno"] == 110 and r["ents"][0]["rpc_errno"] == -110
    assert r["ents"][0]["state"] == DOWN


def test_a_node_in_another_session_is_busy_until_forced() -> None:
    """A node in one console's session answers another's MAKE_SESSION with EBUSY (Busy in
    that console's view); ``new_session --force`` makes the new console take it over."""
    bed = Bed("con", "con2", "n1")
    bed.session(g=["n1"])
    assert bed.ioctl("con2", "session_new", name="other", key=7)["rc"] == 0
    bed.ioctl("con2", "group_add", name="g", key=7)
    r = bed.ioctl("con2", "nodes_add", name="g", key=7, nids=[bed.nid("n1")])
    assert r["trans"]["fwk_errno"] == 16 and r["ents"][0]["state"] == BUSY  # EBUSY
    assert bed.ioctl("con2", "session_new", name="x", key=7, force=True)["rc"] == 0
    bed.ioctl("con2", "group_add", name="g", key=7)
    r = bed.ioctl("con2", "nodes_add", name="g", key=7, nids=[bed.nid("n1")])
    assert r["trans"]["fwk_errno"] == 0 and r["ents"][0]["state"] == ACTIVE  # taken over
    assert bed.st["n1"].framework.session.name == "x"
    r = bed.ioctl("con", "debug", kind="group", name="g")  # the first console sees it Busy
    assert r["ents"][0]["state"] == BUSY and r["ents"][0]["payload"] == "x"


def test_test_nodes_expire_without_their_console_and_the_pinger_keeps_them() -> None:
    """The console pings its nodes (DEBUG RPCs) once half their 100 s session timeout has
    passed, so 250 s of silence keep the session; with the console gone the node's session
    expires 100 s after its last framework RPC (``sfw_session_expired``)."""
    bed = Bed("con", "n1")
    bed.session(g=["n1"])
    bed.ioctl("con", "session_info")  # the console is used: its own timeout is 300 s
    bed.fab.run_until(bed.fab.now + 250)
    n1 = bed.st["n1"].framework
    assert n1.session is not None
    assert bed.st["con"].console.ses.nodes[NID.parse(bed.nid("n1"))].state == ACTIVE
    bed.fab.remove("con")  # the console node goes away
    t0 = bed.fab.now
    bed.fab.run_until(t0 + 101)
    assert n1.session is None and not n1.zombies


def test_an_idle_console_session_ends_on_every_node() -> None:
    """``new_session --timeout 10``: no ioctl for 10 s, and at the next pinger round the
    session ends on its nodes; the next ioctl finds no session (-ESRCH)."""
    bed = Bed("con", "n1")
    assert bed.ioctl("con", "session_new", name="t", timeout=10)["rc"] == 0
    bed.ioctl("con", "group_add", name="g")
    bed.ioctl("con", "nodes_add", name="g", nids=[bed.nid("n1")])
    assert bed.st["n1"].framework.session is not None
    bed.fab.run_until(bed.fab.now + 25)
    assert bed.st["n1"].framework.session is None
    assert bed.ioctl("con", "group_list", idx=0)["rc"] == -3  # ESRCH


def test_stop_force_aborts_rpcs_in_flight() -> None:
    bed = Bed("con", "c1", "s1")
    bed.session(c=["c1"], s=["s1"])
    bed.brw(bulk.LST_BRW_READ, MIB, bulk.CHECK_SIMPLE, loop=-1, concur=4)
    assert bed.ioctl("con", "batch_start", name="b")["rc"] == 0
    bed.fab.run_until(bed.fab.now + 1)
    r = bed.ioctl("con", "batch_stop", name="b", force=True)
    assert r["rc"] == 0 and r["trans"]["fwk"][0] == 1
    bed.fab.run_until(bed.fab.now + 1)
    assert bed.ioctl("con", "batch_query", name="b")["trans"]["fwk"][1] == 0
    assert bed.st["c1"].framework.session.brw_errors == 0  # aborted while stopping: no error


def test_the_burst_sink_stays_on_match_bits_zero() -> None:
    """The testbed's put/get bursts keep working beside selftest (portal 52, bits 0)."""
    fab = Fabric()
    for i, name in enumerate(("a", "b")):
        fab.add(name, make_node(50 + i, [NID.parse(f"10.8.0.{i + 1}@tcp")]))
        selftest.attach(fab.drivers[name], burst_data=bytes(4096))
    h = fab.call("a", fab.engines["a"].get, fab.now, NID.parse("10.8.0.2@tcp"), length=100,
                 portal=52)
    fab.run_until(fab.now + 1)
    final = [e for e in fab.events["a"] if e.handle == h][-1]
    assert (final.kind, final.status, len(final.payload)) == ("REPLY", 0, 100)
