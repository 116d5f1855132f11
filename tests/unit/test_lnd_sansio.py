"""The socklnd's sans-I/O parts without sockets: the connection table (typed connections,
choice, races, bounds, timeouts), the scatter-gather send queue, and bulk receive into
pooled buffers (``nodes/lnd/conntable.py``, ``sendq.py``, ``framing.py``)."""

from __future__ import annotations

import errno

from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.lnd import wire
from nodes.lnd.bufpool import BufferPool
from nodes.lnd.conntable import (
    ANY,
    BULK_IN,
    BULK_OUT,
    CONTROL,
    Conn,
    ConnTable,
    Verdict,
)
from nodes.lnd.framing import DIRECT_MIN, STAGE_SIZE, KsockConnection, LNetMessageReceived
from nodes.lnd.sendq import SendQueue, Tx
from nodes.lnet.hdr import LNET_MTU, LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

A, B = NID.parse("10.0.0.1@tcp"), NID.parse("10.0.0.2@tcp")


def _hdr(n: int, src: NID = A, dst: NID = B) -> LNetHdr:
    return LNetHdr(dest_nid=dst, src_nid=src, dest_pid=12345, src_pid=12345,
                   type=MsgType.PUT, payload_length=n, ptl_index=4)


def _conn(ctype: int, inc: int = 1) -> Conn:
    return Conn(A, B, B.ip, ctype, inc, True, KsockConnection(active=True), 0.0)


def test_typed_connections_are_made_in_ksocknal_connect_order() -> None:
    t = ConnTable(typed=True)
    t.conns_per_peer[A] = 2
    p = t.peer(A, B)
    made = []
    while (ctype := t.wanted_type(p)) is not None:
        made.append(ctype)
        t.attach(p, _conn(ctype))
    assert made == [CONTROL, BULK_IN, BULK_OUT, BULK_IN, BULK_OUT]
    untyped = ConnTable(typed=False)
    q = untyped.peer(A, B)
    assert untyped.wanted_type(q) == ANY
    untyped.attach(q, _conn(ANY))
    assert untyped.wanted_type(q) is None


def test_choose_by_size_then_load_then_round_robin() -> None:
    """``ksocknal_match_tx_v3``: < min_bulk (1 KiB with headers) prefers CONTROL, bigger
    prefers BULK_OUT, each falls back on the other; BULK_IN carries none; among equals the
    least loaded, then the least recently posted."""
    t = ConnTable(typed=True)
    t.conns_per_peer[A] = 2
    p = t.peer(A, B)
    ctrl, bin_, bo1, bo2 = _conn(CONTROL), _conn(BULK_IN), _conn(BULK_OUT), _conn(BULK_OUT)
    for c in (ctrl, bin_, bo1, bo2):
        t.attach(p, c)
    assert t.choose(p, 8) is ctrl
    assert t.choose(p, 1024 - wire.LNET_FRAME_HEAD - 1) is ctrl
    first = t.choose(p, 1024 - wire.LNET_FRAME_HEAD)
    second = t.choose(p, 1 << 20)
    assert {first, second} == {bo1, bo2}  # round robin between equals
    bo1.sendq.push(Tx(1, _hdr(100), bytes(100), head=bytes(96)))
    assert t.choose(p, 1 << 20) is bo2  # least loaded
    p.conns.remove(ctrl)
    assert t.choose(p, 8) in (bo1, bo2)  # small falls back on bulk out
    p.conns[:] = [bin_]
    assert t.choose(p, 8) is None  # bulk in carries none of our messages


