"""The upper layer's requests: ``LNetPut`` and ``LNetGet`` (spec §4.1; lib-move.c).

Theory of operation: a request binds its initiator MD (``MDTable.bind``: threshold 2 when a
response is expected, the caller's timeout), builds the LNet header (source ``0@lo`` until
the send commits it to a local NI, spec §2.7; the MD's wire handle when a response is
expected) and the message, and hands it to the ``Sender``, which attaches the response
tracker when the tunables ask for one (``lnet_response_tracking``, spec §4.3).
"""

from __future__ import annotations

from collections.abc import Iterator

from nodes.lnet.actions import Action
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.hdr import (
    LNET_PID_LUSTRE,
    LNET_PROTO_PING_MATCHBITS,
    LNET_RESERVED_PORTAL,
    LNetHdr,
    MsgType,
    WireHandle,
)
from nodes.lnet.mds import MDTable
from nodes.lnet.msg import MDOwner, Msg
from nodes.lnet.nid import LO_NID, NID
from nodes.lnet.node import NodeState
from nodes.lnet.send import Sender
from nodes.lnet.tunables import Tunables


class Requests:
    """``LNetPut``/``LNetGet`` of one node."""

    def __init__(self, node: NodeState, tunables: Tunables, counters: GlobalCounters,
                 mds: MDTable, sender: Sender, ids: Iterator[int]) -> None:
        self.node = node
        self.tunables = tunables
        self.counters = counters
        self.mds = mds
        self.sender = sender
        self.ids = ids

    def _launch(self, msg: Msg, now: float, src: NID | None) -> list[Action]:
        """On the active list, then the ``Sender``."""
        self.counters.msg_alloc()
        msg.onactivelist = True
        return self.sender.launch(msg, now, src)

    def _tracking(self, mtype: MsgType) -> bool:
        """``lnet_response_tracking`` 0..3 (spec §4.3)."""
        rt = self.tunables.response_tracking
        return (mtype == MsgType.GET and rt in (1, 3)) or (mtype == MsgType.PUT and rt in (2, 3))

    def put(self, now: float, dst: NID, *, payload: bytes, portal: int, match_bits: int,
            ack: bool, src: NID | None, timeout: float | None, hdr_data: int,
            numa: int | None, owner: MDOwner | None) -> tuple[int, list[Action]]:
        """``LNetPut``; discovery pushes (an ``owner``) are always tracked
        (``lnet_response_tracking`` 0 still tracks them, spec §4.3)."""
        # lnet_attach_rsp_tracker: one deadline per MD, not reset on resend (spec §3.4)
        track = self.node.configured and ack and (owner is not None
                                                  or self._tracking(MsgType.PUT))
        md = self.mds.bind(now, threshold=2 if ack else 1, timeout=timeout, op=MsgType.PUT,
                           owner=owner, track=track)
        wmd = WireHandle(self.node.incarnation, md.handle) if ack else WireHandle()
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE,
                      src_pid=self.node.pid, type=MsgType.PUT, payload_length=len(payload),
                      wmd=wmd, match_bits=match_bits, hdr_data=hdr_data, ptl_index=portal)
        msg = Msg(next(self.ids), MsgType.PUT, hdr, payload, md=md, final_dst=dst, md_cpt=numa)
        md.msg = msg
        return md.handle, self._launch(msg, now, src)

    def get(self, now: float, dst: NID, *, length: int, portal: int, match_bits: int,
            src: NID | None, timeout: float | None, recovery: bool, numa: int | None,
            owner: MDOwner | None) -> tuple[int, list[Action]]:
        """``LNetGet``; an internal ping (an ``owner``) is always tracked."""
        force = portal == LNET_RESERVED_PORTAL and match_bits == LNET_PROTO_PING_MATCHBITS
        track = self.node.configured and ((force and owner is not None)
                                          or self._tracking(MsgType.GET))
        md = self.mds.bind(now, threshold=2, timeout=timeout, op=MsgType.GET, owner=owner,
                           track=track)
        hdr = LNetHdr(dest_nid=dst, src_nid=LO_NID, dest_pid=LNET_PID_LUSTRE,
                      src_pid=self.node.pid, type=MsgType.GET, payload_length=0,
                      wmd=WireHandle(self.node.incarnation, md.handle), match_bits=match_bits,
                      ptl_index=portal, sink_length=length)
        msg = Msg(next(self.ids), MsgType.GET, hdr, b"", md=md, final_dst=dst,
                  recovery=recovery, md_cpt=numa)
        md.msg = msg
        return md.handle, self._launch(msg, now, src)
