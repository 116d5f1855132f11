"""o2iblnd's connection daemon work: rdma_cm events, connect replies, rejects, reconnects.

Theory of operation: ``events`` is ``kiblnd_cm_callback`` for one connection's cm_id;
``check_connreply`` holds a CONNACK to what was asked (same version, no deeper queue, no
more fragments, a message size that fits, our NID and stamp); ``rejected`` and
``check_reconnect`` are ``kiblnd_rejected``/``kiblnd_check_reconnect`` (reconnect at once,
with the reject's version, queue depth or fragment count, while txs wait and no accept is in
progress); ``connreq_done`` is ``kiblnd_connreq_done`` (the peer's waiting txs go on the new
connection; a new incarnation closes the stale ones) and ``peer_connect_failed`` fails the
waiting txs with the hstatus o2iblnd gives the error; ``check_conns`` is
``kiblnd_check_conns`` (timeouts, NOOPs owed; ``expire_gets``: GET_REQs LNet left
unanswered get GET_DONE -ENODATA) and ``get_conn`` ``kiblnd_get_conn_locked``;
``resolve_failed`` is the cm callback's ADDR_ERROR.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hstatus import HStatus
from nodes.o2ib import msg as M
from nodes.o2ib.cm import IB_CM_REJ_CONSUMER_DEFINED, CmEventType
from nodes.o2ib.conn import ETIMEDOUT, Conn
from nodes.o2ib.kibtx import Close, ConnState, Peer, Tx
from nodes.o2ib.verbs import QpState

if TYPE_CHECKING:
    from nodes.o2ib.o2iblnd import O2ibLND

_log = logging.getLogger("lnet.o2iblnd")
ECONNREFUSED, EHOSTUNREACH, ENETDOWN, ENOTCONN, ECONNRESET = 111, 113, 100, 107, 104
IB_CM_REJ_INVALID_SERVICE_ID = 8
IB_CM_REJ_STALE_CONN = 10


def events(lnd: O2ibLND, c: Conn) -> None:
    """``kiblnd_cm_callback`` for the events ``c``'s cm_id raised."""
    while c.events:
        ev = c.events.pop(0)
        t = ev.event
        if t is CmEventType.ESTABLISHED:
            if c.state == ConnState.PASSIVE_WAIT:
                connreq_done(lnd, c, 0)
            elif c.state == ConnState.ACTIVE_CONNECT:
                check_connreply(lnd, c, ev.private_data)
        elif t is CmEventType.REJECTED:
            if c.state == ConnState.ACTIVE_CONNECT:
                rejected(lnd, c, ev.status, ev.private_data)
            elif c.state == ConnState.PASSIVE_WAIT:
                connreq_done(lnd, c, -ECONNRESET)
        elif t in (CmEventType.UNREACHABLE, CmEventType.CONNECT_ERROR):
            if c.state in (ConnState.ACTIVE_CONNECT, ConnState.PASSIVE_WAIT):
                connreq_done(lnd, c, -ENETDOWN if t is CmEventType.UNREACHABLE
                                   else -ENOTCONN)
        elif t is CmEventType.DISCONNECTED:
            if c.state < ConnState.ESTABLISHED:
                connreq_done(lnd, c, -ECONNRESET)
            else:
                lnd._close(c, 0)


def check_connreply(lnd: O2ibLND, c: Conn, priv: bytes) -> None:
    """``kiblnd_check_connreply``."""
    try:
        m = M.kiblnd_unpack_msg(priv)
    except WireProtocolError as e:
        lnd.errors.append(f"o2iblnd: CONNACK from {c.peer}: {e}")
        connreq_done(lnd, c, -71)
        return
    cp = m.body
    bad = (m.type is not M.MsgType.CONNACK or not isinstance(cp, M.ConnParams)
           or m.version != c.version or cp.queue_depth > c.queue_depth
           or cp.max_frags > c.max_frags or cp.max_msg_size > M.IBLND_MSG_SIZE)
    if bad or not isinstance(cp, M.ConnParams):
        connreq_done(lnd, c, -71)
        return
    if m.dstnid != c.ni.nid4 or m.dststamp != c.my_stamp:
        connreq_done(lnd, c, -116)
        return
    c.credits = c.reserved = c.queue_depth = cp.queue_depth
    c.max_frags, c.incarnation = cp.max_frags, m.srcstamp
    connreq_done(lnd, c, 0)


