"""o2iblnd's receive side of one connection: ``kiblnd_handle_rx`` and ``kiblnd_recv``.

Theory of operation: a received message first returns the credits it carries (more than the
queue depth is a protocol error: the connection closes -EPROTO), then is handled by type;
what the receive buffer's repost gives back follows o2iblnd: IMMEDIATE, GET_REQ, PUT_DONE
and a v1 keepalive NOOP return a credit to the peer; PUT_ACK, PUT_NAK and GET_DONE one to
ourselves (the reserved credit their request took); a PUT_REQ's buffer is reposted without
credit (held for the PUT_DONE). A PUT_REQ is answered with a PUT_ACK naming a sink
registered for the whole payload; the payload reaches LNet once PUT_DONE says the RDMA
landed. A completion no tx waits for closes the connection (-EPROTO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.hdr import LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.o2ib import msg as M
from nodes.o2ib.kibtx import Deliver, PostRx, Tx

if TYPE_CHECKING:
    from nodes.o2ib.conn import Conn

EPROTO = 71


def handle_rx(c: Conn, m: M.KibMsg) -> None:
    """``kiblnd_handle_rx`` (with ``kiblnd_recv``'s repost for the LNet messages)."""
    if m.credits:
        if c.credits + m.credits > c.queue_depth:
            c.close(-EPROTO)
            return
        c.credits += m.credits
        if m.type is M.MsgType.NOOP and c.version == M.IBLND_MSG_VERSION_1:
            c.outstanding += 1
        c.check_sends()
    post = PostRx.PEER_CREDIT
    t, b = m.type, m.body
    if t is M.MsgType.NOOP:
        post = (PostRx.NO_CREDIT if c.version != M.IBLND_MSG_VERSION_1 or m.credits
                else PostRx.PEER_CREDIT)
    elif t is M.MsgType.IMMEDIATE and isinstance(b, M.Immediate):
        c.out.append(Deliver(c.ni, c.peer, b.hdr, b.payload))
    elif t is M.MsgType.PUT_REQ and isinstance(b, M.PutReq):
        post = PostRx.NO_CREDIT  # the reposted buffer is reserved for PUT_DONE
        put_ack(c, b)
    elif t is M.MsgType.GET_REQ and isinstance(b, M.GetReq):
        wmd = b.hdr.wmd
        c.pending_gets[(wmd.interface_cookie, wmd.object_cookie)] = (b.cookie, b.rd, c.now)
        c.out.append(Deliver(c.ni, c.peer, b.hdr, b""))
    elif t is M.MsgType.PUT_ACK and isinstance(b, M.PutAck):
        post = PostRx.RSRVD_CREDIT
        tx = find_waiting(c, M.MsgType.PUT_REQ, b.src_cookie)
        if tx is None:
            c.close(-EPROTO)
        else:  # the PUT_REQ becomes the RDMA + PUT_DONE
            c.active.remove(tx)
            tx.type, tx.rdma, tx.waiting = M.MsgType.PUT_DONE, b.rd, False
            tx.body = M.Completion(cookie=b.dst_cookie, status=len(tx.payload))
            c.queue(tx)
    elif isinstance(b, M.Completion):
        post = PostRx.PEER_CREDIT if t is M.MsgType.PUT_DONE else PostRx.RSRVD_CREDIT
        want = {M.MsgType.PUT_NAK: M.MsgType.PUT_REQ, M.MsgType.PUT_DONE:
                M.MsgType.PUT_ACK, M.MsgType.GET_DONE: M.MsgType.GET_REQ}[t]
        handle_completion(c, want, b.status, b.cookie)
    else:
        c.close(-EPROTO)
        post = PostRx.NO_CREDIT
    c.post_rx(post)
    c.check_sends()


def find_waiting(c: Conn, txtype: M.MsgType, cookie: int) -> Tx | None:
    """``kiblnd_find_waiting_tx_locked``."""
    for tx in c.active:
        if tx.cookie == cookie and tx.waiting and tx.type is txtype:
            return tx
    return None


def handle_completion(c: Conn, txtype: M.MsgType, status: int, cookie: int) -> None:
    """``kiblnd_handle_completion``: a peer's PUT_NAK/PUT_DONE/GET_DONE."""
    tx = find_waiting(c, txtype, cookie)
    if tx is None:
        c.close(-EPROTO)
        return
    if tx.status == 0:
        if status < 0:
            tx.status, tx.hstatus = status, HStatus.REMOTE_ERROR
        elif tx.deliver is not None and txtype is M.MsgType.GET_REQ:
            tx.deliver = _with_length(tx.deliver, status)
    tx.waiting = False
    if not tx.queued and tx.sending == 0:
        c.active.remove(tx)
        c.tx_done(tx)


def put_ack(c: Conn, b: M.PutReq) -> None:
    """``kiblnd_recv`` of a PUT_REQ: register a sink for the whole payload, PUT_ACK it."""
    n = b.hdr.payload_length
    sink = c.cm.qp.pd.reg_mr(max(n, 1), remote_read=False)
    cookie = c.new_cookie()
    rd = M.RdmaDesc(key=sink.rkey, frags=((n, 0),))
    tx = Tx(M.MsgType.PUT_ACK, M.PutAck(src_cookie=b.cookie, dst_cookie=cookie, rd=rd),
            cookie=cookie, waiting=True, sink=sink, deliver=b.hdr)
    c.queue(tx)


def _with_length(hdr: LNetHdr, n: int) -> LNetHdr:
    """``lnet_set_reply_msg_len``: the REPLY carries what GET_DONE says was written."""
    return LNetHdr(hdr.dest_nid, hdr.src_nid, hdr.dest_pid, hdr.src_pid, hdr.type, n,
                     hdr.wmd)
