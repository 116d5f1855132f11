"""Discovery's pings and pushes sent (spec §5.2 rules 5-6; peer.c ``lnet_peer_send_ping``,
``lnet_peer_send_push``; dyn-035): the discovery thread's two rules that put a message on the
wire, each marking the peer as waiting (PING_SENT / PUSH_SENT, ``lpstate.fire``) and moving it
to the working queue until the MD's event comes back (``discovery.on_md_event``). What comes
back is merged by ``dc_merge.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action
from nodes.lnet.dc_state import Effect, to_working
from nodes.lnet.hdr import LNET_PING_INFO_MIN_SIZE, LNET_PROTO_PING_MATCHBITS, LNET_RESERVED_PORTAL
from nodes.lnet.lpstate import PING_SENT, PUSH_SENT, PeerEvent, fire
from nodes.lnet.msg import MDOwner, OwnerRole

if TYPE_CHECKING:
    from nodes.lnet.discovery import Discovery
    from nodes.lnet.peer import Peer


def _send_ping(dc: Discovery, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_send_ping``: GET of max(lp_data_bytes, 272) to the primary NID (§5.2
    r5), or to the peer's NID on ``lp_disc_net_id`` for router discovery."""
    fire(peer, PeerEvent.SEND_PING)
    to_working(dc, peer)
    dst = peer.primary_nid
    if peer.disc_net is not None:
        dst = next((p.nid for p in peer.lpnis if p.nid.net == peer.disc_net), dst)
    length = max(peer.data_bytes, LNET_PING_INFO_MIN_SIZE)
    handle, acts = dc.get(now, dst, length=length, portal=LNET_RESERVED_PORTAL,
                            match_bits=LNET_PROTO_PING_MATCHBITS,
                            owner=MDOwner(OwnerRole.DC_PING, peer.primary_nid))
    if peer.state & PING_SENT:
        peer.ping_mdh = handle
        dc.held_mdh = max(dc.held_mdh, handle)
    return 0, acts

def _send_push(dc: Discovery, peer: Peer, now: float, **kw: object) -> tuple[int, list[Action]]:
    """``lnet_peer_send_push``: PUT with ACK of our ping buffer to ``lp_disc_dst_nid``
    (the NID that answered the ping) or the primary, from ``lp_disc_src_nid`` (§5.2 r6,
    dyn-035)."""
    fire(peer, PeerEvent.SEND_PUSH)
    to_working(dc, peer)
    peer.push_seq = dc.node.ping_seq
    dst = peer.disc_dst_nid or peer.primary_nid
    src = peer.disc_src_nid if peer.disc_src_nid and dc.nets.ni_by_nid(
        peer.disc_src_nid) else None
    # "reset the discovery nid": a later push (lnet_push_update_to_peers) is sent from any
    # NI, so a push after a rail failed does not insist on the failed rail (peer.c
    # lnet_peer_send_push)
    peer.disc_src_nid = peer.disc_dst_nid = None
    handle, acts = dc.put(now, dst, payload=dc.ping_buffer(),
                            portal=LNET_RESERVED_PORTAL,
                            match_bits=LNET_PROTO_PING_MATCHBITS, ack=True, src=src,
                            owner=MDOwner(OwnerRole.DC_PUSH, peer.primary_nid))
    if peer.state & PUSH_SENT:
        peer.push_mdh = handle
        dc.held_mdh = max(dc.held_mdh, handle)
    return 0, acts


SEND_EFFECTS: dict[str, Effect] = {
    "send_ping": _send_ping,
    "send_push": _send_push,
}
