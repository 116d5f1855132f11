"""The loopback NI's send path: a message to ``0@lo`` never reaches an LND.

Theory of operation: lib-move.c ``lnet_handle_lo_send`` sends it through the loopback NI
without credits or a peer, and lolnd's ``lolnd_send`` parses it at once; so the message is
handed to the receive side in the same call and finalized OK. Only ``0@lo`` is short-cut: the
node's other NIDs are peers reached through the LND (``send.py``, docs/sanity-lnet.md E1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from nodes.lnet.actions import Action
from nodes.lnet.events import MessageReceived
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import LO_NET

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.send import Sender


def send_loopback(sender: Sender, msg: Msg, now: float) -> list[Action]:
    """``lnet_handle_lo_send`` + ``lolnd_send`` for ``sender``'s message to ``0@lo``; the
    MD's response tracker starts as on any send."""
    assert msg.final_dst is not None and sender.receiver is not None
    ni = sender.local.nets[LO_NET].nis[0]
    msg.hdr = replace(msg.hdr, src_nid=ni.nid, dest_nid=ni.nid)
    msg.txni = ni
    md = msg.md
    if md is not None and md.rsp_deadline is not None and not md.rsp_armed \
            and not msg.is_response:
        sender.mds.arm(md, now + sender.tunables.transaction_timeout)
    actions = sender.receiver.parse(MessageReceived(ni=ni.nid, peer_nid=ni.nid, hdr=msg.hdr,
                                                    payload=msg.payload), now, loopback=True)
    return actions + sender.finalizer.finalize_tx(msg, now, 0, HStatus.OK)
