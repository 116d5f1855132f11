"""The emulated verbs layer (nodes/o2ib/verbs.py, cm.py, vwire.py), issue 28.

What o2iblnd relies on: ``kiblnd_cm_callback``'s rdma_cm events, ``kiblnd_complete``'s work
completion statuses (``kiblnd_tx_complete``/``kiblnd_rx_complete`` treat all but SUCCESS as
a failed connection), ``kiblnd_close_conn``'s drain (flush), RDMA against a key.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.lnet.errors import WireProtocolError
from nodes.o2ib import msg, vwire
from nodes.o2ib.cm import (
    _CM,
    IB_CM_REJ_CONSUMER_DEFINED,
    CmAction,
    CmEvent,
    CmEventType,
    CmId,
    CmInput,
    CmState,
    SendBytes,
)
from nodes.o2ib.pd import ProtectionDomain
from nodes.o2ib.verbs import (
    _QP,
    Opcode,
    QpInput,
    QpState,
    QueuePair,
    SendWr,
    VerbsError,
    WcStatus,
    WorkCompletion,
)

CONNREQ = msg.kiblnd_pack_msg(msg.KibMsg(
    type=msg.MsgType.CONNREQ, srcnid=1, body=msg.ConnParams(queue_depth=8, max_frags=256,
                                                            max_msg_size=4096)))


class Pair:
    """Two ids joined by a lossless stream (or a cut one: ``cut``)."""

    def __init__(self, **qp: float) -> None:
        self.pd_a, self.pd_p = ProtectionDomain(), ProtectionDomain()
        self.a = CmId(QueuePair(self.pd_a, **qp), active=True)  # type: ignore[arg-type]
        self.p = CmId(QueuePair(self.pd_p, **qp), active=False)  # type: ignore[arg-type]
        self.got: dict[bool, list[CmAction]] = {True: [], False: []}
        self.cut, self.now = False, 0.0

    def run(self, acts: list[CmAction], from_active: bool) -> None:
        """Deliver ``acts`` of one side; bytes go to the other side, recursively."""
        me, other = (self.a, self.p) if from_active else (self.p, self.a)
        del me
        for act in acts:
            if isinstance(act, SendBytes):
                if not self.cut:
                    self.run(other.receive_data(act.data, self.now), not from_active)
            else:
                self.got[from_active].append(act)

    def events(self, active: bool) -> list[CmEventType]:
        return [e.event for e in self.got[active] if isinstance(e, CmEvent)]

    def wcs(self, active: bool) -> list[WorkCompletion]:
        return [w for w in self.got[active] if isinstance(w, WorkCompletion)]

    def tick(self, to: float) -> None:
        self.now = to
        self.run(self.a.handle_timer(to), True)
        self.run(self.p.handle_timer(to), False)

    def establish(self) -> None:
        self.run(self.a.resolve_addr(), True)
        self.run(self.a.resolve_route(), True)
        self.run(self.a.connect(CONNREQ, 0.0), True)
        req = self.got[False][-1]
        assert isinstance(req, CmEvent) and req.event is CmEventType.CONNECT_REQUEST
        assert msg.kiblnd_unpack_msg(req.private_data).type is msg.MsgType.CONNREQ
        self.run(self.p.accept(b"connack", 0.0), False)


def test_connect_handshake_events_and_qp_states() -> None:
    """kiblnd_cm_callback's active path ADDR_RESOLVED → ROUTE_RESOLVED → ESTABLISHED."""
    pr = Pair()
    pr.establish()
    assert pr.events(True) == [CmEventType.ADDR_RESOLVED, CmEventType.ROUTE_RESOLVED,
                               CmEventType.ESTABLISHED]
    assert pr.events(False) == [CmEventType.CONNECT_REQUEST, CmEventType.ESTABLISHED]
    est = pr.got[True][-1]
    assert isinstance(est, CmEvent) and est.private_data == b"connack"
    assert pr.a.qp.state is pr.p.qp.state is QpState.RTS
    assert pr.a.state is pr.p.state is CmState.CONNECTED
    assert pr.a.next_deadline() is None and pr.p.next_deadline() is None