def test_passive_verdicts_race_duplicate_and_bound() -> None:
    t = ConnTable(typed=True)
    p = t.peer(B, A)  # we are B; the peer A has the lower NID
    p.connector = object()
    assert t.passive_verdict(p, CONTROL) is Verdict.RACE
    q = t.peer(A, B)  # we are A; B is higher: its connections win even while we connect
    q.connector = object()
    assert t.passive_verdict(q, CONTROL) is Verdict.ACCEPT
    t.attach(q, _conn(CONTROL))
    assert t.passive_verdict(q, CONTROL) is Verdict.DUPLICATE
    t.attach(q, _conn(BULK_IN))
    t.attach(q, _conn(BULK_OUT))
    assert t.passive_verdict(q, ANY) is Verdict.TOO_MANY  # 3 x conns_per_peer


def test_close_fails_posted_and_queued_and_reports_dead_once_empty() -> None:
    t = ConnTable(typed=True)
    p = t.peer(A, B)
    c1, c2 = _conn(CONTROL), _conn(BULK_OUT)
    t.attach(p, c1)
    t.attach(p, c2)
    posted, queued, waiting = (Tx(i, _hdr(10), bytes(10), head=bytes(96)) for i in (1, 2, 3))
    c2.sendq.push(posted)
    c2.sendq.push(queued)
    c2.sendq.advance(50)  # posted: half written
    p.queue.append(waiting)
    closed = t.close(p, [c2], (-errno.ETIMEDOUT, HStatus.LOCAL_TIMEOUT),
                     (-errno.ETIMEDOUT, HStatus.NETWORK_TIMEOUT))
    assert [(tx.tx_id, s[1]) for tx, s in closed.failed] == [
        (1, HStatus.NETWORK_TIMEOUT), (2, HStatus.LOCAL_TIMEOUT)]
    assert not closed.dead and list(p.queue) == [waiting]  # c1 remains
    closed = t.close(p, [c1], (-errno.EIO, HStatus.LOCAL_ERROR))
    assert closed.dead and [tx.tx_id for tx, _ in closed.failed] == [3]
    again = t.close(p, [c1], (-errno.EIO, HStatus.LOCAL_ERROR))
    assert again.conns == [] and again.failed == []


def test_alive_notice_on_first_connection_with_reset_after_reboot() -> None:
    t = ConnTable(typed=False)
    p = t.peer(A, B)
    assert t.attach(p, _conn(ANY, inc=1)) == (True, False)
    t.close(p, list(p.conns), (-errno.EIO, HStatus.LOCAL_ERROR))
    assert t.attach(p, _conn(ANY, inc=1)) == (True, False)
    t.close(p, list(p.conns), (-errno.EIO, HStatus.LOCAL_ERROR))
    assert t.attach(p, _conn(ANY, inc=2)) == (True, True)


def test_timeouts_stale_txs_receive_and_send_stalls() -> None:
    t = ConnTable()
    p = t.peer(A, B)
    p.queue.extend([Tx(1, _hdr(0), b"", deadline=1.0), Tx(2, _hdr(0), b"", deadline=5.0)])
    assert [tx.tx_id for tx in t.stale_txs(p, 2.0)] == [1]
    c = _conn(ANY)
    c.framer.send_handshake(B, wire.KsockHello(A, B, 1, 1, 1, 0))
    c.framer.receive_data(wire.pack_hello(wire.KsockHello(B, A, 1, 1, 2, 1)))
    assert not t.rx_stalled(c, 10.0, 1.0)  # nothing begun
    c.framer.receive_data(wire.pack_lnet_head(_hdr(100)) + bytes(10))
    assert c.framer.rx_pending == 96 + 10
    assert not t.rx_stalled(c, 0.5, 1.0) and t.rx_stalled(c, 1.0, 1.0)
    c.sendq.push(Tx(3, _hdr(10), bytes(10), head=bytes(96)))
    assert not t.tx_stalled(c, 0.5, 1.0, outq=0, acked=None, retransmitting=False)
    assert t.tx_stalled(c, 1.0, 1.0, outq=0, acked=None, retransmitting=False)
    assert not t.tx_stalled(c, 1.5, 1.0, outq=0, acked=None, retransmitting=True)
    assert not t.tx_stalled(c, 1.6, 1.0, outq=0, acked=7, retransmitting=False)  # progress


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
       writes=st.lists(st.integers(1, 5000), min_size=1, max_size=40))
