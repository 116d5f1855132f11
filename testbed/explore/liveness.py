"""The liveness phase's expected end state, read from lnetctl on every node (both backends).

Theory of operation (issue 17 item 1; the bound and what it promises: ``bound.py``): after the
heal, ``wait_whole`` looks every ``POLL`` seconds at what real users would ask every live node
(``net show -v 3``, ``peer show -v 3``, ``route show -v``, ``debug recovery --peer``; on the sim
the same values straight from the engine) until nothing is missing or the bound has passed,
then sends the probes, and lists each way LNet is not whole:

* ``health``: a local NI below 1000 (local NIs recover without limit, spec §3.5);
* ``peer_health``: a peer NI below 1000 that LNet still owes a recovery: it is on the recovery
  queue (not recovered within the bound), or it is off the queue although it was heard from
  since its node last started (on the sim the engine's ``lpni_last_alive``; on Mininet
  ``recv`` events, when the log has them) and not aged out (``recovery_limit`` 0, or heard from
  within the limit). Off the queue and never heard from, or aged out, it may stay below 1000
  (spec §3.5, §11.7); without ``recv`` events (Mininet) an off-queue peer NI is given that
  benefit. A peer NI of one of the node's own NIDs (a recovery ping to its own NID goes
  through the LND) is owed nothing off the queue: LNet keeps its own interfaces out of peer
  NI recovery, their local NIs recover instead (lib-msg.c ``lnet_health_check``), and only a
  response timeout, which blames the next hop by NID, lowers it (explore seed 261). Nor is a
  peer NI lowered before it was first heard from and neither failed nor moved since: LNet
  never queued it (``_Evidence.never_queued``, explore seed 628);
* ``route``: a route not up;
* ``probe``: a fresh PUT over a workload pair that did not complete with its ACK (with
  ``recovery_limit`` > 0, two in a row: a router drops the first message it forwards to an
  aged-out peer NI, which stays below 1000 until heard from; likewise when the log shows a
  router dropped a message of the first probe's exchange, to the target or back to the
  sender, for a peer NI it held down, ``router_dropped``);
* ``sensitivity0``: with ``health_sensitivity`` 0 on a node, any health change on it in the
  whole run (spec §3.1: nothing moves).

Every problem carries the events that show it (the NI's last health changes, the route's last
state changes) and is printed with the bound.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from testbed.explore.bound import Bound
from testbed.explore.replay import Replay
from testbed.observe.checktypes import Item
from testbed.observe.pytest_check import events_of

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
HEALTH_KINDS = ("ni_health", "lpni_health")


@dataclass
class Problem:
    what: str
    text: str
    proof: list[Item] = field(default_factory=list)


def _view(replay: Replay, node: str, command: str) -> Any:
    res = replay.tb.node(node).lnetctl(command)
    if res.rc != 0:
        return None
    return yaml.load(res.out, Loader=_Loader) if res.out.strip() else None


@dataclass
class NodeState:
    """What lnetctl shows of one node's recovery: health per local NI and peer NI, the peer
    NIs on the recovery queue, each route's state."""

    local: dict[str, Any] = field(default_factory=dict)
    peers: dict[str, Any] = field(default_factory=dict)
    queued: set[str] = field(default_factory=set)
    last_alive: dict[str, float] = field(default_factory=dict)  # sim only: lpni_last_alive
    routes: dict[tuple[str, str], Any] = field(default_factory=dict)


def node_state(replay: Replay, node: str) -> NodeState:
    """``net show -v 3``, ``peer show -v 3``, ``debug recovery --peer``, ``route show -v``.

    On the sim the same values are read from the engine directly (what those views print),
    which is what makes polling every few virtual seconds cheap; on Mininet through lnetctl."""
    st = NodeState()
    if replay.sim:
        eng = replay.tb.runtimes[node].engine
        st.local = {str(ni.nid): ni.healthv for ni in eng.local_nis()}
        st.peers = {str(p.nid): p.healthv for p in eng.peers.by_nid.values()}
        st.queued = {str(p.nid) for p in eng.recovery.lpni_queue}
        st.last_alive = {str(p.nid): p.last_alive for p in eng.peers.by_nid.values()}
        for r in eng.router.route_show(verbose=1)["route"]:
            st.routes[(str(r["net"]), str(r["gateway"]))] = r["state"]
        return st
    for net in (_view(replay, node, "net show -v 3") or {}).get("net") or []:
        if net.get("net type") != "lo":
            for ni in net.get("local NI(s)") or []:
                st.local[str(ni.get("nid"))] = (ni.get("health stats") or {}).get(
                    "health value")
    for peer in (_view(replay, node, "peer show -v 3") or {}).get("peer") or []:
        for lpni in peer.get("peer ni") or []:
            st.peers[str(lpni.get("nid"))] = (lpni.get("health stats") or {}).get(
                "health value")
    rec = (_view(replay, node, "debug recovery --peer") or {}).get("Peer NI recovery") or {}
    st.queued = {str(v) for v in rec.values()}
    for r in (_view(replay, node, "route show -v") or {}).get("route") or []:
        st.routes[(str(r.get("net")), str(r.get("gateway")))] = r.get("state")
    return st