def test_send_consumes_posted_receive() -> None:
    pr = Pair()
    pr.establish()
    pr.run(pr.p.post_recv(7, 4096), False)
    pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.SEND, data=b"imm"), 0.0), True)
    assert pr.wcs(False) == [WorkCompletion(7, Opcode.RECV, WcStatus.SUCCESS, 3, b"imm")]
    assert pr.wcs(True) == [WorkCompletion(1, Opcode.SEND, WcStatus.SUCCESS, 3)]


def test_rnr_then_receive_posted_is_delivered() -> None:
    pr = Pair(rnr_delay=0.5)
    pr.establish()
    pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.SEND, data=b"x"), 0.0), True)
    assert pr.wcs(True) == [] and pr.a.next_deadline() == 0.5
    pr.run(pr.p.post_recv(9, 64), False)
    pr.tick(0.5)
    assert [w.status for w in pr.wcs(True)] == [WcStatus.SUCCESS]
    assert pr.wcs(False)[0].wr_id == 9


def test_rnr_retry_exceeded_fails_and_flushes() -> None:
    """rnr_retry_count 0: the first RNR NAK → RNR_RETRY_EXC_ERR, the rest flushed."""
    pr = Pair(rnr_retry_count=0)
    pr.establish()
    pr.run(pr.a.post_recv(50, 64), True)
    pr.cut = True
    pr.run(pr.a.post_send(SendWr(wr_id=2, opcode=Opcode.SEND, data=b"y"), 0.0), True)
    pr.cut = False
    pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.SEND, data=b"x"), 0.0), True)
    assert [(w.wr_id, w.status) for w in pr.wcs(True)] == [
        (1, WcStatus.RNR_RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR), (50, WcStatus.WR_FLUSH_ERR)]
    assert pr.a.qp.state is QpState.ERROR


def test_retry_exceeded_only_after_all_ack_timeouts() -> None:
    """No ACK: (retry_count + 1) ack timeouts, then RETRY_EXC_ERR (kiblnd_complete)."""
    pr = Pair(ack_timeout=1.0, retry_count=2)
    pr.establish()
    pr.cut = True
    pr.run(pr.a.post_send(SendWr(wr_id=4, opcode=Opcode.SEND, data=b"z"), 0.0), True)
    for t in (1.0, 2.0):
        pr.tick(t)
        assert pr.wcs(True) == []
    pr.tick(3.0)
    assert pr.wcs(True) == [WorkCompletion(4, Opcode.SEND, WcStatus.RETRY_EXC_ERR)]
    assert pr.a.qp.state is QpState.ERROR


def test_receive_too_long_is_loc_len_and_rem_inv_req() -> None:
    pr = Pair()
    pr.establish()
    pr.run(pr.p.post_recv(7, 2), False)
    pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.SEND, data=b"long"), 0.0), True)
    assert pr.wcs(False)[0].status is WcStatus.LOC_LEN_ERR
    assert pr.wcs(True)[0].status is WcStatus.REM_INV_REQ_ERR


def test_rdma_write_and_read_against_a_key() -> None:
    pr = Pair()
    pr.establish()
    sink = pr.pd_p.reg_mr(16)
    pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.RDMA_WRITE, data=b"bulk",
                                 rkey=sink.rkey, remote_addr=4), 0.0), True)
    assert bytes(sink.buf[4:8]) == b"bulk"
    local = pr.pd_a.reg_mr(8)
    pr.run(pr.a.post_send(SendWr(wr_id=2, opcode=Opcode.RDMA_READ, rkey=sink.rkey,
                                 remote_addr=2, length=6, local=local, local_addr=1), 0.0), True)
    assert bytes(local.buf) == b"\0\0\0bulk\0"
    assert [(w.wr_id, w.status, w.byte_len) for w in pr.wcs(True)] == [
        (1, WcStatus.SUCCESS, 4), (2, WcStatus.SUCCESS, 6)]


