"""o2iblnd, sans-I/O: one node's NIs on ``o2ib`` nets, their peers and connections.

Theory of operation (STYLE rules 1, 2; behaviour of lnet/klnds/o2iblnd/o2iblnd_cb.c). Inputs:
``send`` (``kiblnd_send``), the transport's stream events (``connected``, ``connect_failed``,
``accept``, ``receive``) and the clock (``handle_timer``); every call returns the outputs of
``kibtx`` (streams to open/write/close, messages to deliver, txs finalised, ``lnet_notify``).

* **Connecting** (``kiblnd_launch_tx`` → ``kiblnd_connect_peer``): a stream to the peer's
  address (port 987); once open, address and route resolve and ``kiblnd_active_connect``
  sends a CONNREQ (version, queue depth = ``peer_credits``, max fragments, max message size)
  in the CM REQ. The passive side (``kiblnd_passive_connect``) rejects with a ``kib_rej``
  reason (FATAL, EARLY, CONN_STALE, MSG_QUEUE_SIZE, RDMA_FRAGS, CONN_RACE: the lower NID
  hash yields while it connects itself, at most 20 times) or accepts with a CONNACK. The
  active side's ``kiblnd_rejected``/``kiblnd_check_reconnect`` reconnect at once on a race,
  a stale incarnation, a version (v1 FATAL → CONN_UNCOMPAT) or a smaller queue depth or
  fragment count offered; other rejects fail the peer's txs (``kiblnd_peer_connect_failed``:
  -ECONNREFUSED → REMOTE_DROPPED; -EHOSTUNREACH/-ETIMEDOUT → NETWORK_TIMEOUT; else
  LOCAL_DROPPED) and tell LNet the peer NI is dead.
* **Messages**: payloads up to ``IBLND_MSG_SIZE`` less the headers go IMMEDIATE; a larger PUT
  or REPLY is PUT_REQ → PUT_ACK (the sink's key) → RDMA WRITE + PUT_DONE (or PUT_NAK); a GET
  not routed whose reply sink is too big for IMMEDIATE is GET_REQ (the sink's key) → the
  peer's RDMA WRITE + GET_DONE, and the REPLY is made here (``lnet_create_reply_msg``).
  Credits and queues are ``conn.py``'s.
* **Timeouts** (``kiblnd_check_conns`` in connd.py, once a second): a tx waiting for a
  connection past ``timeout`` fails -ETIMEDOUT / NETWORK_TIMEOUT; a connection holding a tx
  past its deadline closes with -ETIMEDOUT; a CM REQ unanswered for max(5 s,
  ``timeout``/4) fails -ENETDOWN (``kiblnd_abort_connreq``; LOCAL_DROPPED). A resolve
  unanswered for 5 s or whose port went down is ADDR_ERROR:
  ``kiblnd_peer_connect_failed(peer_ni, 1, -EHOSTUNREACH)``.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Final

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_HDR_SIZE, LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from nodes.o2ib import connd, passive
from nodes.o2ib import msg as M
from nodes.o2ib.cm import CmId
from nodes.o2ib.conn import ECONNABORTED, Conn
from nodes.o2ib.kibtx import (
    ACK_TIMEOUT,
    Close,
    Connect,
    ConnState,
    Notify,
    O2ibTunables,
    Output,
    Peer,
    Tx,
    TxDone,
)
from nodes.o2ib.pd import ProtectionDomain
from nodes.o2ib.verbs import QueuePair

_log = logging.getLogger("lnet.o2iblnd")
EHOSTUNREACH, ENETDOWN = 113, 100
#: the largest payload an IMMEDIATE carries: offsetof(kib_msg, ibim_payload[n]) <= MSG_SIZE
IMMEDIATE_MAX: Final = M.IBLND_MSG_SIZE - M.KIB_MSG_HEAD - LNET_HDR_SIZE
RDMA_RESOLVE_TIMEOUT: Final = 5.0  # o2iblnd.h: rdma_resolve_addr's wait before ADDR_ERROR


@dataclass(slots=True)
class _Net:
    tun: O2ibTunables
    stamp: int


class O2ibLND:
    """One node's o2iblnd. ``incarnation``: the nets' stamp (``ibn_incarnation``)."""

    def __init__(self, *, incarnation: int, version: int = M.IBLND_MSG_VERSION) -> None:
        self.incarnation, self.version = incarnation, version
        self.nets: dict[NID, _Net] = {}
        self.peers: dict[tuple[NID, NID], Peer] = {}
        self.streams: dict[int, Conn] = {}
        self.resolving: dict[int, float] = {}  # INIT stream -> when ADDR_ERROR fires
        self.pd = ProtectionDomain()
        self.out: list[Output] = []
        self.now = 0.0
        self._next_stream = 1
        self._cookie = 0
        self._tick: float | None = None
        self._starts = 0  # NIs started so far (each its own incarnation)
        self.forced_reject: M.RejectReason | None = None  # the cm-reject fault kind
        self.forced_reject_ni: NID | None = None  # ... on CONNREQs to this NI (None: any)
        self.listening: dict[int, CmId] = {}
        self.rejects_sent: dict[int, int] = {}
        self.rdma_faults = self.qp_errors = 0
        self.msg_counts: dict[str, int] = {}  # o2iblnd messages posted, by type
        self.errors: list[str] = []

    # --- NIs -----------------------------------------------------------------------------------
    def startup_ni(self, ni: NID, tun: O2ibTunables | None = None) -> None:
        """``kiblnd_startup``: each start of an NI is a new ``ibn_incarnation`` (the kernel's
        is the time in microseconds; here the node's stamp, then one more per start), so a
        peer tells an NI deleted and added again from the one it knew (CONN_STALE)."""
        self.nets[ni] = _Net(tun or O2ibTunables.from_params({}),
                             (self.incarnation + self._starts) & (1 << 64) - 1)
        self._starts += 1

    def set_tunables(self, ni: NID, tun: O2ibTunables) -> None:
        """The NI's tunables (``lnetctl net add``, ``lnd tunables:``): connections made from
        now on use them (a connection keeps the queue depth it negotiated)."""
        net = self.nets.get(ni)
        if net is not None:
            net.tun = tun

    def shutdown_ni(self, ni: NID, now: float) -> list[Output]:
        """``kiblnd_shutdown``: every connection of ``ni`` closed, queued txs aborted."""
        self.now = now
        for key, p in list(self.peers.items()):
            if p.ni == ni:
                for c in list(p.conns):
                    self._close(c, -ECONNABORTED)
                self._txlist_done(p.tx_queue, -ENETDOWN, HStatus.LOCAL_ERROR)
                del self.peers[key]
        self.nets.pop(ni, None)
        return self.drain()

    # --- sending -------------------------------------------------------------------------------
    def _new_cookie(self) -> int:
        self._cookie += 1
        return self._cookie

    def send(self, tx_id: int, ni: NID, peer: NID, hdr: LNetHdr,
             payload: bytes | memoryview, now: float) -> list[Output]:
        """``kiblnd_send``: choose IMMEDIATE, PUT_REQ or GET_REQ, launch to ``peer``."""
        self.now = now
        net = self.nets.get(ni)
        if net is None:
            return [TxDone(tx_id, -ENETDOWN, HStatus.LOCAL_ERROR)]
        routed = hdr.dest_nid != peer or hdr.src_nid != ni
        p = self.peers.get((ni, peer))
        tx: Tx
        if hdr.type is MsgType.REPLY and p is not None and self._reply(p, tx_id, hdr, payload):
            return self.drain()
        if hdr.type is MsgType.GET and not routed and hdr.sink_length > IMMEDIATE_MAX:
            sink = self.pd.reg_mr(hdr.sink_length, remote_read=False)
            cookie = self._new_cookie()
            rd = M.RdmaDesc(key=sink.rkey, frags=((hdr.sink_length, 0),))
            reply = LNetHdr(hdr.src_nid, hdr.dest_nid, hdr.src_pid, hdr.dest_pid,
                            MsgType.REPLY, 0, hdr.wmd)
            tx = Tx(M.MsgType.GET_REQ, M.GetReq(hdr=hdr, cookie=cookie, rd=rd),
                    lnet_tx=tx_id, cookie=cookie, waiting=True, sink=sink, deliver=reply)
        elif hdr.type in (MsgType.PUT, MsgType.REPLY) and len(payload) > IMMEDIATE_MAX:
            cookie = self._new_cookie()
            tx = Tx(M.MsgType.PUT_REQ, M.PutReq(hdr=hdr, cookie=cookie), lnet_tx=tx_id,
                    cookie=cookie, waiting=True, payload=payload)  # the MD's, mapped
        else:
            tx = Tx(M.MsgType.IMMEDIATE, M.Immediate(hdr=hdr, payload=bytes(payload)),
                    lnet_tx=tx_id)
        self._launch(ni, peer, tx)
        return self.drain()

    def _reply(self, p: Peer, tx_id: int, hdr: LNetHdr, payload: bytes | memoryview) -> bool:
        """``kiblnd_reply``: the REPLY to a GET_REQ is an RDMA WRITE + GET_DONE."""
        key = (hdr.wmd.interface_cookie, hdr.wmd.object_cookie)
        for c in p.conns:
            got = c.pending_gets.pop(key, None)
            if got is None:
                continue
            cookie, rd, _ = got
            if len(payload) > sum(n for n, _ in rd.frags):
                c.queue(Tx(M.MsgType.GET_DONE, M.Completion(cookie=cookie, status=-71),
                           lnet_tx=tx_id, status=-5, hstatus=HStatus.LOCAL_ERROR))
            else:
                tx = Tx(M.MsgType.GET_DONE, M.Completion(cookie=cookie, status=len(payload)),
                        rdma=rd, payload=payload)
                if payload:
                    tx.lnet_tx = tx_id
                else:  # no RDMA: LNet's REPLY completes now
                    self.out.append(TxDone(tx_id, 0, HStatus.OK))
                c.queue(tx)
            c.now = self.now
            c.check_sends()
            return True
        return False

    def unclaimed_gets(self, now: float, older_than: float = 0.0) -> list[Output]:
        """``kiblnd_recv`` with no LNet message: a GET_REQ LNet did not answer within
        ``older_than`` seconds gets GET_DONE -ENODATA (the engine sends a REPLY through its
        credits, later than lnet_parse_get's rdma_get: docs/differences.md)."""
        self.now = now
        connd.expire_gets(self, now, older_than)
        return self.drain()

    def _launch(self, ni: NID, nid: NID, tx: Tx) -> None:
        """``kiblnd_launch_tx``."""
        p = self.peers.get((ni, nid))
        if p is not None and p.conns:
            c = connd.get_conn(p)
            c.now = self.now
            c.queue(tx)
            c.check_sends()
            return
        tun = self.nets[ni].tun
        tx.deadline = self.now + tun.timeout
        if p is None:
            p = self.peers[(ni, nid)] = Peer(ni, nid)
        p.tx_queue.append(tx)
        if not (p.connecting or p.accepting or p.reconnecting):
            for _ in range(tun.conns_per_peer):  # a brand new peer: all its connections
                self._connect_peer(p)

    # --- connection setup ----------------------------------------------------------------------
    def _connect_peer(self, p: Peer) -> None:
        """``kiblnd_connect_peer``: a new cm_id, a stream to the peer's port 987."""
        tun = self.nets[p.ni].tun
        p.connecting += 1
        stream = self._next_stream
        self._next_stream += 1
        c = self._conn(stream, p, active=True, version=p.version or self.version,
                       depth=p.queue_depth or tun.peer_credits, frags=p.max_frags)
        c.state = ConnState.INIT
        self.resolving[stream] = self.now + RDMA_RESOLVE_TIMEOUT
        self.out.append(Connect(stream, p.ni, p.nid))

    def _conn(self, stream: int, p: Peer, *, active: bool, version: int, depth: int,
              frags: int, cm: CmId | None = None) -> Conn:
        tun = self.nets[p.ni].tun
        if cm is None:
            qp = QueuePair(self.pd)
            cm = CmId(qp, active=active, cm_timeout=tun.timeout)
        qp = cm.qp  # sized and timed as kiblnd_create_conn asks (retry_count, rnr_retry_count)
        qp.max_send_wr, qp.max_recv_wr = 4 * depth + 8, 2 * depth + 2 + 2
        qp.ack_timeout = ACK_TIMEOUT
        qp.retry_count, qp.rnr_retry_count = tun.retry_count, tun.rnr_retry_count
        cm.cm_timeout = max(5.0, tun.timeout / 4)  # kiblnd_connreq_timeout_ms
        c = Conn(stream=stream, ni=p.ni, peer=p.nid, cm=cm, tun=tun, version=version,
                 queue_depth=depth, max_frags=frags, incarnation=p.incarnation, out=self.out,
                 on_close=self._on_close, cookies=self._new_cookie, counts=self.msg_counts)
        c.my_stamp, c.now, c.last_send = self.nets[p.ni].stamp, self.now, self.now
        self.streams[stream] = c
        return c

    def connected(self, stream: int, now: float) -> list[Output]:
        """The stream is open: ADDR_RESOLVED, ROUTE_RESOLVED, then ``kiblnd_active_connect``."""
        self.now = now
        self.resolving.pop(stream, None)
        c = self.streams.get(stream)
        if c is None or c.state != ConnState.INIT:
            return self.drain()
        c.run(c.cm.resolve_addr())
        c.run(c.cm.resolve_route())
        c.events.clear()
        c.state = ConnState.ACTIVE_CONNECT
        c.post_receives()
        req = M.KibMsg(type=M.MsgType.CONNREQ, version=c.version, body=M.ConnParams(
            queue_depth=c.queue_depth, max_frags=c.max_frags, max_msg_size=M.IBLND_MSG_SIZE),
            srcnid=c.ni.nid4, srcstamp=c.my_stamp, dstnid=c.peer.nid4,
            dststamp=c.incarnation)
        c.run(c.cm.connect(M.kiblnd_pack_msg(req), now))
        return self.drain()

    def connect_failed(self, stream: int, rc: int, now: float) -> list[Output]:
        """The stream did not open: no listener is a CM reject for an invalid service id
        (-EHOSTUNREACH); anything else an address error (-EHOSTUNREACH)."""
        self.now = now
        connd.resolve_failed(self, stream)
        return self.drain()

    def accept(self, stream: int, now: float) -> list[Output]:
        """A stream accepted on port 987: a passive cm_id awaiting the REQ."""
        self.now = now
        self.listening[stream] = CmId(QueuePair(self.pd), active=False)
        return self.drain()

    def receive(self, stream: int, data: bytes | memoryview, now: float) -> list[Output]:
        """Bytes from the stream: CM messages and RC packets."""
        return self._receive(stream, data, 0, now)

    def rx_buffer(self, stream: int) -> memoryview | None:
        """Where ``stream``'s next bytes go, for a socket's ``recv_into`` (None: an unknown
        or failed stream, whose bytes go to ``receive``)."""
        c = self.streams.get(stream)
        cm = c.cm if c is not None else self.listening.get(stream)
        return cm.rx_buffer() if cm is not None else None

    def received(self, stream: int, n: int, now: float) -> list[Output]:
        """``n`` bytes were written into ``rx_buffer(stream)``: as ``receive``."""
        return self._receive(stream, None, n, now)

    def _receive(self, stream: int, data: bytes | memoryview | None, n: int,
                 now: float) -> list[Output]:
        self.now = now
        c = self.streams.get(stream)
        if c is None:
            if stream in self.listening:
                passive.listen_receive(self, stream, data, n)
            return self.drain()
        c.now, was = now, c.state
        try:
            acts = (c.cm.receive_data(data, now) if data is not None
                    else c.cm.receive_into(n, now))
        except WireProtocolError as e:
            self._protocol_error(c, str(e), was)
            return self.drain()
        c.run(acts)
        if c.cm.error is not None:
            self._protocol_error(c, str(c.cm.error), was)
        connd.events(self, c)
        return self.drain()

    def _protocol_error(self, c: Conn, line: str, was: ConnState) -> None:
        self.errors.append(f"o2iblnd: stream from {c.peer}: {line}")
        _log.error("%s", self.errors[-1])
        if c.state == ConnState.ESTABLISHED:
            self._close(c, -71)
        elif was in (ConnState.ACTIVE_CONNECT, ConnState.PASSIVE_WAIT) and (p := self.peers.get(
                (c.ni, c.peer))) is not None:  # kiblnd_connreq_done(-EPROTO): the connect ends
            connd.peer_connect_failed(self, p, was == ConnState.ACTIVE_CONNECT, -71)
        self.streams.pop(c.stream, None)
        self.out.append(Close(c.stream))

    def _peer_notify(self, p: Peer) -> None:
        """``kiblnd_peer_notify``: LNet hears only of a peer NI gone quiet with an error."""
        if p.error and not p.conns and not (p.connecting or p.accepting or p.reconnecting):
            p.error = 0
            self.out.append(Notify(p.ni, p.nid, False))

    def _txlist_done(self, q: deque[Tx], rc: int, hs: HStatus) -> None:
        while q:
            tx = q.popleft()
            tx.status, tx.waiting = rc, False
            if hs is not HStatus.OK:
                tx.hstatus = hs
            if tx.lnet_tx is not None:
                self.out.append(TxDone(tx.lnet_tx, rc, tx.hstatus))
            if tx.sink is not None:
                self.pd.dereg_mr(tx.sink)

    # --- closing ---------------------------------------------------------------------------------
    def _close(self, c: Conn, error: int) -> None:
        c.now = self.now
        c.close(error)

    def _on_close(self, c: Conn, error: int) -> None:
        """``kiblnd_close_conn_locked`` at the peer: off its list; its error kept to notify."""
        p = self.peers.get((c.ni, c.peer))
        if error:
            _log.warning("o2iblnd: closing conn to %s: error %d", c.peer, error)
        if p is not None and c in p.conns:
            if p.next_conn is c:  # kiblnd_close_conn_locked
                p.next_conn = None
            p.conns.remove(c)
            if not p.conns and error:
                p.error = error
            self._peer_notify(p)
        self.streams.pop(c.stream, None)
        self.out.append(Close(c.stream))

    # --- clock ------------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        ds = [d for c in self.streams.values() if (d := c.cm.next_deadline()) is not None]
        ds += self.resolving.values()
        if self.peers or self.streams:
            if self._tick is None:
                self._tick = self.now + 1.0
            ds.append(self._tick)
        else:
            self._tick = None
        return min(ds) if ds else None

    def handle_timer(self, now: float) -> list[Output]:
        """Verbs/CM timers due, then ``kiblnd_check_conns`` once a second."""
        self.now = now
        for stream in [s for s, d in self.resolving.items() if d <= now]:
            connd.resolve_failed(self, stream)
        for c in list(self.streams.values()):
            d = c.cm.next_deadline()
            if d is not None and d <= now:
                c.now = now
                c.run(c.cm.handle_timer(now))
                connd.events(self, c)
        if self._tick is not None and now >= self._tick:
            self._tick = now + 1.0
            connd.check_conns(self, now)
        return self.drain()

    def drain(self) -> list[Output]:
        out = list(self.out)
        self.out.clear()
        return out