class _Evidence:
    """What the event log says per (node, NID): health changes, last receive, routes."""

    def __init__(self) -> None:
        self.health: dict[tuple[str, str], list[Item]] = {}
        self.heard: dict[tuple[str, str], float] = {}
        self.routes: dict[tuple[str, str, str], list[Item]] = {}
        self.has_recv = False
        self.seen = 0
        #: per (node, NID) in the node's current incarnation: the index of the first receive,
        #: and of the last event at which LNet tried to queue the peer NI for recovery (a
        #: remote failure's ``lpni_error``, or a health change: ``_never_queued``)
        self.first_heard: dict[tuple[str, str], int] = {}
        self.last_try: dict[tuple[str, str], int] = {}

    def feed(self, events: Sequence[dict[str, Any]]) -> None:
        """Read the events not read yet (the log only grows)."""
        for i in range(self.seen, len(events)):
            ev = events[i]
            kind, node = ev.get("kind"), str(ev.get("node"))
            if kind in HEALTH_KINDS:
                self.health.setdefault((node, str(ev.get("nid"))), []).append((i, ev))
            if kind in ("lpni_health", "lpni_error"):
                self.last_try[(node, str(ev.get("nid")))] = i
            elif kind in ("node_started", "node_restarted", "node_died"):
                # a new process knows none of its peers: heard-from starts again (its peer
                # NIs are new objects, lpni_last_alive 0 until a message arrives)
                self.heard = {k: t for k, t in self.heard.items() if k[0] != node}
                self.first_heard = {k: v for k, v in self.first_heard.items() if k[0] != node}
                self.last_try = {k: v for k, v in self.last_try.items() if k[0] != node}
            elif kind == "recv":
                self.has_recv = True
                self.heard[(node, str(ev.get("peer")))] = float(ev["t"])
                self.first_heard.setdefault((node, str(ev.get("peer"))), i)
            elif kind == "route_state":
                key = (node, str(ev.get("net")), str(ev.get("gateway")))
                self.routes.setdefault(key, []).append((i, ev))
        self.seen = len(events)

    def last_health(self, node: str, nid: str) -> list[Item]:
        return self.health.get((node, nid), [])[-3:]

    def never_queued(self, node: str, nid: str) -> bool:
        """The peer NI's health last moved (or it last failed) before it was first heard
        from: LNet never queued it and nothing since would (explore seed 628).

        ``lnet_peer_ni_add_to_recoveryq_locked`` (peer.c) refuses a peer NI whose
        ``lpni_last_alive`` is 0, and is only tried at a remote failure
        (``lnet_handle_remote_failure_locked``, which logs ``lpni_error``), at a received
        message's OK health check (which moves its health: ``lpni_health``), at a manual
        health set (``lpni_health``) and for what is on the queue already (lib-msg.c
        ``lnet_health_check``, lib-move.c ``lnet_recover_peer_nis``). A receive alone
        (``lnet_parse`` sets last_alive) does not try: a GET whose REPLY then fails is health
        checked once, on its tx side (committed for both), as a local failure. So a peer NI
        lowered before it was first heard from, and neither failing nor moving since, stays
        below 1000 off the queue in real LNet too."""
        key = (node, nid)
        tried, first = self.last_try.get(key), self.first_heard.get(key)
        return tried is not None and first is not None and tried < first


#: virtual (sim) or wall (Mininet) seconds between two looks at the nodes
POLL = 5.0


def wait_whole(replay: Replay, bound: Bound, tunables: dict[str, dict[str, int]],
               probes: Sequence[tuple[str, str]]) -> list[Problem]:
    """After the heal: let ``bound.settle`` pass, then look at every node each ``POLL``
    seconds until it is whole or ``bound.total`` has passed; then send the probes. Returns
    every problem (module doc); [] if LNet is whole within the bound."""
    ev = _Evidence()
    t_end = float(replay.tb.now) + bound.total
    replay.advance(bound.settle)
    while True:
        ev.feed(events_of(replay.tb))
        found = _state_problems(replay, tunables, ev)
        now = float(replay.tb.now)
        if not found or now >= t_end:
            break
        replay.advance(min(POLL, t_end - now))
    # recovery_limit > 0: an aged-out peer NI stays below 1000 until it is heard from, and a
    # router drops what it forwards to it (router_sensitivity_percentage 100,
    # lnet_is_peer_ni_alive); its own send then brings it back: one more probe may be owed
    aged = any(v.get("recovery_limit", 0) > 0 for v in tunables.values())
    for node, nid in probes:
        if replay.alive(node):
            start = len(events_of(replay.tb))
            ok, what = replay.probe(node, nid, float(bound.settle))
            log = events_of(replay.tb)
            if not ok and (aged or router_dropped(log[start:], nid, own_nids(log, node))):
                ok, what = replay.probe(node, nid, float(bound.settle))
                why = "recovery_limit > 0" if aged else "a router dropped the first"
                what = f"twice ({why}): {what}"
            if not ok:
                found.append(Problem("probe", f"a new PUT from {node} to {nid} did not "
                                     f"complete: {what}"))
    ev.feed(events_of(replay.tb))
    for node in replay.tb.nodes:
        if tunables.get(node, {}).get("health_sensitivity", 1) == 0:
            moved = [item for (n, _nid), items in ev.health.items() if n == node
                     for item in items]
            if moved:
                found.append(Problem("sensitivity0", f"{node}: health_sensitivity is 0 but "
                                     f"{len(moved)} health value change(s) happened",
                                     moved[:3]))
    return found


