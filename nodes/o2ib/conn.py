"""One o2iblnd connection (``struct kib_conn``): credits, the five tx queues, receives.

Theory of operation (o2iblnd_cb.c, lustre-release master): a connection holds an emulated
``rdma_cm_id`` and its QP (``cm.py``). Sends follow ``kiblnd_queue_tx_locked`` (IMMEDIATE →
``tx_queue``; PUT_REQ/GET_REQ → ``tx_queue_rsrvd``, moved to ``tx_queue`` as reserved
credits allow; PUT_NAK/PUT_ACK/PUT_DONE/GET_DONE and (v2) NOOP → ``tx_queue_nocred``;
v1 NOOP → ``tx_noops``) and ``kiblnd_check_sends_locked``/``kiblnd_post_tx_locked``: at most
``concurrent_sends`` posted, one peer credit per credited message, v1 keeps the last credit
for a NOOP, each message carries ``outstanding_credits`` back. A NOOP is queued when the
credits owed reach ``peer_credits_hiw`` (scaled to the negotiated queue depth) or
``keepalive`` seconds passed without a send (``kiblnd_need_noop``). Receives follow
``kiblnd_handle_rx`` and ``kiblnd_recv``: which buffer repost returns a credit to the peer
(PEER), to ourselves (RSRVD) or none. A completion failure closes the connection with -EIO
and the tx ends REMOTE_DROPPED (``kiblnd_tx_complete``); a close aborts the queued txs
(LOCAL_ERROR, or LOCAL_TIMEOUT after a timeout) and the waiting ones (REMOTE_TIMEOUT after a
timeout) before the QP's flushed completions arrive (``kiblnd_abort_txs``, then the drain:
seed 003 hlth-lnd-drain-qp).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import Final

from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from nodes.o2ib import connrx
from nodes.o2ib import msg as M
from nodes.o2ib.cm import CmAction, CmEvent, CmId, SendBytes
from nodes.o2ib.kibtx import (
    ConnState,
    Deliver,
    O2ibTunables,
    Output,
    PostRx,
    Tx,
    TxDone,
    Write,
    oob_msgs,
)
from nodes.o2ib.verbs import Opcode, SendWr, VerbsError, WcStatus, WorkCompletion

EIO, ECONNABORTED, ETIMEDOUT, EPROTO, ESTALE = 5, 103, 110, 71, 116
IBLND_MSG_QUEUE_SIZE_V1: Final = 8
IBLND_CREDIT_HIGHWATER_V1: Final = 7


class Conn:
    """``kib_conn``: ``out`` collects the transport's outputs; ``on_close(conn, error)``
    is ``kiblnd_close_conn`` at the LND (peer bookkeeping)."""

    def __init__(self, *, stream: int, ni: NID, peer: NID, cm: CmId, tun: O2ibTunables,
                 version: int, queue_depth: int, max_frags: int, incarnation: int,
                 out: list[Output], on_close: Callable[[Conn, int], None],
                 cookies: Callable[[], int], counts: dict[str, int] | None = None) -> None:
        self.stream, self.ni, self.peer, self.cm, self.tun = stream, ni, peer, cm, tun
        self.version, self.queue_depth, self.max_frags = version, queue_depth, max_frags
        self.incarnation = incarnation  # the peer's (ibc_incarnation)
        self.my_stamp = 0  # our net's incarnation (ibn_incarnation), set by the LND
        self.state = ConnState.INIT
        self.out, self._on_close, self.new_cookie = out, on_close, cookies
        self.counts = counts if counts is not None else {}  # messages posted, by type
        self.credits = self.outstanding = self.reserved = 0
        self.nsends_posted = self.noops_posted = 0
        self.comms_error = 0
        self.last_send = 0.0
        self.now = 0.0
        self.reconnect = False
        self.tx_queue: deque[Tx] = deque()
        self.tx_noops: deque[Tx] = deque()
        self.tx_rsrvd: deque[Tx] = deque()
        self.tx_nocred: deque[Tx] = deque()
        self.active: list[Tx] = []
        self.events: list[CmEvent] = []
        self._wr: dict[int, Tx | None] = {}  # wr_id -> tx (None: a receive buffer)
        self._next_wr = 1
        #: GET_REQs handed to LNet, awaiting the engine's REPLY: wmd -> (cookie, rd, when)
        self.pending_gets: dict[tuple[int, int], tuple[int, M.RdmaDesc, float]] = {}

    # --- verbs plumbing ----------------------------------------------------------------------
    def run(self, acts: list[CmAction]) -> None:
        """Carry out the CM's outputs: bytes to the stream, completions, CM events kept."""
        if not acts:
            return
        for a in acts:  # the HCA's packets (ACKs) leave before software polls the CQ
            if isinstance(a, SendBytes):
                self.out.append(Write(self.stream, a.data, a.tail))
        for a in acts:
            if isinstance(a, WorkCompletion):
                self.complete(a)
            elif isinstance(a, CmEvent):
                self.events.append(a)

    def post_receives(self) -> None:
        """The initial receives: IBLND_RX_MSGS = 2 * queue depth + OOB (``kiblnd_create_conn``)."""
        for _ in range(self.queue_depth * 2 + oob_msgs(self.version)):
            self.post_rx(PostRx.NO_CREDIT)

    def _wr_id(self, tx: Tx | None) -> int:
        w = self._next_wr
        self._next_wr += 1
        self._wr[w] = tx
        return w

    def post_rx(self, credit: PostRx) -> None:
        """``kiblnd_post_rx``."""
        if self.state > ConnState.ESTABLISHED:
            return
        try:
            self.run(self.cm.post_recv(self._wr_id(None), M.IBLND_MSG_SIZE))
        except VerbsError as e:
            if self.state == ConnState.ESTABLISHED:
                self.close(e.errno)
            return
        if self.state < ConnState.ESTABLISHED or credit is PostRx.NO_CREDIT:
            return
        if credit is PostRx.PEER_CREDIT:
            self.outstanding += 1
        else:
            self.reserved += 1
        self.check_sends()

    # --- sending ------------------------------------------------------------------------------
    def concurrent_sends(self) -> int:
        cs = self.tun.concurrent_sends
        if self.version == M.IBLND_MSG_VERSION_1:
            return min(max(cs, IBLND_MSG_QUEUE_SIZE_V1 // 2), IBLND_MSG_QUEUE_SIZE_V1 * 2)
        return cs

    def _highwater(self) -> int:
        if self.version == M.IBLND_MSG_VERSION_1:
            return IBLND_CREDIT_HIGHWATER_V1
        return self.queue_depth * self.tun.peer_credits_hiw // self.tun.peer_credits

    def _keepalive_due(self) -> bool:
        ka = self.tun.keepalive
        return ka > 0 and self.now > self.last_send + ka

    def need_noop(self) -> bool:
        """``kiblnd_need_noop``."""
        if self.outstanding < self._highwater() and not self._keepalive_due():
            return False
        if self.version != M.IBLND_MSG_VERSION_1:
            if self.tx_nocred:
                return False
            return not self.tx_queue or self.credits == 0
        if self.tx_noops or self.tx_nocred or self.credits == 0:
            return False
        if self.credits == 1 and self.outstanding == 0:
            return False
        return not self.tx_queue or self.credits == 1

    def queue(self, tx: Tx) -> None:
        """``kiblnd_queue_tx_locked``."""
        if self.state >= ConnState.DISCONNECTED:
            tx.status, tx.waiting = -ECONNABORTED, False
            self.tx_done(tx)
            return
        tx.queued = True
        tx.deadline = self.now + self.tun.timeout
        t = tx.type
        if t in (M.MsgType.PUT_REQ, M.MsgType.GET_REQ):
            self.tx_rsrvd.append(tx)
        elif t is M.MsgType.IMMEDIATE:
            self.tx_queue.append(tx)
        elif t is M.MsgType.NOOP and self.version == M.IBLND_MSG_VERSION_1:
            self.tx_noops.append(tx)
        else:
            self.tx_nocred.append(tx)

    def check_sends(self) -> None:
        """``kiblnd_check_sends_locked``."""
        if self.state < ConnState.ESTABLISHED:
            return
        while self.reserved > 0 and self.tx_rsrvd:
            self.tx_queue.append(self.tx_rsrvd.popleft())
            self.reserved -= 1
        if self.need_noop():
            self.queue(Tx(M.MsgType.NOOP, None))
        while True:
            if self.tx_nocred:
                q, credit = self.tx_nocred, 0
            elif self.tx_noops:
                q, credit = self.tx_noops, 1
            elif self.tx_queue:
                q, credit = self.tx_queue, 1
            else:
                return
            if not self._post(q, credit):
                return

    def _post(self, q: deque[Tx], credit: int) -> bool:
        """``kiblnd_post_tx_locked``; False: stop (-EAGAIN, or the connection closed)."""
        tx = q[0]
        if self.nsends_posted >= self.concurrent_sends():
            return False
        if credit and self.credits == 0:
            return False
        if (credit and self.version == M.IBLND_MSG_VERSION_1 and self.credits == 1
                and tx.type is not M.MsgType.NOOP):
            return False
        q.popleft()
        tx.queued = False
        if tx.type is M.MsgType.NOOP and (not self.need_noop() or (
                self.version != M.IBLND_MSG_VERSION_1 and self.noops_posted == 2)):
            return True  # a redundant NOOP is dropped (LOCAL_ERROR on no LNet message)
        m = M.KibMsg(type=tx.type, body=tx.body, version=self.version,
                     credits=self.outstanding, srcnid=self.ni.nid4,
                     srcstamp=self.my_stamp, dstnid=self.peer.nid4,
                     dststamp=self.incarnation)
        frame = M.kiblnd_pack_msg(m)
        tx.credits_sent = self.outstanding
        self.counts[tx.type.name] = self.counts.get(tx.type.name, 0) + 1
        self.credits -= credit
        self.outstanding = 0
        self.nsends_posted += 1
        if tx.type is M.MsgType.NOOP:
            self.noops_posted += 1
        tx.sending += 1
        if tx not in self.active:
            self.active.append(tx)
        self.last_send = self.now
        if self.state != ConnState.ESTABLISHED:
            return self._post_failed(tx, credit, -ECONNABORTED)
        try:
            acts: list[CmAction] = []
            if tx.rdma is not None and tx.payload:
                acts += self.cm.post_send(SendWr(
                    wr_id=self._wr_id(None), opcode=Opcode.RDMA_WRITE, data=tx.payload,
                    rkey=tx.rdma.key, remote_addr=tx.rdma.frags[0][1]), self.now)
            acts += self.cm.post_send(SendWr(wr_id=self._wr_id(tx), opcode=Opcode.SEND,
                                             data=frame), self.now)
        except VerbsError as e:
            return self._post_failed(tx, credit, e.errno)
        self.run(acts)
        return self.state == ConnState.ESTABLISHED

    def _post_failed(self, tx: Tx, credit: int, rc: int) -> bool:
        self.credits += credit
        self.outstanding += tx.credits_sent
        self.nsends_posted -= 1
        if tx.type is M.MsgType.NOOP:
            self.noops_posted -= 1
        tx.status, tx.waiting = rc, False
        tx.sending -= 1
        done = tx.sending == 0
        if done and tx in self.active:
            self.active.remove(tx)
        self.close(rc)
        if done:
            self.tx_done(tx)
        return False

    # --- completions --------------------------------------------------------------------------
    def complete(self, wc: WorkCompletion) -> None:
        """``kiblnd_complete``: an RDMA's completion only matters as its failure (logged);
        the SEND that follows it fails too."""
        if wc.wr_id not in self._wr:
            return
        tx = self._wr.pop(wc.wr_id)
        if wc.opcode is Opcode.RECV:
            self._rx_complete(wc)
        elif tx is not None:
            self._tx_complete(tx, wc.status)

    def _tx_complete(self, tx: Tx, status: WcStatus) -> None:
        failed = status is not WcStatus.SUCCESS
        if failed:
            self.close(-EIO)
        tx.sending -= 1
        self.nsends_posted -= 1
        if tx.type is M.MsgType.NOOP:
            self.noops_posted -= 1
        if failed:
            tx.hstatus, tx.waiting, tx.status = HStatus.REMOTE_DROPPED, False, -EIO
        if tx.sending == 0 and not tx.waiting and not tx.queued:
            if tx in self.active:
                self.active.remove(tx)
            self.tx_done(tx)
        self.check_sends()

    def tx_done(self, tx: Tx) -> None:
        """``kiblnd_tx_done``: finalise its LNet message(s)."""
        if tx.sink is not None:
            self.cm.qp.pd.dereg_mr(tx.sink)
        if tx.lnet_tx is not None:
            self.out.append(TxDone(tx.lnet_tx, tx.status, tx.hstatus))
        if tx.deliver is not None and tx.status >= 0 and tx.sink is not None:
            n = tx.deliver.payload_length
            # the sink's memory itself, read-only (the pool reuses it once LNet drops it)
            self.out.append(Deliver(self.ni, self.peer, tx.deliver,
                                    memoryview(tx.sink.buf)[:n].toreadonly()))

    def _rx_complete(self, wc: WorkCompletion) -> None:
        """``kiblnd_rx_complete``."""
        if self.state > ConnState.ESTABLISHED:
            return
        if wc.status is not WcStatus.SUCCESS:
            self.close(-EIO)
            return
        try:
            m = M.kiblnd_unpack_msg(wc.data)
        except Exception:
            self.close(-EPROTO)
            return
        if (m.srcnid != self.peer.nid4 or m.dstnid != self.ni.nid4
                or m.srcstamp != self.incarnation or m.dststamp != self.my_stamp):
            self.close(-ESTALE)
            return
        connrx.handle_rx(self, m)

    # --- closing ------------------------------------------------------------------------------
    def close(self, error: int) -> None:
        """``kiblnd_close_conn`` + ``kiblnd_disconnect_conn``: abort what is queued and what
        waits, then the DREQ and the QP's flushed completions (the drain), then the peer's
        bookkeeping and ``kiblnd_peer_notify`` (``on_close``)."""
        if self.state >= ConnState.CLOSING:
            return
        if error and not self.comms_error:
            self.comms_error = error
        established = self.state == ConnState.ESTABLISHED
        self.state = ConnState.DISCONNECTED
        self.abort_txs()
        if established:
            with contextlib.suppress(VerbsError):
                self.run(self.cm.disconnect(self.now))
        self.pending_gets.clear()
        self._on_close(self, error)

    def abort_txs(self) -> None:
        """``kiblnd_abort_txs`` over every queue."""
        timedout = self.comms_error == -ETIMEDOUT
        for q in (self.tx_noops, self.tx_queue, self.tx_rsrvd, self.tx_nocred):
            while q:
                tx = q.popleft()
                tx.hstatus = HStatus.LOCAL_TIMEOUT if timedout else HStatus.LOCAL_ERROR
                tx.status, tx.waiting, tx.queued = -ECONNABORTED, False, False
                self.tx_done(tx)
        for tx in list(self.active):
            if timedout:
                if tx.waiting and not tx.sending:
                    tx.hstatus = HStatus.REMOTE_TIMEOUT
                elif tx.sending:
                    tx.hstatus = HStatus.NETWORK_TIMEOUT
            tx.status, tx.waiting = -ECONNABORTED, False
            if tx.sending == 0:
                self.active.remove(tx)
                self.tx_done(tx)

    def timed_out(self, now: float) -> bool:
        """``kiblnd_conn_timed_out_locked``: any tx past its deadline."""
        return any(tx.deadline <= now for q in (self.tx_queue, self.tx_noops, self.tx_rsrvd,
                                                  self.tx_nocred, self.active) for tx in q)


__all__ = ["Conn"]