@pytest.mark.parametrize("case", ["bad key", "past the end", "no remote write", "read denied"])
def test_rdma_access_violation_is_rem_access_err(case: str) -> None:
    pr = Pair()
    pr.establish()
    mr = pr.pd_p.reg_mr(16, remote_write=case != "no remote write",
                        remote_read=case != "read denied")
    key = mr.rkey + 1 if case == "bad key" else mr.rkey
    addr = 14 if case == "past the end" else 0
    if case == "read denied":
        wr = SendWr(wr_id=3, opcode=Opcode.RDMA_READ, rkey=key, length=4,
                    local=pr.pd_a.reg_mr(4))
    else:
        wr = SendWr(wr_id=3, opcode=Opcode.RDMA_WRITE, data=b"abcd", rkey=key, remote_addr=addr)
    pr.run(pr.a.post_send(wr, 0.0), True)
    assert pr.wcs(True) == [WorkCompletion(3, wr.opcode, WcStatus.REM_ACCESS_ERR)]
    assert bytes(mr.buf) == bytes(16)
    assert pr.a.qp.state is pr.p.qp.state is QpState.ERROR


def test_fail_next_rdma_is_rem_op_err_then_recovers_count() -> None:
    pr = Pair()
    pr.establish()
    mr = pr.pd_p.reg_mr(8)
    pr.p.qp.fail_next_rdma(1)
    pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.RDMA_WRITE, data=b"a", rkey=mr.rkey),
                          0.0), True)
    assert pr.wcs(True)[0].status is WcStatus.REM_OP_ERR


def test_disconnect_flushes_and_timewait_exit() -> None:
    """rdma_disconnect: posted WRs flushed (kiblnd_close_conn drains), DISCONNECTED on both
    sides, TIMEWAIT_EXIT after timewait; a later post completes WR_FLUSH_ERR."""
    pr = Pair()
    pr.establish()
    pr.run(pr.a.post_recv(11, 64), True)
    pr.run(pr.p.post_recv(12, 64), False)
    pr.now = 2.0
    pr.run(pr.a.disconnect(2.0), True)
    assert pr.wcs(True) == [WorkCompletion(11, Opcode.RECV, WcStatus.WR_FLUSH_ERR)]
    assert pr.wcs(False) == [WorkCompletion(12, Opcode.RECV, WcStatus.WR_FLUSH_ERR)]
    assert pr.events(True)[-1] is pr.events(False)[-1] is CmEventType.DISCONNECTED
    pr.tick(2.5)
    assert CmEventType.TIMEWAIT_EXIT not in pr.events(True)
    pr.tick(3.0)
    assert pr.events(True)[-1] is pr.events(False)[-1] is CmEventType.TIMEWAIT_EXIT
    assert pr.a.post_send(SendWr(wr_id=5, opcode=Opcode.SEND), 3.0) == [
        WorkCompletion(5, Opcode.SEND, WcStatus.WR_FLUSH_ERR)]


@pytest.mark.parametrize("why", list(msg.RejectReason))
def test_reject_carries_kib_rej(why: msg.RejectReason) -> None:
    """kiblnd_reject → REJECTED(status=IB_CM_REJ_CONSUMER_DEFINED) read by kiblnd_rejected."""
    pr = Pair()
    pr.run(pr.a.resolve_addr() + pr.a.resolve_route() + pr.a.connect(CONNREQ, 0.0), True)
    pr.run(pr.p.reject(msg.pack_rej(msg.KibRej(why=why, incarnation=5))), False)
    ev = pr.got[True][-1]
    assert isinstance(ev, CmEvent) and ev.event is CmEventType.REJECTED
    assert ev.status == IB_CM_REJ_CONSUMER_DEFINED
    assert msg.unpack_rej(ev.private_data).why is why
    assert pr.a.state is pr.p.state is CmState.CLOSED


