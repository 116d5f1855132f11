"""Peer discovery: the queue, the triggers and the send gate (spec §5.2-5.3; peer.c,
lib-move.c ``lnet_initiate_peer_discovery``; seed 000 dyn-005..065, cfg-085, bck-025/030).

Theory of operation. A peer is discovered by a *ping* (a GET of ``max(lp_data_bytes, 272)``
bytes on portal 0 with the ping match bits, to its primary NID) whose REPLY carries the
peer's ping buffer (``ping.py``, spec §5.1), and told about us by a *push* (a PUT with ACK of
our own ping buffer on the same portal/match bits, dyn-005/015). The per-peer state machine
(``lp_state`` bits, transition table, queues) is ``dc_state.py``; pings and pushes sent and
their replies merged into the peer table are ``dc_merge.py``; this module applies the table
(``step``), runs the discovery thread's loop (``run_queue``), completes discovery
(``complete``) and holds the entry points.

Discovery is on by default, as in real LNet; ``lnetctl set discovery 0`` turns it off. The
request queue is processed at once on every trigger (``run_queue``) and, for work that comes
without a clock (MD events, local NI added/removed, ``set discovery``), at the next engine
tick, which is due at once (the ``DISCOVERY`` timer, ``tick``).

Triggers (spec §5.3):

* the send gate (``gate``, spec §2.2 step 5): a discovery-eligible message (not a response,
  not a GET/PUT on the reserved portal) to a peer that is not up to date waits on the peer's
  ``lp_dc_pendq`` while the peer is discovered. This holds for statically configured peers
  too: a CONFIGURED peer is not NIDS_UPTODATE until its data has been merged (DLC wins,
  spec §5.4). With discovery disabled the first message still waits for one ping round
  (``lnet_discover_peer_locked`` runs one round, spec §11.8); the peer then stays non-MR;
* ``lnetctl discover [--force]`` (``discover``: blocking, an MD's final event completes it);
* a local NI added or removed (``local_ni_changed``, ``lnet_push_update_to_peers``: MR peers
  behind our ping buffer are pushed, dyn-045); ``set discovery 0`` pushes to every MR peer;
* a received push (``on_push``), and router discovery (``start``, below).

Completion fails the pending messages with the error, or sends them again from scratch.
A downrev node (``multi_rail = False``, seed 000 "Backwards Compatibility") never initiates
discovery, answers pings without MULTI_RAIL and DISCOVERY and drops pushes (dyn-010).

``Discovery`` owns the queues and the ``DISCOVERY`` timer. Router discovery is ``start(peer,
now, force_ping=True, force_push=True, rtr_net=net)``: the ping goes to the peer's NID on that
net and the peer carries RTR_DISCOVERY (the gate lets its messages pass) until completion
sets RTR_DISCOVERED and calls ``RouterChecker.discovery_complete``. ``discover`` at the end takes an
engine: the node daemon's ``lnetctl discover`` entry point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from nodes.lnet.actions import Action, Log
from nodes.lnet.dc_merge import MERGE_EFFECTS
from nodes.lnet.dc_send import SEND_EFFECTS
from nodes.lnet.dc_state import (
    REDISCOVER_PEER,
    STATE_EFFECTS,
    TRANSITIONS,
    DiscoveryQueues,
    Effect,
    Input,
    Phase,
    classify,
    is_uptodate,
    needs_push,
    phase,
    queue,
    stale,
    to_working,
)
from nodes.lnet.errors import EHOSTUNREACH, EPROTO, WireProtocolError
from nodes.lnet.hdr import (
    LNET_RESERVED_PORTAL,
    MsgType,
    Payload,
)
from nodes.lnet.hstatus import HStatus
from nodes.lnet.lpstate import (
    DISCOVERING,
    MULTI_RAIL,
    PING_SENT,
    PUSH_SENT,
    RTR_DISCOVERY,
    PeerEvent,
    fire,
)
from nodes.lnet.msg import MD, Msg, MsgInput, OwnerRole
from nodes.lnet.nid import NID, Net
from nodes.lnet.node import NodeState
from nodes.lnet.peer import Peer, PeerNI, PeerTable
from nodes.lnet.ping import LNET_PING_FEAT_MULTI_RAIL, PingInfo
from nodes.lnet.timers import DISCOVERY, Timers
from nodes.lnet.tunables import Tunables

if TYPE_CHECKING:
    from nodes.lnet.mds import MDTable
    from nodes.lnet.nets import LocalNets
    from nodes.lnet.recovery import Recovery
    from nodes.lnet.router import Router
    from nodes.lnet.send import Sender

_MAX_STEPS: Final = 32  # guard: one peer is never processed more often than this per run
_KEY: Final = (DISCOVERY, 0)
#: sends a GET / PUT for discovery: the engine's ``get`` / ``put`` (wired by the engine)
Request = Callable[..., tuple[int, list[Action]]]


class Discovery:
    """Peer discovery of one node: queues, the machine's effects, the send gate."""

    def __init__(self, node: NodeState, tunables: Tunables, peers: PeerTable,
                 nets: LocalNets, mds: MDTable, recovery: Recovery, timers: Timers) -> None:
        self.node = node
        self.tunables = tunables
        self.peers = peers
        self.nets = nets
        self.mds = mds
        self.recovery = recovery
        self.timers = timers
        self.queues = DiscoveryQueues()
        self.held_mdh = 0  #: the largest handle a ping_mdh/push_mdh was ever given
        # wired by the engine (built after this component)
        self.sender: Sender | None = None
        self.router_ref: Router | None = None
        self.get: Request = lambda *a, **kw: (0, [])
        self.put: Request = lambda *a, **kw: (0, [])
        self.ping_buffer: Callable[[], bytes] = lambda: b""

    @property
    def router(self) -> Router:  # wired after construction
        assert self.router_ref is not None
        return self.router_ref

    def clear(self) -> None:
        """``unconfigure``: the queues are emptied."""
        self.queues.request.clear()
        self.queues.working.clear()
        self.queues.running, self.queues.wake = False, 0.0
        self.rearm()

    def rearm(self) -> None:
        """The deferred work's timer: ``wake`` while the request queue has peers."""
        if self.queues.request:
            self.timers.arm(_KEY, self.queues.wake)
        else:
            self.timers.cancel(_KEY)

    def peer_of(self, nid: NID) -> Peer:
        """The peer owning ``nid``, created by traffic if unknown (``lnet_nid2peerni``)."""
        lpni = self.peers.find_lpni(nid)
        if lpni is None:
            lpni = self.peers.traffic_add(nid, self.nets.peer_credits(nid.net))
        return lpni.peer

    def step(self, peer: Peer, inp: Input, now: float,
             **kw: Any) -> tuple[int, list[Action]]:
        """Apply one input: the table's effect. Returns (rc, actions); rc as the real rules
        return it (0, a negative errno, or ``REDISCOVER_PEER``)."""
        key = (phase(peer), inp)
        entry = TRANSITIONS.get(key)
        if entry is None:
            # a local protocol error (STYLE rule 2): defined outcome, never an exception
            fire(peer, PeerEvent.PROTOCOL_ERROR)
            return -EPROTO, [Log(level="error", text=f"discovery of {peer.primary_nid}: no "
                                                       f"transition for {key[0].value}/"
                                                       f"{inp.value}")]
        effect, _next = entry
        return _EFFECTS[effect](self, peer, now, **kw)

    def run_queue(self, now: float) -> list[Action]:
        """The discovery thread's loop over the request queue (``lnet_peer_discovery``)."""
        dc = self.queues
        if dc.running:
            return []  # re-entered from an event raised while sending: the outer loop goes on
        dc.running = True
        actions: list[Action] = []
        steps: dict[int, int] = {}
        try:
            while dc.request:
                peer = dc.request.pop(0)
                n = steps[id(peer)] = steps.get(id(peer), 0) + 1
                if n > _MAX_STEPS:
                    actions += self.complete(peer, -EPROTO, now)
                    continue
                if not self.peers.holds(peer):
                    # merged away into another peer (its messages moved there) or deleted
                    actions += self.complete(peer, 0, now)
                    continue
                if phase(peer) is not Phase.QUEUED:
                    if not peer.state & DISCOVERING:
                        continue
                    to_working(self, peer)
                    continue
                rc, acts = self.step(peer, classify(self, peer), now)
                actions += acts
                if rc == REDISCOVER_PEER:
                    if peer not in dc.request:
                        dc.request.append(peer)
                elif rc or not peer.state & DISCOVERING:
                    actions += self.complete(peer, rc, now)
        finally:
            dc.running = False
            self.rearm()
        return actions

    def complete(self, peer: Peer, rc: int, now: float) -> list[Action]:
        """``lnet_peer_discovery_complete``: pending messages failed with the error or sent
        again from scratch; blocking waiters woken; the router told (spec §5.2 end, §6.4)."""
        assert self.sender is not None
        dc = self.queues
        for q in (dc.request, dc.working):
            if peer in q:
                q.remove(peer)
        fire(peer, PeerEvent.COMPLETE)
        if rc:
            peer.dc_error = rc
            fire(peer, PeerEvent.COMPLETE_ERROR)
        if peer.state & RTR_DISCOVERY:
            fire(peer, PeerEvent.RTR_DISCOVERED)
        actions: list[Action] = []
        pending, peer.dc_pendq = peer.dc_pendq, []
        waiters, peer.dc_waiters = peer.dc_waiters, []
        if peer.rtr_refcount > 0 and self.router_ref is not None:
            actions += self.router.checker.discovery_complete(peer, rc, now)
        for msg in pending:
            msg.fire(MsgInput.READY)
            if rc:
                hs = HStatus.REMOTE_ERROR if rc == -EHOSTUNREACH else HStatus.LOCAL_ERROR
                actions += self.sender.finalizer.fail_unsent(msg, now, rc, hs)
            else:
                actions += self.sender.send(msg, now)
        for handle in waiters:
            md = self.mds.get(handle)
            if md is not None:
                actions += self.mds.final(md, "DISCOVERY", rc)
        self.rearm()
        return actions

    # ------------------------------------------------------------------------ entry points
    def start(self, peer: Peer, now: float, *, force_ping: bool = False,
              force_push: bool = False, rtr_net: Net | None = None,
              run: bool = True) -> list[Action]:
        """Queue ``peer`` for discovery and (with ``run``) run the queue (router discovery:
        see the module doc)."""
        if force_ping:
            fire(peer, PeerEvent.FORCE_PING)
        if force_push:
            fire(peer, PeerEvent.FORCE_PUSH)
        if rtr_net is not None:
            peer.disc_net = rtr_net
            fire(peer, PeerEvent.RTR_DISCOVERY)
        peer.dc_error = 0
        _, actions = self.step(peer, Input.DISCOVER, now)
        if run:
            actions += self.run_queue(now)
        self.rearm()
        return actions

    def gate(self, msg: Msg, lpni: PeerNI, now: float) -> list[Action] | None:
        """``lnet_initiate_peer_discovery`` (spec §2.2 step 5) for a message to ``lpni``:
        None lets the send go on; otherwise the message waits on the peer's
        ``lp_dc_pendq`` and these are the actions. Not for responses, recovery pings and
        GET/PUT on the reserved portal (``lnet_msg_discovery``); a downrev node never
        initiates discovery (dyn-055, bck-025)."""
        if msg.is_response or msg.recovery or not self.node.multi_rail or (
                msg.hdr.ptl_index == LNET_RESERVED_PORTAL
                and msg.type in (MsgType.GET, MsgType.PUT)):
            return None
        peer = lpni.peer
        if peer.state & RTR_DISCOVERY or is_uptodate(self, peer):
            return None
        # lnet_discover_peer_locked(block=false) only queues the peer and wakes the thread;
        # the message is on lp_dc_pendq before the thread runs: a synchronous failure fails it
        actions = self.start(peer, now, run=False)
        msg.fire(MsgInput.WAIT_DISCOVERY)
        peer.dc_pendq.append(msg)
        return actions + self.run_queue(now)

    def discover(self, nid: NID, now: float, *, force: bool = False) -> tuple[int, list[Action]]:
        """``lnetctl discover [--force] NID`` (spec §5.3, §9.3): blocking; the returned MD's
        final event (kind ``DISCOVERY``) carries the result. Clears NIDS_UPTODATE (and forces
        a ping and a push with ``force``); with discovery disabled it still runs one round."""
        md = self.mds.bind(now, threshold=1)
        peer = self.peer_of(nid)
        fire(peer, PeerEvent.NIDS_STALE)
        peer.dc_waiters.append(md.handle)
        actions = self.start(peer, now, force_ping=force, force_push=force)
        return md.handle, actions

    def on_md_event(self, md: MD, kind: str, status: int, payload: Payload,
                    source: NID | None) -> list[Action]:
        """``lnet_discovery_event_handler``: REPLY/ACK/SEND error/UNLINK of a ping or push."""
        assert md.owner is not None
        # the event's md_user_ptr in lnet_discovery_event_handler (issue 27 item 1)
        peer = self.peers.md_holder(md.handle, md.owner.nid, self.held_mdh)
        if peer is None:
            return []
        is_ping = md.owner.role is OwnerRole.DC_PING
        if kind == "SEND" and status == 0:
            return []  # the request left; wait for the REPLY/ACK
        if kind == "SEND":
            inp = Input.SEND_FAIL
        elif kind == "UNLINK" or status:
            inp = Input.UNLINK
        else:
            inp = Input.REPLY if kind == "REPLY" else Input.ACK
        if (is_ping and not peer.state & PING_SENT) or (
                not is_ping and not peer.state & PUSH_SENT):
            return stale(self, peer, 0.0)[1]
        # events carry no clock: the effects below need none; the queue runs at the next
        # tick, which is due at once (``wake`` 0), so discovery goes on without delay
        _, actions = self.step(peer, inp, 0.0, status=status, md=md, payload=payload,
                               source=source)
        self.queues.wake = 0.0
        self.rearm()
        return actions

    def on_push(self, src: NID, payload: Payload, now: float) -> tuple[bool, list[Action]]:
        """A PUT on portal 0 with the ping match bits: the push target
        (``lnet_peer_push_event``). Returns (accepted, actions); a non-MR node has no push
        target: the push is dropped and no ACK is sent (dyn-010)."""
        if not self.node.multi_rail:
            return False, []
        peer = self.peers.find_peer(src)
        if peer is None:
            return True, [Log(level="info", text=f"push from unknown {src}: ignored")]
        try:
            info = PingInfo.unpack(payload)
        except WireProtocolError as e:
            return True, [Log(level="warning", text=f"bad push from {src}: {e}")]
        if not info.features & LNET_PING_FEAT_MULTI_RAIL:
            return True, [Log(level="info", text=f"push from non-MR peer {src}: dropped")]
        _, actions = self.step(peer, Input.PUSH_RX, now, info=info)
        return True, actions + self.run_queue(now)

    def local_ni_changed(self, *, force: bool = False) -> None:
        """``lnet_push_update_to_peers(force)``: the ping buffer changed (local NI added or
        removed: seq+1) or discovery was disabled (``force``). Every MR peer that needs our
        new buffer (``needs_push``) is queued for discovery now, whether configured or
        discovered (dyn-045); the queue runs at the next tick. A downrev node never pushes
        (dyn-010)."""
        if not self.node.multi_rail or not self.node.configured:
            return
        for peer in list(self.peers.walk()):  # CPT by CPT, as the kernel walks its tables
            if force and peer.state & MULTI_RAIL:
                fire(peer, PeerEvent.FORCE_PUSH)
            if needs_push(self, peer):
                queue(self, peer)
        self.queues.wake = 0.0
        self.rearm()

    def set_discovery(self, old: int, new: int) -> None:
        """``lnetctl set discovery 0|1``: disabling force-pushes our buffer (without the
        DISCOVERY bit) to every MR peer; enabling does not push (spec §5.4 last bullet)."""
        if old and not new:
            self.local_ni_changed(force=True)


_EFFECTS: dict[str, Effect] = {**STATE_EFFECTS, **SEND_EFFECTS, **MERGE_EFFECTS}


# ---------------------------------------------------------------------------- engine entry
class _CanDiscover(Protocol):
    def discover(self, nid: NID, now: float, *,
                 force: bool = False) -> tuple[int, list[Action]]: ...


def discover(eng: _CanDiscover, nid: NID, now: float, *,
             force: bool = False) -> tuple[int, list[Action]]:
    """``lnetctl discover`` on ``eng`` (``LNetEngine.discover``)."""
    return eng.discover(nid, now, force=force)
