"""Path verdicts of the in-memory fabric: what a Linux host does with a TCP connect or a write
to a peer NID, measured on Mininet's veths (issue 17, resend-extra on Mininet).

Theory of operation: ``path_error(a, b)`` is the errno a socklnd NI ``a`` meets sending to
NID ``b`` now, decided from link states, segments and hosts (``Fabric`` caches it per pair in
``Link``); ``Paths`` turns the two slow verdicts into timed outcomes on the virtual
clock. ``Paths`` is one of the fabric's parts (``Fabric.paths``), not its base: it owns the
wiring the verdicts read (segments, hosts, link states) and the writes in flight (held
and stalled); the fabric's own moves (deliver, fail, complete) it calls back through
``Wire``, the small typed interface the fabric implements (public members only: no part
reaches into another's private state, ``tests/unit/test_layout_sim2.py``), the connections
(``conns.py``) on ``Conns``. Measured with a real socket
bound to the NI's address in a network namespace (bridge + veth per segment,
``arp_ignore=1``/``arp_announce=2``, Linux 6.18, defaults ``mcast_solicit=3``, ``retrans_time=1 s``,
``ignore_routes_with_linkdown=0``); a carrier fault is ``ip link set IF down`` in the node,
which removes the interface's connected route:

* the sender's own interface toward ``b``'s segment down (no route): ``connect`` fails at
  once with ENETUNREACH -> -ENETUNREACH, REMOTE_DROPPED after the latency (our socklnd
  connects in a task); from an NI whose own link is down the socklnd fails the tx with
  -ENETDOWN (its link watcher closed the NI's conns), at once;
* ``b``'s interface down (``b``'s host up): nobody answers ARP on ``b``'s segment; with no
  usable neighbour entry the kernel gives up after ``mcast_solicit x retrans_time`` and
  reports EHOSTUNREACH to the connect (measured 3.06-3.08 s, also from a FAILED entry), so
  the tx fails with -EHOSTUNREACH, REMOTE_DROPPED (``ksocknal_txlist_done``) at
  ``ARP_FAIL`` -- unless the socklnd's connect deadline (the NI's ``lnd_timeout``) comes
  first or at the same time (3 s with retry_count 2 and transaction_timeout 10), then
  -ETIMEDOUT, LOCAL_TIMEOUT (``errmap.connect_failure``, seed 003);
* ``b``'s host cannot answer back (its interface on the sender's segment is down: the
  SYN-ACK has no route): the connect hangs until the socklnd's deadline, -ETIMEDOUT,
  LOCAL_TIMEOUT;
* on an established connection (``connected``) neither case raises anything for a while:
  each write lands in the socket buffer (the tx completes OK, its bytes never arrive:
  measured 17 s of successful 64-byte writes before SO_ERROR showed EHOSTUNREACH), and the
  socklnd closes the connection once its queue made no progress for the NI's LND timeout
  (``ksocknal_find_timed_out_conn``): ``lnet_notify`` dead.

* the sender's host loses its route to ``b`` (its interface toward ``b``'s segment set down,
  no NI on it: an NI's carrier loss closes such connections first, ``close_routed``)
  under an *established* connection: nothing fails either (measured in two namespaces, a
  socket bound to the other interface's address: every write succeeded, SO_ERROR stayed 0,
  a fresh connect got ENETUNREACH at once): the writes are held in the socket and TCP
  retransmits them once the route is back (``TCP_RETRANSMITS``: they arrived 0.6 s after
  the link came back, at the retransmission 6.2 s after the first held write). The tx
  completes OK when written (``held``); the message arrives at the first retransmission
  that finds the route back, unless the socklnd closed the connection first, its queue
  having made no progress for the NI's LND timeout (then its bytes are lost).

A connect whose path heals before its outcome gets through at the next ARP probe or SYN
retransmission (``RETRIES``): on Mininet a SYN sent while the peer's link was down connected
one second later, once the link was back. Not modelled: a neighbour entry still REACHABLE
from recent traffic (then a connect hangs until the deadline even when ``ARP_FAIL`` is
shorter; it only matters with an LND timeout above 3 s).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, Protocol

from nodes.lnet.errors import ENETDOWN, ENETUNREACH
from nodes.lnet.hstatus import HStatus
from testbed.sim.watched import Watched

if TYPE_CHECKING:
    from nodes.lnet.actions import Transmit
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.nid import NID
    from testbed.sim.conns import Conns
    from testbed.sim.links import Link
    from testbed.sim.sched import Scheduler

#: Linux's neighbour resolution gives up after mcast_solicit (3) probes retrans_time (1 s)
#: apart: an unanswered ARP fails the connect with EHOSTUNREACH this long after it started
ARP_FAIL = 3.0
#: seconds after a connect started when it tries again: ARP probes retrans_time (1 s) apart,
#: SYN retransmissions from TCP_TIMEOUT_INIT (1 s), doubling; a path healed by then carries it
RETRIES = (1.0, 2.0, 3.0, 7.0, 15.0, 31.0, 63.0)
#: seconds after the first held write when TCP retransmits an established connection's
#: queue (RTO from its 200 ms floor on a fast link, doubling), measured (module doc)
TCP_RETRANSMITS = (0.2, 0.6, 1.4, 3.0, 6.2, 12.6, 25.4, 51.0, 102.2, 204.6)
#: the peer is on the segment but does not answer ARP (its interface is down)
EHOSTUNREACH = -errno.EHOSTUNREACH
#: the peer cannot send back (no route for its SYN-ACK): only the connect deadline ends it
NO_WAY_BACK = -errno.ETIMEDOUT
#: verdicts whose failure is not known at once: a connect or write just sees no answer
UNANSWERED = frozenset({EHOSTUNREACH, NO_WAY_BACK})
#: the socklnd's timeout of an NI the fabric cannot ask (its node is gone)
DEFAULT_LND_TIMEOUT = 50.0


class Wire(Protocol):
    """What ``Paths`` asks of the fabric it is a part of (``Fabric`` implements it): the
    pair's current decision, the path cache's invalidation, the event log, and the fabric's
    own moves on one message, which a timed outcome ends in."""

    def link(self, ni: NID, lpni: NID) -> Link: ...

    def changed(self) -> None: ...

    def record(self, kind: str, node: str, /, **fields: Any) -> None: ...

    def deliver(self, name: str, act: Transmit, link: Link | None = None) -> None:
        """``act`` arrives at its peer (or fails as the path now says)."""

    def fail(self, name: str, act: Transmit, rc: int,
             hstatus: HStatus | None = None) -> None:
        """``act``'s tx fails as the socklnd fails it (``errmap.py``)."""

    def complete(self, name: str, tx_id: int, rc: int, hstatus: HStatus) -> None:
        """Node ``name``'s tx ``tx_id`` completes (``TxCompleted``)."""