def test_unreachable_at_cm_timeout_and_connect_error_without_rtu() -> None:
    pr = Pair()
    pr.cut = True
    pr.run(pr.a.resolve_addr() + pr.a.resolve_route() + pr.a.connect(CONNREQ, 0.0), True)
    pr.tick(4.9)
    assert CmEventType.UNREACHABLE not in pr.events(True)
    pr.tick(5.0)
    assert pr.got[True][-1] == CmEvent(CmEventType.UNREACHABLE, -110)
    p = CmId(QueuePair(ProtectionDomain()), active=False)
    p.receive_data(vwire.pack(vwire.Packet(vwire.Kind.CM_REQ, (), CONNREQ)), 0.0)
    p.accept(b"", 0.0)
    assert p.handle_timer(5.0) == [CmEvent(CmEventType.CONNECT_ERROR, -110)]


def test_illegal_local_calls_raise_verbs_error() -> None:
    qp = QueuePair(ProtectionDomain(), max_recv_wr=1)
    with pytest.raises(VerbsError, match="post_send illegal in QP state RESET"):
        qp.post_send(SendWr(wr_id=1, opcode=Opcode.SEND), 0.0)
    qp.modify(QpState.INIT)
    qp.post_recv(1, 8)
    with pytest.raises(VerbsError, match="receive queue full"):
        qp.post_recv(2, 8)
    cm = CmId(QueuePair(ProtectionDomain()), active=True)
    with pytest.raises(VerbsError, match="rdma_connect illegal"):
        cm.connect(b"", 0.0)
    cm.resolve_addr()
    cm.resolve_route()
    with pytest.raises(VerbsError, match="CM_REQ private data 57 > 56"):
        cm.connect(bytes(57), 0.0)
    assert len(CONNREQ) == 56  # o2iblnd's CONNREQ fits the REQ exactly


def test_tables_are_total_for_error() -> None:
    """Every QP state can go to ERROR; unlisted pairs are errors, not silent."""
    assert all((s, QpInput.TO_ERROR) in _QP for s in QpState)
    missing = [(s, i) for s in CmState for i in CmInput if (s, i) not in _CM]
    assert (CmState.CONNECTED, CmInput.RX_REQ) in missing


def test_unexpected_cm_packet_is_a_wire_error_kept() -> None:
    pr = Pair()
    pr.establish()
    rep = vwire.pack(vwire.Packet(vwire.Kind.CM_REQ, (), b""))
    assert pr.p.receive_data(rep, 1.0) == []
    assert pr.p.error is not None and "REQ received in state established" in str(pr.p.error)
    assert pr.p.qp.state is QpState.ERROR
    with pytest.raises(WireProtocolError):
        pr.p.receive_data(b"", 1.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=80), max_size=6), st.booleans())
def test_fuzz_peer_bytes_only_wire_errors(chunks: list[bytes], connected: bool) -> None:
    """Random peer bytes: actions or a kept WireProtocolError, never another exception."""
    pr = Pair()
    if connected:
        pr.establish()
    for c in chunks:
        try:
            pr.p.receive_data(c, 0.0)
        except WireProtocolError:
            break


def test_packet_reader_bounds() -> None:
    r = vwire.PacketReader()
    with pytest.raises(WireProtocolError, match="packet length"):
        r.feed((vwire.MAX_PACKET + 1).to_bytes(4, "little"))
    assert vwire.PacketReader().feed(b"\x03\x00\x00\x00\x0a") == []  # partial: held
    with pytest.raises(WireProtocolError, match="short SEND"):
        vwire.PacketReader().feed(b"\x02\x00\x00\x00\x0a\x00")


@pytest.mark.parametrize("state", list(QpState))
@pytest.mark.parametrize("inp", list(QpInput))
def test_every_qp_state_input_pair(state: QpState, inp: QpInput) -> None:
    """STYLE rule 2: each (state, local input) either follows ``_QP`` or raises VerbsError
    (-EINVAL) and leaves the state as it was."""
    qp = QueuePair(ProtectionDomain())
    qp.state = state
    call = {QpInput.TO_INIT: lambda: qp.modify(QpState.INIT),
            QpInput.TO_RTR: lambda: qp.modify(QpState.RTR),
            QpInput.TO_RTS: lambda: qp.modify(QpState.RTS),
            QpInput.TO_ERROR: lambda: qp.modify(QpState.ERROR),
            QpInput.POST_RECV: lambda: qp.post_recv(1, 8),
            QpInput.POST_SEND: lambda: qp.post_send(SendWr(wr_id=1, opcode=Opcode.SEND), 0.0)}
    if (state, inp) in _QP:
        call[inp]()
        assert qp.state is _QP[(state, inp)]
    else:
        with pytest.raises(VerbsError) as e:
            call[inp]()
        assert e.value.errno == -22 and qp.state is state


