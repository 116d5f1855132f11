"""Receive path: ``lnet_parse`` for messages addressed to this node (spec §4.2).

Theory of operation: validate the destination, find or create the sender's peer NI (a new
peer learns the receiving NI as its preferred NI), let the router see the message (aliveness,
asymmetric routes; forward it when it is for another node), then dispatch by type: PUT and
GET match a portal entry (a GET on the reserved portal returns the ping buffer, a PUT there
is a discovery push), ACK and REPLY complete the initiator's MD found by its wire handle.
Anything without a match is dropped and counted. LNet drop and delay rules see the message
first (``FaultState.rx_check``, spec §8), after only a router's ``net_last_alive`` refresh
(``RouterAliveness.net_rx``, as ``lnet_parse`` orders them); a message a delay rule held
comes back through ``parse(..., released=True)``.
"""

from __future__ import annotations

from collections.abc import Callable

from nodes.lnet.actions import Action, Log
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.discovery import Discovery
from nodes.lnet.events import MessageReceived
from nodes.lnet.fault import FaultState
from nodes.lnet.hdr import LNET_PROTO_PING_MATCHBITS, LNET_RESERVED_PORTAL, MsgType
from nodes.lnet.health import Health
from nodes.lnet.mds import MDTable
from nodes.lnet.nets import LocalNets
from nodes.lnet.ni import LNetNI
from nodes.lnet.nid import NID
from nodes.lnet.node import NodeState
from nodes.lnet.peer import PeerNI, PeerTable
from nodes.lnet.router import Router
from nodes.lnet.send import Sender

_Handler = Callable[["Receiver", LNetNI, "PeerNI | None", MessageReceived, float, NID],
                    list[Action]]