class Paths:
    """The fabric's path verdicts and the timed outcome of an unanswered send (a part of
    ``Fabric``: ``fab.paths``)."""

    def __init__(self, fab: Wire, sched: Scheduler, conns: Conns, owner: dict[NID, str],
                 engines: dict[str, LNetEngine]) -> None:
        self.fab, self.sched, self.conns, self.owner, self.engines = \
            fab, sched, conns, owner, engines
        self.down = Watched(fab.changed)
        #: NIDs of killed nodes: connecting is refused, an established connection is reset
        self.dead = Watched(fab.changed)
        #: NIs whose LND reported a simulated link down (``lctl net_ni_down``): their own
        #: sends fail at once with -ENETDOWN while peers still reach them
        self.lnd_down = Watched(fab.changed)
        self.segment: dict[NID, str] = {}  # L2 segment per NID; unknown NIDs reach everyone
        self.host: dict[NID, str] = {}  # host of each interface NID (default: its owner)
        self._host_seg: dict[tuple[str, str], list[NID]] = {}  # (host, segment) -> its NIDs
        self.stalled: set[tuple[str, NID, NID]] = set()  # conns whose close is pending
        self._held: dict[tuple[str, NID, NID], list[Transmit]] = {}  # (``held``)
        self.written: set[int] = set()  # txs completed when written (``held``)

    def add_interface(self, nid: NID, segment: str, host: str) -> None:
        """Interface ``nid`` of ``host`` is on L2 ``segment`` (whether or not a NI is on it)."""
        self.segment[nid] = segment
        self.host[nid] = host
        self._host_seg.setdefault((host, segment), []).append(nid)
        self.fab.changed()

    def revive(self, name: str, nids: list[NID]) -> None:
        """Node ``name``'s NIDs listen again (a restarted daemon; ``add`` its new engine)."""
        for nid in nids:
            self.dead.discard(nid)

    def set_link(self, nid: NID, up: bool, iface: str | None = None,
                 by: str | None = None) -> None:
        """Link state of the interface carrying ``nid`` (a ``link_up``/``link_down`` event,
        as the Mininet supervisor logs it)."""
        (self.down.discard if up else self.down.add)(nid)
        conns = self.conns
        if not up and conns.passive:  # its socklnd closes the NI's connections
            conns.passive = {c for c in conns.passive if c[1] != nid}
        node = self.host.get(nid) or self.owner.get(nid, "?")
        extra: dict[str, str] = {"iface": iface} if iface is not None else {}
        if by is not None:
            extra["by"] = by
        self.fab.record(f"link_{'up' if up else 'down'}", node, nid=str(nid), **extra)

    def path_error(self, a: NID, b: NID) -> int:
        """0 if NI ``a`` can reach NID ``b`` now, else the errno the socklnd meets (module
        doc): -ENETDOWN (``a``'s own link is down), -ENETUNREACH (no route on ``a``'s host,
        ``b`` owned by no engine, or ``b`` down without a segment: engine-level fabrics that
        model no L2), -EHOSTUNREACH (``b``'s interface down: no ARP answer),
        -ECONNREFUSED (``b``'s node killed), ``NO_WAY_BACK`` (``b``'s host has no up
        interface on ``a``'s segment). Across segments the sending host routes (weak host
        model: ``fabric.py``)."""
        if self.lnd_down and a in self.lnd_down:  # the socklnd's simulated link down
            return -ENETDOWN
        down = self.down
        if down and a in down:  # (an empty set still hashes: NID hashing is not free)
            return -ENETDOWN
        sa, sb = self.segment.get(a), self.segment.get(b)
        cross = sa is not None and sb is not None and sa != sb
        if cross and not self._host_up_on(a, sb):  # type: ignore[arg-type]
            return -ENETUNREACH
        if down and b in down:  # (a NID without a segment has no L2 to model: unreachable)
            return EHOSTUNREACH if sb is not None else -ENETUNREACH
        # a socklnd connection needs both ways: the SYN-ACK, then every ACK/REPLY over it
        if cross and not self._host_up_on(b, sa):  # type: ignore[arg-type]
            return NO_WAY_BACK
        if self.dead and b in self.dead:  # its host is up, nobody listens on port 988
            return -errno.ECONNREFUSED
        if b not in self.owner:
            return -ENETUNREACH
        return 0

    def _host_up_on(self, nid: NID, segment: str) -> bool:
        """Whether ``nid``'s host has an interface up on ``segment`` (its connected route)."""
        host = self.host.get(nid) or self.owner.get(nid) or ""
        return any(n not in self.down for n in self._host_seg.get((host, segment), ()))

    def reachable(self, a: NID, b: NID) -> bool:
        """``path_error(a, b) == 0``."""
        return self.path_error(a, b) == 0

    # ------------------------------------------------------------------ timed outcomes
    def routed_pair(self, act: Transmit) -> bool:
        """Whether both ends sit on modelled segments, so -ENETUNREACH is the sending host's
        lost route (Linux holds the connection's writes, ``Paths.held``); a fabric without
        segments (the engine-level unit fabrics: no L2, no routing table) uses -ENETUNREACH
        for a peer that is simply gone, and its sends fail as before explore2's fix."""
        segment = self.segment
        return act.ni in segment and act.lpni in segment

    def _lnd_timeout(self, name: str, ni: NID) -> float:
        eng = self.engines.get(name)
        nis = eng.ni_by_nid(ni) if eng is not None else None
        return float(nis.lnd_timeout) if nis is not None else DEFAULT_LND_TIMEOUT

    def unanswered(self, name: str, act: Transmit, rc: int, delay: float) -> None:
        """A send whose peer does not answer (``rc`` in ``UNANSWERED``), ``delay`` seconds
        from now: on an established connection the write completes OK and is lost; a
        connect fails at ``ARP_FAIL`` (-EHOSTUNREACH) or at the NI's deadline (module doc)."""
        if self.conns.established(name, act):
            self.sched.at(self.sched.now + delay, lambda: self.lost(name, act))
            return
        timeout = self._lnd_timeout(name, act.ni)
        if rc == EHOSTUNREACH and timeout > ARP_FAIL:
            at, fail = ARP_FAIL, EHOSTUNREACH
        else:
            at, fail = timeout, -errno.ETIMEDOUT
        start, done = self.sched.now + delay, [False]
        for r in RETRIES:
            if r >= at:
                break
            self.sched.at(start + r, lambda: self._connect_retry(name, act, done))
        self.sched.at(start + at, lambda: self._connect_outcome(name, act, fail, done))

    def _connect_retry(self, name: str, act: Transmit, done: list[bool]) -> None:
        """An ARP probe or a SYN goes out again: delivered if the path healed meanwhile, or
        failed now if the peer answers with a refusal (its host back, nobody on the port:
        RST) or the sender lost its route."""
        if done[0]:
            return
        rc = self.fab.link(act.ni, act.lpni).rc
        if rc in UNANSWERED:
            return
        done[0] = True
        if rc == 0:
            self.fab.deliver(name, act)
        else:
            self.fab.fail(name, act, rc)

    def _connect_outcome(self, name: str, act: Transmit, rc: int, done: list[bool]) -> None:
        """The unanswered connect's time is up: delivered if the path healed just now, else
        failed with ``rc``."""
        if done[0]:
            return
        done[0] = True
        if self.fab.link(act.ni, act.lpni).rc == 0:
            self.fab.deliver(name, act)
            return
        self.fab.fail(name, act, rc)

    def lost(self, name: str, act: Transmit) -> None:
        """A write on an established connection whose peer no longer answers: the tx is done
        (its bytes are in the socket buffer); the connection is closed once its queue made
        no progress for the LND timeout."""
        if name not in self.engines:
            return
        key = (name, act.ni, act.lpni)
        self.fab.complete(name, act.tx_id, 0, HStatus.OK)
        if key not in self.stalled:
            self.stalled.add(key)
            self.sched.at(self.sched.now + self._lnd_timeout(name, act.ni),
                          lambda: self._stall(key))

    def held(self, name: str, act: Transmit, delay: float) -> None:
        """A write on an established connection whose host has no route to the peer now:
        taken by the socket (the tx completes OK after ``delay``), sent by TCP at the first
        retransmission that finds the route back (module doc), or lost with the connection
        when its queue made no progress for the LND timeout (``_stall``)."""
        key = (name, act.ni, act.lpni)
        queue = self._held.get(key)
        self.written.add(act.tx_id)
        self.sched.at(self.sched.now + delay,
                      lambda: self.fab.complete(name, act.tx_id, 0, HStatus.OK))
        if queue is not None:
            queue.append(act)
            return
        self._held[key] = [act]
        start = self.sched.now + delay
        for r in TCP_RETRANSMITS:
            self.sched.at(start + r, lambda: self._retransmit(key))
        if key not in self.stalled:
            self.stalled.add(key)
            self.sched.at(start + self._lnd_timeout(name, act.ni), lambda: self._stall(key))

    def close_routed(self, name: str, nid: NID) -> None:
        """Carrier lost under ``name``'s NI ``nid``: the node daemon's link watcher closes the
        NI's connections and those to peer NIDs on the interface's segment (``SockLND.
        link_down`` with the interface's subnet; a deliberate difference, docs/differences.md
        "socklnd on carrier loss"), silently (no ``lnet_notify``), their held writes with
        them, so the next send to such a peer connects afresh: with no route, -ENETUNREACH
        at once. Measured on Mininet (c1's eth1 down under an established connection from
        its lan0 NI to s1's lan1 NID: every attempt of the next GET ended -ENETUNREACH,
        REMOTE_DROPPED within 0.3 ms; test_sim.py test_cross_segment_send_is_routed_by_the_host);
        writes are held (``held``) only where no NI's carrier loss closed the connection."""
        seg = self.segment.get(nid)

        def gone(c: tuple[str, NID, NID]) -> bool:
            return c[0] == name and (c[1] == nid or (seg is not None
                                                     and self.segment.get(c[2]) == seg))

        conns = self.conns
        conns.connected = {c for c in conns.connected if not gone(c)}
        conns.passive = {c for c in conns.passive if not gone(c)}
        for key in [k for k in self._held if gone(k)]:
            for act in self._held.pop(key):
                self.written.discard(act.tx_id)
            self.stalled.discard(key)

    def _retransmit(self, key: tuple[str, NID, NID]) -> None:
        """TCP sends the held queue again: delivered, in order, if the route is back."""
        queue = self._held.get(key)
        if not queue or self.fab.link(key[1], key[2]).rc:
            return
        del self._held[key]
        for act in queue:
            self.fab.deliver(key[0], act)

    def _stall(self, key: tuple[str, NID, NID]) -> None:
        """``ksocknal_find_timed_out_conn``: unacknowledged data for the timeout closes the
        connection (``lnet_notify`` dead), unless a write got through since (``deliver``
        takes the key out of ``stalled``)."""
        if key not in self.stalled:
            return
        self.stalled.discard(key)
        for act in self._held.pop(key, ()):  # the connection's queue goes with it
            self.written.discard(act.tx_id)
        name, ni, lpni = key
        if name in self.engines:
            self.conns.connected.add(key)  # (so that notify reports it closed)
            self.conns.notify(name, ni, lpni, False)

    def fail_at(self, t: float, name: str, act: Transmit, rc: int,
                hstatus: HStatus | None = None) -> None:
        """``fail(name, act, rc, hstatus)`` at ``t``. (A lambda in its own method: compiled,
        a function holding a lambda allocates the lambda's environment on every call, here
        once per message if the fabric's ``transmit`` held it.)"""
        self.sched.at(t, lambda: self.fab.fail(name, act, rc, hstatus))