def _packet(kind: vwire.Kind, n: int, data: bytes) -> bytes:
    fields = {vwire.Kind.SEND: (n,), vwire.Kind.WRITE: (n, 0x101 + n % 3, n % 20),
              vwire.Kind.READ_REQ: (n, 0x101 + n % 3, n % 20, n % 9),
              vwire.Kind.READ_RESP: (n,), vwire.Kind.ACK: (n,),
              vwire.Kind.NAK: (n, 1 + n % 4)}.get(kind, ())
    return vwire.pack(vwire.Packet(kind, fields, data))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(vwire.Kind)), st.integers(0, 4),
                          st.binary(max_size=70)), max_size=8),
       st.booleans(), st.booleans())
def test_fuzz_well_formed_packets_in_any_order(pkts: list[tuple[vwire.Kind, int, bytes]],
                                               connected: bool, active: bool) -> None:
    """Well-framed packets of every kind, in any order, to either side: actions or a kept
    WireProtocolError; never a VerbsError or any other exception from peer input."""
    pr = Pair()
    if connected:
        pr.establish()
        pr.pd_a.reg_mr(16)
        pr.pd_p.reg_mr(16)
        pr.run(pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.SEND, data=b"q"), 0.0), True)
    side = pr.a if active else pr.p
    for t, (kind, n, data) in enumerate(pkts):
        try:
            side.receive_data(_packet(kind, n, data), float(t))
            side.handle_timer(float(t) + 10)
        except WireProtocolError:
            assert side.error is not None and side.state is CmState.CLOSED
            assert side.handle_timer(1e9) == [] and side.next_deadline() is None
            break


def test_wire_error_while_connecting_cancels_the_cm_timer() -> None:
    """A protocol error closes the id: its REQ timer must not fire into CLOSED later."""
    pr = Pair()
    pr.cut = True
    pr.run(pr.a.resolve_addr() + pr.a.resolve_route() + pr.a.connect(CONNREQ, 0.0), True)
    pr.a.receive_data(b"\x01\x00\x00\x00\xee", 0.1)
    assert pr.a.error is not None and "unknown packet kind 238" in str(pr.a.error)
    assert pr.a.next_deadline() is None and pr.a.handle_timer(10.0) == []


def _one_read(pr: Pair, acts: list[CmAction]) -> list[CmAction]:
    """The bytes of ``acts`` (the active side's) reach the passive side as one read."""
    data = b"".join(bytes(a.data) + bytes(a.tail) for a in acts if isinstance(a, SendBytes))
    return pr.p.receive_data(data, pr.now)


def test_coalesced_ack_completes_every_request_up_to_its_psn() -> None:
    """IBA 9.7.5.1.2: one ACK acknowledges every request up to its PSN. One read of eight
    SENDs and an RDMA WRITE is answered by a single ACK; the requester completes all nine,
    in order (kiblnd_complete sees each tx's completion)."""
    pr = Pair()
    pr.establish()
    for i in range(8):
        pr.run(pr.p.post_recv(100 + i, 64), False)
    mr = pr.pd_p.reg_mr(16)
    acts: list[CmAction] = []
    for i in range(8):
        acts += pr.a.post_send(SendWr(wr_id=i, opcode=Opcode.SEND, data=b"m%d" % i), 0.0)
    acts += pr.a.post_send(SendWr(wr_id=8, opcode=Opcode.RDMA_WRITE, data=b"w" * 16,
                                  rkey=mr.rkey), 0.0)
    back = _one_read(pr, acts)
    acks = [vwire.unpack(bytes(a.data)[4:]) for a in back if isinstance(a, SendBytes)]
    assert [(p.kind, p.fields) for p in acks] == [(vwire.Kind.ACK, (9,))]
    assert [w.wr_id for w in back if isinstance(w, WorkCompletion)] == list(range(100, 108))
    pr.run(back, False)
    assert [(w.wr_id, w.status) for w in pr.wcs(True)] == [
        (i, WcStatus.SUCCESS) for i in range(9)]
    assert pr.a.next_deadline() is None and bytes(mr.buf) == b"w" * 16


