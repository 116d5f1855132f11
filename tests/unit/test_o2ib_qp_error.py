"""The ``qp-error`` fault kind on the emulated HCA (nodes/o2ib/verbs.py ``async_error``,
nodes/o2ib/ibfaults.py), issue 28 item 3.

A fabric's QP error comes while sends are in flight, and o2iblnd's answer depends on it:
a posted send flushes (IB_WC_WR_FLUSH_ERR → ``kiblnd_tx_complete``: -EIO,
LNET_MSG_STATUS_REMOTE_DROPPED, the peer NI blamed), while a tx only waiting for the peer's
PUT_ACK is aborted by ``kiblnd_abort_txs`` (-ECONNABORTED with no health status, which LNet's
``lnet_health_check`` calls inconsistent and ignores). So the fault errs each matching QP with
a send outstanding: now if it has one, else with the next one posted.
"""

from __future__ import annotations

from o2ibpair import Bench, put_hdr

from nodes.lnet.hstatus import HStatus
from nodes.o2ib import ibfaults
from nodes.o2ib.kibtx import ConnState
from nodes.o2ib.pd import ProtectionDomain
from nodes.o2ib.verbs import Opcode, QpState, QueuePair, SendWr, WcStatus

A, B = "10.70.0.1@o2ib", "10.70.0.2@o2ib"


def _pair() -> Bench:
    bench = Bench()
    bench.add("a", A, inc=11)
    bench.add("b", B, inc=22)
    return bench


def _done(b: Bench) -> list[tuple[int, int, HStatus]]:
    return [(d.tx_id, d.rc, d.hstatus) for d in b.nodes["a"].done]


def _rts() -> QueuePair:
    qp = QueuePair(ProtectionDomain())
    for s in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(s)
    return qp


def test_async_error_with_a_send_outstanding_flushes_it_now() -> None:
    qp = _rts()
    qp.post_send(SendWr(wr_id=7, opcode=Opcode.SEND, data=b"x"), 0.0)
    wcs = qp.async_error()
    assert qp.state is QpState.ERROR
    assert [(w.wr_id, w.status) for w in wcs if w.opcode is Opcode.SEND] == [
        (7, WcStatus.WR_FLUSH_ERR)]


def test_async_error_on_an_idle_qp_waits_for_the_next_send() -> None:
    """Nothing posted: the QP stays RTS until the next send, which is not sent but flushed
    when the CQ is next polled (not from inside ``ib_post_send``)."""
    qp = _rts()
    qp.post_recv(1, 64)
    assert qp.async_error() == [] and qp.state is QpState.RTS
    assert qp.post_send(SendWr(wr_id=8, opcode=Opcode.SEND, data=b"y"), 0.0) == []
    assert qp.state is QpState.RTS and qp.next_deadline() == 0.0
    wcs = qp.handle_timer(0.0)
    assert qp.state is QpState.ERROR
    assert [(w.wr_id, w.opcode, w.status) for w in wcs] == [
        (8, Opcode.SEND, WcStatus.WR_FLUSH_ERR), (1, Opcode.RECV, WcStatus.WR_FLUSH_ERR)]


def test_kiblnd_tx_complete_qp_error_on_an_idle_conn_drops_the_next_tx_remote() -> None:
    """qp-error on an established, idle connection: the next PUT's SEND is in flight when
    the QP errs, so it flushes: -EIO, REMOTE_DROPPED (``kiblnd_tx_complete``), and the
    connection closes; the message after that makes a new connection and completes."""
    b = _pair()
    b.send("a", 1, B, put_hdr(A, B, 1), b"x")
    assert _done(b) == [(1, 0, HStatus.OK)]
    lnd = b.nodes["a"].lnd
    b.feed("a", ibfaults.apply(lnd, "qp-error", next(iter(lnd.nets)), {}, True, b.now))
    assert lnd.qp_errors == 1 and _done(b) == [(1, 0, HStatus.OK)]
    b.send("a", 2, B, put_hdr(A, B, 1), b"y")
    assert _done(b)[1:] == []  # the completion is the CQ's, not ib_post_send's
    b.feed("a", lnd.handle_timer(b.now))
    assert _done(b)[1:] == [(2, -5, HStatus.REMOTE_DROPPED)]
    assert not [c for c in lnd.streams.values() if c.state == ConnState.ESTABLISHED
                and c.cm.qp.state is QpState.ERROR]
    b.send("a", 3, B, put_hdr(A, B, 1), b"z")
    assert _done(b)[2:] == [(3, 0, HStatus.OK)]
    assert [len(d.payload) for d in b.nodes["b"].delivered] == [1, 1]


def test_qp_error_deleted_before_a_send_leaves_the_qp_alone() -> None:
    b = _pair()
    b.send("a", 1, B, put_hdr(A, B, 1), b"x")
    lnd = b.nodes["a"].lnd
    ni = next(iter(lnd.nets))
    b.feed("a", ibfaults.apply(lnd, "qp-error", ni, {}, True, b.now))
    b.feed("a", ibfaults.apply(lnd, "qp-error", ni, {}, False, b.now))
    b.send("a", 2, B, put_hdr(A, B, 1), b"y")
    assert _done(b) == [(1, 0, HStatus.OK), (2, 0, HStatus.OK)]