class Receiver:
    """``lnet_parse`` and the per-type handlers of one node."""

    def __init__(self, *, node: NodeState, counters: GlobalCounters, local: LocalNets,
                 peers: PeerTable, mds: MDTable, health: Health, router: Router,
                 discovery: Discovery, faults: FaultState, sender: Sender,
                 ping_buffer: Callable[[], bytes]) -> None:
        self.node = node
        self.counters = counters
        self.local = local
        self.peers = peers
        self.mds = mds
        self.health = health
        self.router = router
        self.discovery = discovery
        self.faults = faults
        self.sender = sender
        self.ping_buffer = ping_buffer

    def _drop(self, ni: LNetNI | None, lpni: PeerNI | None, ev: MessageReceived,
              why: str) -> list[Action]:
        self.counters.values["drop_count"] += 1
        self.counters.values["drop_length"] += len(ev.payload)
        if ni is not None:
            ni.stats.dropped.bump(ev.hdr.type)
        if lpni is not None:
            lpni.stats.dropped.bump(ev.hdr.type)
        return [Log(level="info", text=f"dropping {ev.hdr.type.name} from {ev.hdr.src_nid} "
                                       f"to {ev.hdr.dest_nid}: {why}")]

    def parse(self, ev: MessageReceived, now: float, *, loopback: bool = False,
              released: bool = False) -> list[Action]:
        if not (loopback or released):
            rx_ni = self.local.ni_by_nid(ev.ni)
            if rx_ni is not None and self.node.configured:  # net_last_alive (§6.2), first
                self.router.alive.net_rx(rx_ni, ev.hdr.src_nid, now, ping=(
                    ev.hdr.type == MsgType.GET and ev.hdr.ptl_index == LNET_RESERVED_PORTAL))
            verdict = self.faults.rx_check(ev, now)  # LNet drop/delay rules, spec §8
            if verdict is True:
                return []
            if verdict is not False:  # silently lost (lnet_parse counts the drop)
                self.counters.values["drop_count"] += 1
                self.counters.values["drop_length"] += len(ev.payload)
                rx_ni = self.local.ni_by_nid(ev.ni)
                if rx_ni is not None:
                    rx_ni.stats.dropped.bump(ev.hdr.type)
                return [verdict]
        hdr = ev.hdr
        ni = self.local.ni_by_nid(ev.ni)
        if ni is None or not self.node.configured:
            return self._drop(None, None, ev, f"not received on a local NI ({ev.ni})")
        forward = hdr.dest_nid != ni.nid
        if forward and (not self.router.enabled or hdr.dest_nid.net == ni.nid.net
                        or self.local.ni_by_nid(hdr.dest_nid) is not None):
            # not for this NI and not routable by this node: refused (-EPROTO, §4.2 step 2)
            return self._drop(ni, None, ev, "not for me (-EPROTO)")
        lpni: PeerNI | None = None
        if not loopback:
            # the sender is the previous hop (``from_nid``): the originator, or a router
            lpni = self.peers.find_lpni(ev.peer_nid)
            if lpni is None:
                lpni = self.peers.traffic_add(ev.peer_nid,
                                              self.local.peer_credits(ev.peer_nid.net))
                lpni.pref_nids.append(ni.nid)  # lnet_peer_ni_set_non_mr_pref_nid
                lpni.non_mr_pref = True
            lpni.last_alive = now
            lpni.stats.received.bump(hdr.type)
            why = self.router.alive.on_rx(lpni, hdr.src_nid, now)  # aliveness, §6.5
            if why is not None:
                ni.stats.received.bump(hdr.type)
                return self._drop(ni, lpni, ev, why)
        ni.stats.received.bump(hdr.type)
        if forward and lpni is not None:
            # no health check here: a forwarded message is committed for both directions and
            # lnet_health_check runs once, on the send side (Health.check, issue 26 item 6)
            return self.router.fwd.forward(ni, lpni, hdr, ev.payload, now)  # seed 001, §6.6
        owner = self.peers.find_peer(hdr.src_nid)
        initiator = owner.primary_nid if owner else hdr.src_nid
        drops = self.counters.values["drop_count"]
        mtype = hdr.type  # (``_HANDLERS[hdr.type]`` written out: native calls, no dict)
        if mtype == MsgType.PUT:
            actions = self.on_put(ni, lpni, ev, now, initiator)
        elif mtype == MsgType.GET:
            actions = self.on_get(ni, lpni, ev, now, initiator)
        elif mtype == MsgType.ACK or mtype == MsgType.REPLY:
            actions = self.on_response(ni, lpni, ev, now, initiator)
        else:
            actions = _HANDLERS[mtype](self, ni, lpni, ev, now, initiator)
        if lpni is not None and self.counters.values["drop_count"] == drops \
                and hdr.type != MsgType.GET:
            # lnet_health_check OK branch for a delivered message (spec §3.2): both ends
            # alive. A GET's check is its REPLY's: one lnet_msg (lnet_parse_get, Health.check)
            self.health.rx_ok(ni, lpni, now)
        elif loopback and hdr.type != MsgType.GET:
            # the same branch on 0@lo (its peer NI, lnet_parse's, is not kept here): the NI
            # rises and its recovery ping count restarts (lib-msg.c lnet_health_check). A
            # LOLND send has no txpeer, so lnet_is_health_check skips it: only what 0@lo
            # receives counts
            self.health.inc_ni(ni)
            ni.ping_count = 0
        return actions

    def _count_recv(self, nob: int) -> None:
        self.counters.values["recv_count"] += 1
        self.counters.values["recv_length"] += nob

    def on_put(self, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived, now: float,
               initiator: NID) -> list[Action]:
        hdr = ev.hdr
        push: list[Action] = []
        md = None
        if hdr.ptl_index == LNET_RESERVED_PORTAL and hdr.match_bits == LNET_PROTO_PING_MATCHBITS:
            # the push target (discovery.py, spec §5.1/§5.3); a non-MR node has none (dyn-010)
            accepted, push = self.discovery.on_push(hdr.src_nid, ev.payload, now)
            if not accepted:
                return self._drop(ni, lpni, ev, "push to a non-Multi-Rail node (dyn-010)")
        else:
            md = self.mds.match(hdr.ptl_index, hdr.match_bits)
            if md is None:
                return self._drop(ni, lpni, ev, f"no match on portal {hdr.ptl_index} (-ENOENT)")
        self._count_recv(len(ev.payload))
        actions: list[Action] = push
        if md is not None:  # the target MD's PUT event (a posted buffer, lnet_selftest)
            actions += self.mds.delivered(md, "PUT", source=hdr.src_nid, initiator=initiator,
                                          target=hdr.dest_nid, payload=ev.payload,
                                          mlength=len(ev.payload))
        if not hdr.wmd.is_none:
            actions += self.sender.respond(now, MsgType.ACK, ni, hdr, mlength=len(ev.payload),
                                           rtr=ev.peer_nid)
        return actions

    def on_get(self, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived, now: float,
               initiator: NID) -> list[Action]:
        hdr = ev.hdr
        md = None
        if hdr.ptl_index == LNET_RESERVED_PORTAL and hdr.match_bits == LNET_PROTO_PING_MATCHBITS:
            data = self.ping_buffer()
        else:
            md = self.mds.match(hdr.ptl_index, hdr.match_bits)
            if md is None:
                return self._drop(ni, lpni, ev, f"no match on portal {hdr.ptl_index} (-ENOENT)")
            data = md.data
        reply = _window(data, hdr.offset, hdr.sink_length)
        self._count_recv(0)
        self.counters.values["send_length"] += len(reply)
        actions = self.sender.respond(now, MsgType.REPLY, ni, hdr, payload=reply,
                                      rtr=ev.peer_nid, rx_committed=lpni is not None)
        if md is not None:  # the source MD's GET event (lnet_selftest's passive bulk)
            actions += self.mds.delivered(md, "GET", source=hdr.src_nid, initiator=initiator,
                                          target=hdr.dest_nid, mlength=len(reply))
        return actions

    def on_response(self, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived, now: float,
                    initiator: NID) -> list[Action]:
        """ACK or REPLY: the initiator MD's final event. The transaction's time (PUT/GET sent
        -> this response) goes to the responding peer NI (hlth-stt-avg-transaction-time)."""
        hdr = ev.hdr
        md = self.mds.lookup(hdr.wmd)
        if md is None:
            return self._drop(ni, lpni, ev, "invalid MD (late or unknown response)")
        self._count_recv(len(ev.payload))
        kind = "ACK" if hdr.type == MsgType.ACK else "REPLY"
        lat = int((now - md.sent_at) * 1e9)
        for st in [ni.stats] + ([lpni.stats] if lpni else []):
            (st.put_ack if kind == "ACK" else st.get_rtt).add(lat)
        responder = self.peers.find_lpni(hdr.src_nid)
        if responder is not None:
            responder.stats.transaction_time.add(lat)
        return self.mds.final(md, kind, 0, source=hdr.src_nid, initiator=initiator,
                              payload=ev.payload if len(ev.payload) <= md.max_size
                              else ev.payload[:md.max_size], mlength=hdr.mlength)

    def on_hello(self, ni: LNetNI, lpni: PeerNI | None, ev: MessageReceived, now: float,
                 initiator: NID) -> list[Action]:
        return self._drop(ni, lpni, ev, "unexpected HELLO")


def _window(data: bytes, offset: int, length: int) -> bytes:
    """``data[offset:offset + length]``, the buffer itself when that is all of it: CPython
    hands a whole-bytes slice back uncopied, compiled code copies it (a 1 MiB bulk GET's
    REPLY, lnet_selftest brw write, paid a fresh 1 MiB buffer per RPC on the sender)."""
    if offset == 0 and length >= len(data):
        return data
    return data[offset:offset + length]


_HANDLERS: dict[MsgType, _Handler] = {
    MsgType.PUT: Receiver.on_put,
    MsgType.GET: Receiver.on_get,
    MsgType.ACK: Receiver.on_response,
    MsgType.REPLY: Receiver.on_response,
    MsgType.HELLO: Receiver.on_hello,
}
