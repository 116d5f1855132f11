"""Receive path: ``lnet_parse`` for messages addressed to this node (spec §4.2).

Theory of operation: validate the destination, find or create the sender's peer NI (a new
sender becomes a non-MR peer whose preferred NI is the one it arrived on), count it, credit
health (a message received proves both ends work), then dispatch by type: PUT and GET match a
portal entry (a GET on the reserved portal returns the ping buffer), ACK and REPLY complete the
initiator's MD found by its wire handle. Anything without a match is dropped and counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.actions import Action, Log
from nodes.lnet.events import MessageReceived
from nodes.lnet.fault import rx_hook
from nodes.lnet.hdr import LNET_PROTO_PING_MATCHBITS, LNET_RESERVED_PORTAL, MsgType
from nodes.lnet.health import rx_ok
from nodes.lnet.ni import LNetNI
from nodes.lnet.peer import PeerNI

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine


def _drop(eng: LNetEngine, ni: LNetNI | None, lpni: PeerNI | None, ev: MessageReceived,
          why: str) -> list[Action]:
    eng.counters.bump("drop_count")
    eng.counters.bump("drop_length", len(ev.payload))
    if ni is not None:
        ni.stats.dropped.bump(ev.hdr.type)
    if lpni is not None:
        lpni.stats.dropped.bump(ev.hdr.type)
    return [Log(level="info", text=f"dropping {ev.hdr.type.name} from {ev.hdr.src_nid} "
                                   f"to {ev.hdr.dest_nid}: {why}")]


def parse(eng: LNetEngine, ev: MessageReceived, now: float, *,
          loopback: bool = False) -> list[Action]:
    if (held := rx_hook(eng, ev, now, loopback=loopback)) is not None:  # drop/delay, §8
        return held
    hdr = ev.hdr
    ni = eng.ni_by_nid(ev.ni)
    if ni is None or not eng.configured:
        return _drop(eng, None, None, ev, f"not received on a local NI ({ev.ni})")
    forward = hdr.dest_nid != ni.nid
    if forward and (not eng.router.enabled or hdr.dest_nid.net == ni.nid.net
                    or eng.ni_by_nid(hdr.dest_nid) is not None):
        # not for this NI and not routable by this node: refused (-EPROTO, spec §4.2 step 2)
        return _drop(eng, ni, None, ev, "not for me (-EPROTO)")
    lpni: PeerNI | None = None
    if not loopback:
        # the sender is the previous hop (``from_nid``): the originator itself, or a router
        lpni = eng.peers.find_lpni(ev.peer_nid)
        if lpni is None:
            lnet = eng.nets.get(ev.peer_nid.net)
            lpni = eng.peers.traffic_add(ev.peer_nid, lnet.tunables.peer_credits if lnet else 0)
            lpni.pref_nids.append(ni.nid)
        lpni.last_alive = now
        lpni.stats.received.bump(hdr.type)
        why = eng.router.on_rx(ni, lpni, hdr.src_nid, now)  # aliveness, asym (spec §6.5)
        if why is not None:
            ni.stats.received.bump(hdr.type)
            return _drop(eng, ni, lpni, ev, why)
    ni.stats.received.bump(hdr.type)
    if forward and lpni is not None:
        rx_ok(eng, ni, lpni, now)
        return eng.router.forward(ni, lpni, hdr, ev.payload, now)  # seed 001, spec §6.6
    owner = eng.peers.find_peer(hdr.src_nid)
    initiator = owner.primary_nid if owner else hdr.src_nid
    handler = _HANDLERS[hdr.type]
    drops = eng.counters.values["drop_count"]
    actions = handler(eng, ni, lpni, ev, now, initiator)
    if lpni is not None and eng.counters.values["drop_count"] == drops:
        # lnet_health_check OK branch for a delivered message (spec §3.2): both ends alive
        rx_ok(eng, ni, lpni, now)
    return actions


def _count_recv(eng: LNetEngine, nob: int) -> None:
    eng.counters.bump("recv_count")
    eng.counters.bump("recv_length", nob)


def _on_put(eng: LNetEngine, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived,
            now: float, initiator: object) -> list[Action]:
    hdr = ev.hdr
    push: list[Action] = []
    if hdr.ptl_index == LNET_RESERVED_PORTAL and hdr.match_bits == LNET_PROTO_PING_MATCHBITS:
        # the push target (discovery.py, spec §5.1/§5.3); a non-MR node has none (dyn-010)
        from nodes.lnet import discovery

        accepted, push = discovery.on_push(eng, hdr.src_nid, ev.payload, now)
        if not accepted:
            return _drop(eng, ni, lpni, ev, "push to a non-Multi-Rail node (dyn-010)")
        md = None
    else:
        md = eng.match_me(hdr.ptl_index, hdr.match_bits)
        if md is None:
            return _drop(eng, ni, lpni, ev, f"no match on portal {hdr.ptl_index} (-ENOENT)")
    _count_recv(eng, len(ev.payload))
    actions: list[Action] = push
    if not hdr.wmd.is_none:
        actions += eng.send_response(now, MsgType.ACK, ni, hdr, mlength=len(ev.payload),
                                     rtr=ev.peer_nid)
    return actions


def _on_get(eng: LNetEngine, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived,
            now: float, initiator: object) -> list[Action]:
    hdr = ev.hdr
    if hdr.ptl_index == LNET_RESERVED_PORTAL and hdr.match_bits == LNET_PROTO_PING_MATCHBITS:
        data = eng.ping_info().pack()
    else:
        md = eng.match_me(hdr.ptl_index, hdr.match_bits)
        if md is None:
            return _drop(eng, ni, lpni, ev, f"no match on portal {hdr.ptl_index} (-ENOENT)")
        data = md.data
    reply = data[hdr.offset:hdr.offset + hdr.sink_length]
    _count_recv(eng, 0)
    eng.counters.bump("send_length", len(reply))
    return eng.send_response(now, MsgType.REPLY, ni, hdr, payload=reply, rtr=ev.peer_nid)


def _on_response(eng: LNetEngine, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived,
                 now: float, initiator: object) -> list[Action]:
    hdr = ev.hdr
    md = eng.lookup_md(hdr.wmd)
    if md is None:
        return _drop(eng, ni, lpni, ev, "invalid MD (late or unknown response)")
    _count_recv(eng, len(ev.payload))
    kind = "ACK" if hdr.type == MsgType.ACK else "REPLY"
    lat = int((now - md.sent_at) * 1e9)
    stats = [ni.stats] + ([lpni.stats] if lpni else [])
    for st in stats:
        (st.put_ack if kind == "ACK" else st.get_rtt).add(lat)
    return eng.md_response(now, md, kind, source=hdr.src_nid, initiator=initiator,  # type: ignore[arg-type]
                           payload=ev.payload[:md.max_size], mlength=hdr.mlength)


def _on_hello(eng: LNetEngine, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived,
              now: float, initiator: object) -> list[Action]:
    return _drop(eng, ni, lpni, ev, "unexpected HELLO")


_HANDLERS = {
    MsgType.PUT: _on_put,
    MsgType.GET: _on_get,
    MsgType.ACK: _on_response,
    MsgType.REPLY: _on_response,
    MsgType.HELLO: _on_hello,
}