def router_dropped(events: Sequence[dict[str, Any]], nid: str,
                   back_to: Collection[str] = ()) -> bool:
    """Whether a router dropped a message of the probe's exchange because it holds a peer NI
    down: one it forwarded to ``nid``, or one coming back to the sender (``back_to``, its
    own NIDs: the REPLY of the discovery ping the probe waits on, or the probe's ACK).
    lib-move.c ``lnet_check_message_drop``: a routed message to a peer NI whose
    ``lpni_ns_status`` is not UP is dropped with REMOTE_DROPPED, and a single-NI peer gets no
    resend, lib-msg.c ``lnet_health_check``. The status is only refreshed by traffic from
    that NI, a push or the LND's ``lnet_notify``: a DOWN its LND notified during the faults
    (``recovery_limit`` 0, health still 1000, so not on the recovery queue) outlives the heal
    until this drop sends the NI into recovery, whose ping brings it back (explore seed 758;
    seeds 304, 625, 737, 826 for the sender's NI on the way back, with discovery 0 the
    probe waited on a discovery ping whose REPLY r2 dropped). The originator only sees its
    ping or ACK never come: one more probe is owed."""
    want = {nid, *back_to}
    return any(ev.get("kind") == "msg" and ev.get("forwarded") is True
               and ev.get("dropped") == "REMOTE_DROPPED"
               and (ev.get("lpni") in want or ev.get("dst") in want)
               for ev in events)


def own_nids(events: Sequence[dict[str, Any]], node: str) -> set[str]:
    """The NIDs of ``node``'s NIs, from its ``ni_add`` events."""
    return {str(ev.get("nid")) for ev in events
            if ev.get("kind") == "ni_add" and ev.get("node") == node}


def _state_problems(replay: Replay, tunables: dict[str, dict[str, int]],
                    ev: _Evidence) -> list[Problem]:
    out: list[Problem] = []
    now = float(replay.tb.now)
    for node in replay.tb.nodes:
        if not replay.alive(node):
            out.append(Problem("node", f"{node} is not running after the heal"))
            continue
        st = node_state(replay, node)
        for nid, value in st.local.items():
            if value != 1000:
                out.append(Problem("health", f"{node}: local NI {nid} health {value}, not "
                                   "back to 1000", ev.last_health(node, nid)))
        limit = int(tunables.get(node, {}).get("recovery_limit", 0))
        for nid, value in st.peers.items():
            if value == 1000:
                continue
            heard = st.last_alive.get(nid) if st.last_alive else ev.heard.get((node, nid))
            why = _owed(nid in st.queued, heard or None, ev.has_recv or bool(st.last_alive),
                        limit, now, own=nid in st.local)
            if why and nid not in st.queued and ev.never_queued(node, nid):
                why = ""  # lowered before it was first heard from, untried since
            if why:
                out.append(Problem("peer_health", f"{node}: peer NI {nid} health {value}, "
                                   f"not back to 1000: {why}", ev.last_health(node, nid)))
        for (net, gw), state in st.routes.items():
            if state != "up":
                out.append(Problem("route", f"{node}: route to {net} via {gw} is {state}",
                                   ev.routes.get((node, net, gw), [])[-3:]))
    return out


def _owed(queued: bool, heard: float | None, has_recv: bool, limit: int, now: float, *,
          own: bool = False) -> str:
    """Why LNet still owes this peer NI a recovery ('' if it does not); ``own``: its NID is
    one of the node's own (module doc)."""
    if queued:
        return "still on the recovery queue"
    if own:
        return ""  # LNet keeps its own interfaces out of peer NI recovery
    if not has_recv or heard is None:
        return ""  # never heard from (or no receive events to tell): not eligible
    if limit and now - heard > limit:
        return ""  # aged out (recovery_limit)
    return (f"off the recovery queue although heard from at t={heard:g}"
            + (f", within recovery_limit {limit}" if limit else " (recovery_limit 0)"))