def test_sendq_partial_writes_complete_each_tx_once_in_order(sizes: list[int],
                                                             writes: list[int]) -> None:
    """Whatever the kernel takes per sendmsg, the bytes offered are the frames in order
    (never joined), and each tx completes exactly when its last byte went."""
    q = SendQueue()
    frames = []
    for i, n in enumerate(sizes):
        payload = bytes([i % 251]) * n
        tx = Tx(i, _hdr(n), payload, head=bytes([200 + i % 50]) * 96)
        frames.append(tx.head + payload)
        q.push(tx)
    stream, done = b"", []
    for w in writes:
        if not q:
            break
        bufs, size = q.iov()
        assert size == sum(len(b) for b in bufs) > 0
        took = b"".join(bytes(b) for b in bufs)[:w]
        stream += took
        done += [tx.tx_id for tx in q.advance(len(took))]
        assert q.nob == sum(len(f) for f in frames) - len(stream)
    assert stream == b"".join(frames)[:len(stream)]
    ends = [sum(len(f) for f in frames[:i + 1]) for i in range(len(frames))]
    assert done == [i for i, end in enumerate(ends) if end <= len(stream)]


def test_bulk_payload_lands_in_a_pooled_buffer_reused_once_released() -> None:
    """A payload above DIRECT_MIN is received into its own buffer (no copy after the bytes
    staged with its header) and handed on as a read-only view; the pool gives the buffer
    out again only once that view is gone; checksums still hold across the split."""
    pool = BufferPool(keep=2)
    p = KsockConnection(active=False, pool=pool)
    p.receive_data(wire.pack_connreq(B) + wire.pack_hello(wire.KsockHello(A, B, 1, 1, 1, 0)))
    p.send_hello(wire.KsockHello(B, A, 1, 1, 2, 1))
    n = DIRECT_MIN + 5000
    payload = bytes(range(256)) * (n // 256) + bytes(n % 256)
    frame = wire.pack_lnet_head(_hdr(n), payload, checksum=True) + payload
    got = []
    for start in range(0, len(frame), 7000):
        buf = p.get_buffer()
        chunk = frame[start:start + min(7000, len(buf))]
        buf[:len(chunk)] = chunk
        got += p.buffer_updated(len(chunk))
    (ev,) = got
    assert isinstance(ev, LNetMessageReceived) and isinstance(ev.payload, memoryview)
    assert ev.payload.readonly and ev.payload == payload
    first = ev.payload.obj
    second = pool.get(n)
    assert second.obj is not first  # the first is still viewed by the event's payload
    del ev, got, buf  # the last receive buffer was a view of it too
    assert pool.get(n).obj is first


def test_buffer_pool_grows_to_what_is_held_and_trims_when_idle() -> None:
    """A consumer holding more payloads than ``keep`` (a brw read client holds one per RPC
    in flight) gets pooled buffers, not fresh 1 MiB mappings, up to ``limit``; ``trim`` keeps
    them while buffers are being taken and drops the free ones above ``keep`` once a whole
    tick passed without a take; a buffer still held is never dropped."""
    pool = BufferPool(keep=2, limit=5)
    held = [pool.get(1 << 20) for _ in range(6)]
    assert pool.size == 5 and len({id(v.obj) for v in held}) == 6  # the sixth is one-off
    assert not any(held[5].obj is b for b in pool._bufs)
    del held[3:]
    again = pool.get(1 << 20)  # a freed one is reused
    assert any(again.obj is b for b in pool._bufs) and pool.size == 5
    del again
    assert pool.trim() == 0  # buffers were taken since the last tick: keep the working set
    assert pool.trim() == 2  # idle for a tick: the two free ones above keep go
    assert pool.size == 3 and all(any(h.obj is b for b in pool._bufs) for h in held)
    del held
    assert pool.trim() == 1 and pool.size == 2  # down to keep, never below


def test_a_buffer_still_viewed_anywhere_is_never_lent_again() -> None:
    """The pool's ownership (bufpool.py): a buffer is lent as a view, and not again while any
    view of it lives -- the borrower's own, a read-only one made from it, a slice of a
    slice, a memoryview of a view -- whoever holds it and in whatever order they go; once
    the last one is gone it is lent again with its contents intact (the probe that tells a
    free one changes nothing). The same holds mid-receive: a payload begun on one
    connection keeps its buffer from every other until it is finished, and a closed
    connection gives it back."""
    pool = BufferPool(keep=1, limit=4)
    claim = pool.get(100)
    buf = claim.obj
    claim[:3] = b"abc"
    views = [claim.toreadonly(), claim[10:][5:], memoryview(claim)[:2]]
    del claim
    for _ in range(len(views)):
        others = [pool.get(100) for _ in range(3)]
        assert all(o.obj is not buf for o in others) and pool.size == 4
        del others
        views.pop(0)  # the oldest first: the rest still hold it
    lent = [pool.get(1 << 20) for _ in range(pool.size)]
    assert any(v.obj is buf for v in lent) and bytes(buf[:3]) == b"abc"
    assert len(buf) == LNET_MTU
    del lent
    # mid-receive: the connection's claim holds it before any consumer has a view
    p = KsockConnection(active=False, pool=pool)
    p.receive_data(wire.pack_connreq(B) + wire.pack_hello(wire.KsockHello(A, B, 1, 1, 1, 0)))
    p.send_hello(wire.KsockHello(B, A, 1, 1, 2, 1))
    n = DIRECT_MIN * 2
    assert p.receive_data(wire.pack_lnet_head(_hdr(n), bytes(n)) + bytes(100)) == []
    def pooled(views: list[memoryview]) -> set[int]:
        return {id(v.obj) for v in views if any(v.obj is b for b in pool._bufs)}

    mid = [pool.get(n) for _ in range(pool.size)]  # one is one-off: the receiver holds one
    assert len(pooled(mid)) == pool.size - 1
    del mid
    p.close()  # the payload begun is dropped: its buffer is free again
    assert len(pooled([pool.get(n) for _ in range(pool.size)])) == pool.size


def test_a_stream_of_bulk_frames_bypasses_the_stage() -> None:
    """After a bulk payload the next read is offered one frame head only, so the bulk frame
    that follows (a bulk connection's stream) has its whole payload received into its own
    buffer, none of it staged and copied; a small frame after it still parses, and reads
    after that get the whole stage again."""
    p = KsockConnection(active=False, pool=BufferPool())
    p.receive_data(wire.pack_connreq(B) + wire.pack_hello(wire.KsockHello(A, B, 1, 1, 1, 0)))
    p.send_hello(wire.KsockHello(B, A, 1, 1, 2, 1))
    n = DIRECT_MIN * 4
    payloads = [bytes([i]) * n for i in (1, 2)] + [b"small"]
    stream = b"".join(wire.pack_lnet_head(_hdr(len(x)), x) + x for x in payloads)
    got, sizes, pos = [], [], 0
    while pos < len(stream):  # a socket that always has more than the buffer offered
        buf = p.get_buffer()
        k = min(len(buf), len(stream) - pos)
        sizes.append(len(buf))
        buf[:k] = stream[pos:pos + k]
        pos += k
        got += p.buffer_updated(k)
    assert [bytes(e.payload) for e in got] == payloads
    head = wire.LNET_FRAME_HEAD
    # stage (head + start of payload 1), payload 1's rest, head 2 only, payload 2 whole,
    # head 3 only, then the rest (small frame) into the whole stage
    assert sizes[2] == head and sizes[3] == n and sizes[4] == head
    assert len(p.get_buffer()) == STAGE_SIZE