def rejected(lnd: O2ibLND, c: Conn, reason: int, priv: bytes) -> None:
    """``kiblnd_rejected``."""
    status = -ECONNREFUSED
    p = lnd.peers.get((c.ni, c.peer))
    if reason == IB_CM_REJ_STALE_CONN:
        check_reconnect(c, p, M.IBLND_MSG_VERSION, 0, M.RejectReason.CONN_STALE, None)
    elif reason == IB_CM_REJ_INVALID_SERVICE_ID:
        status = -EHOSTUNREACH
    elif reason == IB_CM_REJ_CONSUMER_DEFINED:
        try:
            rej = M.unpack_rej(priv)
        except WireProtocolError as e:
            lnd.errors.append(f"o2iblnd: reject from {c.peer}: {e}")
            rej = None
        if rej is not None:
            why = rej.why
            if why is M.RejectReason.FATAL and rej.version == M.IBLND_MSG_VERSION_1 \
                    and c.version != M.IBLND_MSG_VERSION_1:
                why = M.RejectReason.CONN_UNCOMPAT
            _log.warning("o2iblnd: %s rejected by %s: reason %d", c.ni, c.peer, int(why))
            if why in (M.RejectReason.CONN_RACE, M.RejectReason.CONN_STALE,
                       M.RejectReason.CONN_UNCOMPAT, M.RejectReason.MSG_QUEUE_SIZE,
                       M.RejectReason.RDMA_FRAGS):
                inc = rej.incarnation if rej.cp is not None else 0
                check_reconnect(c, p, rej.version, inc, why, rej.cp)
    connreq_done(lnd, c, status)


def check_reconnect(c: Conn, p: Peer | None, version: int, incarnation: int,
                     why: M.RejectReason, cp: M.ConnParams | None) -> None:
    """``kiblnd_check_reconnect``: reconnect at once when the reject says how."""
    if p is None or not ((p.tx_queue or p.version != version) and p.connecting
                         and p.accepting == 0):
        return
    if why is M.RejectReason.RDMA_FRAGS:
        if cp is None or c.max_frags <= cp.max_frags:
            return
        p.max_frags = cp.max_frags
    elif why is M.RejectReason.MSG_QUEUE_SIZE:
        if cp is None or c.queue_depth <= cp.queue_depth:
            return
        p.queue_depth = cp.queue_depth
    c.reconnect = True
    p.reconnecting += 1
    p.version = version
    if incarnation and incarnation != M.LNET_NID_ANY:
        p.incarnation = incarnation


def connreq_done(lnd: O2ibLND, c: Conn, status: int) -> None:
    """``kiblnd_connreq_done``."""
    p = lnd.peers.get((c.ni, c.peer))
    active = c.state == ConnState.ACTIVE_CONNECT
    if p is None:
        c.state = ConnState.DISCONNECTED
        return
    if status != 0:
        c.state = ConnState.DISCONNECTED
        if c.cm.qp.state is not QpState.RESET:
            c.run(c.cm.qp_error())
        lnd.streams.pop(c.stream, None)
        lnd.out.append(Close(c.stream))
        peer_connect_failed(lnd, p, active, status)
        c.abort_txs()
        if c.reconnect:  # kiblnd_reconnect_peer, from connd once the conn is gone
            p.reconnecting -= 1
            lnd._connect_peer(p)
        return
    c.state = ConnState.ESTABLISHED
    c.last_send = lnd.now
    p.conns.append(c)
    if active:
        p.connecting -= 1
    else:
        p.accepting -= 1
    if p.version == 0:
        p.version, p.incarnation = c.version, c.incarnation
    if p.version != c.version or p.incarnation != c.incarnation:
        for old in [o for o in p.conns if o is not c and (
                o.version != c.version or o.incarnation != c.incarnation)]:
            lnd._close(old, -116)  # kiblnd_close_stale_conns_locked
        p.version, p.incarnation = c.version, c.incarnation
    p.races = 0
    while p.tx_queue:
        c.queue(p.tx_queue.popleft())
    c.check_sends()