def test_coalesced_ack_skips_a_request_waiting_out_rnr() -> None:
    """Two receives posted, three SENDs in one read: ACK 2 leaves before the RNR NAK of the
    third, which is resent after rnr_delay and acknowledged on its own."""
    pr = Pair(rnr_delay=0.5)
    pr.establish()
    pr.run(pr.p.post_recv(1, 64), False)
    pr.run(pr.p.post_recv(2, 64), False)
    acts: list[CmAction] = []
    for i in range(3):
        acts += pr.a.post_send(SendWr(wr_id=10 + i, opcode=Opcode.SEND, data=b"x"), 0.0)
    back = _one_read(pr, acts)
    kinds = [vwire.unpack(bytes(a.data)[4:]) for a in back if isinstance(a, SendBytes)]
    assert [(p.kind, p.fields[0]) for p in kinds] == [(vwire.Kind.ACK, 2), (vwire.Kind.NAK, 3)]
    pr.run(back, False)
    assert [w.wr_id for w in pr.wcs(True)] == [10, 11]
    pr.run(pr.p.post_recv(3, 64), False)
    pr.tick(0.5)
    assert [(w.wr_id, w.status) for w in pr.wcs(True)] == [
        (10, WcStatus.SUCCESS), (11, WcStatus.SUCCESS), (12, WcStatus.SUCCESS)]


@pytest.mark.parametrize("split", [0, 7, 4096])
def test_large_rdma_write_is_received_into_its_target_region(split: int) -> None:
    """An HCA DMAs an RDMA WRITE into the registered region: the reader receives a large
    WRITE's data straight into the MR at the given address (no staging buffer of the pool,
    no copy at completion), whole reads or reads of ``split`` bytes; a WRITE the responder
    will NAK (fail_next_rdma) is not placed and leaves the region untouched."""
    pr = Pair()
    pr.establish()
    mr = pr.pd_p.reg_mr(1 << 16)
    mr.buf[:] = bytes(len(mr.buf))
    body = bytes(range(256)) * 80  # 20480 bytes > vwire.DIRECT_MIN
    acts = pr.a.post_send(SendWr(wr_id=1, opcode=Opcode.RDMA_WRITE, data=body, rkey=mr.rkey,
                                 remote_addr=1000), 0.0)
    data = b"".join(bytes(a.data) + bytes(a.tail) for a in acts if isinstance(a, SendBytes))
    pooled = pr.pd_p.pool.size
    back: list[CmAction] = []
    for i in range(0, len(data), split or len(data)):
        back += pr.p.receive_data(data[i:i + (split or len(data))], 0.0)
    assert bytes(mr.buf[1000:1000 + len(body)]) == body and not any(mr.buf[:1000])
    assert pr.pd_p.pool.size == pooled  # no pooled body buffer was taken
    pr.run(back, False)
    assert [(w.wr_id, w.status) for w in pr.wcs(True)] == [(1, WcStatus.SUCCESS)]
    pr.p.qp.fail_next_rdma(1)
    acts = pr.a.post_send(SendWr(wr_id=2, opcode=Opcode.RDMA_WRITE, data=bytes(len(body)),
                                 rkey=mr.rkey, remote_addr=1000), 0.0)
    data = b"".join(bytes(a.data) + bytes(a.tail) for a in acts if isinstance(a, SendBytes))
    pr.run(pr.p.receive_data(data, 0.0), False)
    assert bytes(mr.buf[1000:1000 + len(body)]) == body  # REM_OP: not placed, not written
    assert [(w.wr_id, w.status) for w in pr.wcs(True)] == [
        (1, WcStatus.SUCCESS), (2, WcStatus.REM_OP_ERR)]
