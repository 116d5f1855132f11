"""o2iblnd's passive side: a stream accepted on port 987 until its CONNREQ is answered.

Theory of operation: ``kiblnd_passive_connect`` (o2iblnd_cb.c) checks a CM REQ's CONNREQ in
this order and rejects with a ``kib_rej`` naming the reason: a frame that does not unpack
(FATAL); a destination NID that is no NI here (EARLY while no net is up, else FATAL); a
destination stamp that is not this net's incarnation (CONN_STALE); not a CONNREQ (FATAL); a
queue depth above ``peer_credits`` (MSG_QUEUE_SIZE in v2, FATAL in v1); more fragments than
``IBLND_MAX_RDMA_FRAGS`` (RDMA_FRAGS); a message size above ``IBLND_MSG_SIZE`` (FATAL); a
known peer whose incarnation or version changed (its connections closed -ESTALE;
CONN_STALE); a connection race this side wins (CONN_RACE, at most 20 in a row). The reject
carries this NI's queue depth and fragment count, so the active side can retry with them.
Otherwise the connection waits for the RTU (``PASSIVE_WAIT``) with the CONNACK sent.
``forced_reject`` is the ``cm-reject`` fault kind: every CONNREQ rejected with that reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.nid import NID
from nodes.o2ib import msg as M
from nodes.o2ib.cm import CmEvent, CmEventType, CmId, SendBytes
from nodes.o2ib.kibtx import MAX_CONN_RACES_BEFORE_ABORT, Close, ConnState, Peer, Write
from nodes.o2ib.verbs import VerbsError

if TYPE_CHECKING:
    from nodes.o2ib.o2iblnd import O2ibLND

_log = logging.getLogger("lnet.o2iblnd")


def nidhash(nid: NID) -> int:
    """The order ``nidhash`` gives two NIDs in a race (lower yields): the wire value's."""
    return nid.nid4


def listen_receive(lnd: O2ibLND, stream: int, data: bytes | memoryview | None,
                   n: int = 0) -> None:
    """Bytes (``data``, or ``n`` written into the cm_id's ``rx_buffer``) on an accepted
    stream: a CONNECT_REQUEST goes to ``passive_connect``."""
    cm = lnd.listening[stream]
    try:
        acts = (cm.receive_data(data, lnd.now) if data is not None
                else cm.receive_into(n, lnd.now))
    except WireProtocolError as e:
        acts = []
        cm.error = e
    if cm.error is not None:
        lnd.errors.append(f"o2iblnd: port 987 stream {stream}: {cm.error}")
        _log.error("%s", lnd.errors[-1])
        del lnd.listening[stream]
        lnd.out.append(Close(stream))
        return
    for a in acts:
        if isinstance(a, CmEvent) and a.event is CmEventType.CONNECT_REQUEST:
            del lnd.listening[stream]
            passive_connect(lnd, stream, cm, a.private_data)
            return

def reject(lnd: O2ibLND, stream: int, cm: CmId, why: M.RejectReason, version: int,
            ni: NID | None) -> None:
    """``kiblnd_reject``: the ``kib_rej`` in a CM REJ; the stream then closes."""
    net = lnd.nets.get(ni) if ni is not None else None
    cp = (M.ConnParams(queue_depth=net.tun.peer_credits if version != M.IBLND_MSG_VERSION_1
                       else 8, max_frags=M.IBLND_MAX_RDMA_FRAGS,
                       max_msg_size=M.IBLND_MSG_SIZE) if net is not None else
          M.ConnParams(queue_depth=0, max_frags=0, max_msg_size=M.IBLND_MSG_SIZE))
    rej = M.KibRej(why=why, incarnation=net.stamp if net is not None else 0, cp=cp,
                   version=version)
    lnd.rejects_sent[int(why)] = lnd.rejects_sent.get(int(why), 0) + 1
    try:
        for a in cm.reject(M.pack_rej(rej)):
            if isinstance(a, SendBytes):
                lnd.out.append(Write(stream, a.data, a.tail))
    except VerbsError:
        pass
    lnd.out.append(Close(stream))

def passive_connect(lnd: O2ibLND, stream: int, cm: CmId, priv: bytes) -> None:
    """``kiblnd_passive_connect``."""
    R = M.RejectReason
    try:
        req = M.kiblnd_unpack_msg(priv)
    except WireProtocolError as e:
        lnd.errors.append(f"o2iblnd: CONNREQ on port 987: {e}")
        _log.error("%s", lnd.errors[-1])
        reject(lnd, stream, cm, R.FATAL, M.IBLND_MSG_VERSION, None)
        return
    version = req.version
    dst, src = NID.from_nid4(req.dstnid), NID.from_nid4(req.srcnid)
    net = lnd.nets.get(dst)
    if net is None:
        reject(lnd, stream, cm, R.EARLY if not lnd.nets else R.FATAL, version, None)
        return
    if lnd.forced_reject is not None and lnd.forced_reject_ni in (None, dst):
        reject(lnd, stream, cm, lnd.forced_reject, version, dst)
        return
    cp = req.body
    if req.dststamp not in (0, net.stamp):
        reject(lnd, stream, cm, R.CONN_STALE, version, dst)
        return
    if req.type is not M.MsgType.CONNREQ or not isinstance(cp, M.ConnParams):
        reject(lnd, stream, cm, R.FATAL, version, dst)
        return
    depth_max = net.tun.peer_credits if version != M.IBLND_MSG_VERSION_1 else 8
    if cp.queue_depth > depth_max:
        reject(lnd, stream, cm, R.MSG_QUEUE_SIZE if version == M.IBLND_MSG_VERSION
                     else R.FATAL, version, dst)
        return
    if cp.max_frags > M.IBLND_MAX_RDMA_FRAGS:
        reject(lnd, stream, cm, R.RDMA_FRAGS, version, dst)
        return
    if cp.max_msg_size > M.IBLND_MSG_SIZE:
        reject(lnd, stream, cm, R.FATAL, version, dst)
        return
    p = lnd.peers.get((dst, src))
    if p is not None:
        if p.version == 0:
            p.version, p.incarnation = version, req.srcstamp
        if p.incarnation != req.srcstamp or p.version != version:
            for c in list(p.conns):
                lnd._close(c, -116)
            p.incarnation, p.version = req.srcstamp, version
            reject(lnd, stream, cm, R.CONN_STALE, version, dst)
            return
        if p.connecting and nidhash(src) < nidhash(dst) \
                and p.races < MAX_CONN_RACES_BEFORE_ABORT:
            p.races += 1
            reject(lnd, stream, cm, R.CONN_RACE, version, dst)
            return
        p.reconnecting = 0
        p.races = 0
    else:
        p = lnd.peers[(dst, src)] = Peer(dst, src, version=version,
                                           incarnation=req.srcstamp)
    p.accepting += 1
    p.queue_depth, p.max_frags = cp.queue_depth, cp.max_frags
    c = lnd._conn(stream, p, active=False, version=version, depth=cp.queue_depth,
                   frags=cp.max_frags, cm=cm)
    c.incarnation = req.srcstamp
    c.credits = c.reserved = c.queue_depth
    c.state = ConnState.PASSIVE_WAIT
    c.post_receives()
    ack = M.KibMsg(type=M.MsgType.CONNACK, version=version, body=M.ConnParams(
        queue_depth=c.queue_depth, max_frags=c.max_frags, max_msg_size=M.IBLND_MSG_SIZE),
        srcnid=dst.nid4, srcstamp=net.stamp, dstnid=src.nid4, dststamp=req.srcstamp)
    c.run(cm.accept(M.kiblnd_pack_msg(ack), lnd.now))