def peer_connect_failed(lnd: O2ibLND, p: Peer, active: bool, error: int) -> None:
    """``kiblnd_peer_connect_failed``."""
    if active:
        p.connecting = max(0, p.connecting - 1)
    else:
        p.accepting = max(0, p.accepting - 1)
    if p.connecting or p.accepting or p.reconnecting:
        return
    hs = (HStatus.NETWORK_TIMEOUT if error in (-EHOSTUNREACH, -ETIMEDOUT) else
          HStatus.REMOTE_DROPPED if error == -ECONNREFUSED else HStatus.LOCAL_DROPPED)
    if not p.conns:
        p.error = error
        lnd._txlist_done(p.tx_queue, error, hs)
    lnd._peer_notify(p)


def check_conns(lnd: O2ibLND, now: float) -> None:
    """``kiblnd_check_conns`` (connd, once a second): txs waiting for a connection past their
    deadline fail -ETIMEDOUT / NETWORK_TIMEOUT; a connection holding a tx past its deadline
    closes -ETIMEDOUT; a NOOP owed is sent; a peer left with nothing is forgotten."""
    lnd.pd.pool.trim()  # an idle LND gives its bulk buffers back
    expire_gets(lnd, now, min(n.tun.timeout for n in lnd.nets.values()) / 2
                     if lnd.nets else 0.0)
    for p in list(lnd.peers.values()):
        late = [tx for tx in p.tx_queue if tx.deadline <= now]
        if late:
            for tx in late:
                p.tx_queue.remove(tx)
            lnd._txlist_done(deque(late), -ETIMEDOUT, HStatus.NETWORK_TIMEOUT)
        for c in list(p.conns):
            c.now = now
            if c.timed_out(now):
                _log.error("o2iblnd: timed out RDMA with %s", c.peer)
                lnd._close(c, -ETIMEDOUT)
            elif c.need_noop():
                c.check_sends()
        if not p.conns and not p.tx_queue and not (p.connecting or p.accepting
                                                   or p.reconnecting):
            del lnd.peers[(p.ni, p.nid)]


def get_conn(p: Peer) -> Conn:
    """``kiblnd_get_conn_locked``: round robin over the peer's connections (conns_per_peer),
    the one after the connection used last, the first after the last one or none."""
    conns = p.conns
    last = p.next_conn
    i = conns.index(last) + 1 if last is not None and last in conns else 0
    c = conns[i] if i < len(conns) else conns[0]
    p.next_conn = c
    return c


def resolve_failed(lnd: O2ibLND, stream: int) -> None:
    """ADDR_ERROR: ``kiblnd_peer_connect_failed(peer_ni, 1, -EHOSTUNREACH)``."""
    lnd.resolving.pop(stream, None)
    c = lnd.streams.pop(stream, None)
    if c is not None and c.state == ConnState.INIT:
        p = lnd.peers.get((c.ni, c.peer))
        c.state = ConnState.DISCONNECTED
        lnd.out.append(Close(stream))
        if p is not None:
            peer_connect_failed(lnd, p, True, -EHOSTUNREACH)


def expire_gets(lnd: O2ibLND, now: float, older_than: float) -> None:
    """GET_REQs LNet left unanswered ``older_than`` seconds get GET_DONE -ENODATA
    (``unclaimed_gets``; ``check_conns`` at half the timeout)."""
    for c in list(lnd.streams.values()):
        if c.state != ConnState.ESTABLISHED:
            continue
        late = [k for k, (_, _, t) in c.pending_gets.items() if t <= now - older_than]
        for k in late:
            cookie = c.pending_gets.pop(k)[0]
            c.queue(Tx(M.MsgType.GET_DONE, M.Completion(cookie=cookie, status=-61)))
        if late:
            c.now = now
            c.check_sends()
