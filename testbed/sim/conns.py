"""The socklnd's connections on the in-memory fabric: which (node, NI, peer NI) pairs are
connected, and what LNet hears when one comes up or goes (``lnet_notify``).

Theory of operation: a pair is connected at its first delivery (``Fabric.deliver`` calls
``conn_up``: the "connection up" lines the daemon logs, ``socktables.py``); the accepting end
is in ``passive``, since a socklnd connection carries both ways (``established``). A pair's
end is told to its engine as ``PeerNotify`` (``notify``; ``reset`` when the peer's incarnation
changed: its hello carries it); ``peer_down`` is LNet's ``lnd_notify_peer_down``; a kill or an
NI's removal closes sockets (``hang_up``): the peers read EOF or a reset. ``Conns`` is a part
of the fabric (``Fabric.conns``), not a base of it (issue 29); the path verdicts that decide
whether a connection can be made are ``paths.py``'s.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from nodes.lnd import errmap
from nodes.lnd.conntable import TYPE_NAMES
from nodes.lnet.events import PeerNotify
from testbed.sim.socktables import INVERT, conn_types

if TYPE_CHECKING:
    from nodes.lnet.actions import Transmit
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.nid import NID
    from testbed.sim.fabric import Fabric
    from testbed.sim.sched import Scheduler


class Conns:
    """The socklnd's connections of every node on the fabric (``fab.conns``)."""

    def __init__(self, fab: Fabric, sched: Scheduler, engines: dict[str, LNetEngine]) -> None:
        self.fab, self.sched, self.engines = fab, sched, engines
        self.connected: set[tuple[str, NID, NID]] = set()  # (node, NI, peer NI) "connections"
        #: the same, at the accepting end: a connection carries both ways (``established``)
        self.passive: set[tuple[str, NID, NID]] = set()
        self.conn_cbs: dict[tuple[str, NID, NID], int] = {}  # pairs made by their node: when
        #: peers' connections to a killed node: reset (not refused) on their next use
        self.reset_pending: set[tuple[str, NID, NID]] = set()
        self._seen_inc: dict[tuple[str, NID], int] = {}  # (node, peer NID) -> incarnation

    def forget(self, name: str) -> None:
        """Node ``name`` left the fabric: the connections it made are no longer its."""
        self.conn_cbs = {k: v for k, v in self.conn_cbs.items() if k[0] != name}

    def conn_up(self, name: str, ni: NID, lpni: NID, dst: str) -> None:
        """``name``'s first delivery over (ni, lpni): unless it rides a connection ``dst``
        made, ``name`` connected (its ``conn_cb``, when: ``socktables.py``); ``dst`` holds
        the accepting end. Each socket's "connection up" line, as the daemon logs them
        (``ksocknal_connect``'s types in turn, the accepting side's inverted)."""
        key = (name, ni, lpni)
        if key not in self.passive:
            self.conn_cbs[key] = next(self.sched.seq)
            cpp = self.conns_per_peer(name, ni)
            now = self.sched.now
            for ctype in conn_types(cpp, ni == lpni):
                self.fab.log.append((now, name, f"connection up: {ni} -> {lpni} active "
                                            f"{TYPE_NAMES[ctype]}"))
                self.fab.log.append((now, dst, f"connection up: {lpni} -> {ni} passive "
                                           f"{TYPE_NAMES[INVERT[ctype]]}"))
        self.passive.add((dst, lpni, ni))

    def hang_up(self, name: str, gone: set[NID], whole: bool, after: float = 1.0) -> None:
        """Node ``name``'s kernel closed its sockets of NIDs ``gone`` (``whole``: every one;
        its process was killed) or its socklnd those of deleted NIs: each peer gets a FIN. A
        peer's tx before it reads it is reset (LOCAL_ERROR, ``fail``), else it reads EOF
        ``after`` latencies later (``_eof``): the FIN's flight when the socklnd closed them
        (``ksocknal_shutdown`` before LNet pushes the NI's removal, which arrives after it),
        2.5 after a kill (the round trip of a tx that meets the dead host, as on Mininet)."""
        closing = sorted((c for c in self.connected if c[2] in gone and c[0] != name),
                         key=lambda c: (c[0], str(c[1]), str(c[2])))
        self.reset_pending |= set(closing)
        self.connected = {c for c in self.connected if c[2] not in gone and
                          not (c[0] == name and (whole or c[1] in gone))}
        self.passive = {c for c in self.passive if c[2] not in gone and
                        not (c[0] == name and (whole or c[1] in gone))}
        for key in closing:
            self.sched.at(self.sched.now + after * self.fab.latency,
                          functools.partial(self._eof, key))

    def _eof(self, key: tuple[str, NID, NID]) -> None:
        """The peer read EOF on ``key`` (node, NI, peer NI), unless a tx met the reset first:
        ksocklnd closes it with a clean EOF's error (``errmap.close_error``: 0, LU-20023), so
        LNet is not told the peer NI died; its next send connects and is refused."""
        if key in self.reset_pending:
            self.reset_pending.discard(key)
            if key[0] in self.engines:
                self.fab.log.append((self.sched.now, key[0],
                                     f"socklnd: connection {key[1]} -> {key[2]} "
                                     "down: peer closed the connection"))
                if errmap.close_error(None) != 0:
                    self.connected.add(key)  # (so that notify reports it closed)
                    self.notify(key[0], key[1], key[2], False)

    def conns_per_peer(self, name: str, ni: NID) -> int:
        """``conns_per_peer`` of node ``name``'s NI ``ni`` (1 once it is gone)."""
        eng = self.engines.get(name)
        local = eng.ni_by_nid(ni) if eng is not None else None
        return max(1, local.conns_per_peer) if local is not None else 1

    def peer_down(self, name: str, lpni: NID) -> None:
        """``lnd_notify_peer_down``: the sender's conns to that NID are closed."""
        self.fab.record("notify_peer_down", name, lpni=str(lpni))
        self.fab.log.append((self.sched.now, name,
                             f"socklnd: LNet notified peer NI {lpni} dead"))
        self.connected = {c for c in self.connected if not (c[0] == name and c[2] == lpni)}
        self.passive = {c for c in self.passive if not (c[0] == name and c[2] == lpni)}

    def notify(self, name: str, ni: NID, lpni: NID, alive: bool, reset: bool = False) -> None:
        """The LND's ``lnet_notify`` on a "connection" change of (ni, lpni); ``reset``: the
        peer's incarnation changed since the last connection (it was restarted)."""
        key = (name, ni, lpni)
        if alive == (key in self.connected) and alive:
            return
        (self.connected.add if alive else self.connected.discard)(key)
        if not alive:
            self.passive.discard(key)
        extra = {"reset": True} if reset else {}
        self.fab.record("peer_notify", name, ni=str(ni), lpni=str(lpni), alive=alive, **extra)
        self.fab.apply(name, self.engines[name].handle(
            PeerNotify(ni=ni, nid=lpni, alive=alive, reset=reset), self.sched.now))

    def incarnation_changed(self, name: str, peer: NID, peer_node: str) -> bool:
        """Has ``peer``'s node a new incarnation since ``name`` last connected to it? (the
        socklnd's hello carries it; a changed one resets the peer NI's health history)"""
        inc = self.engines[peer_node].incarnation
        last = self._seen_inc.get((name, peer))
        self._seen_inc[(name, peer)] = inc
        return last is not None and last != inc

    def established(self, name: str, act: Transmit) -> bool:
        """Whether ``name`` has a connection to carry ``act``: its own, or one the peer
        opened to it (a socklnd connection carries both ways: ``ksocknal_create_conn``
        attaches a passive connection to the same peer NI the sends use)."""
        key = (name, act.ni, act.lpni)
        return key in self.connected or key in self.passive
