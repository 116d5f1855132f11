"""o2iblnd on the simulator: each node's ``O2ibLND`` joined by streams on the virtual clock.

Theory of operation: a ``Transmit`` from a NI of an ``o2ib`` net goes to the sending node's
``O2ibLND`` (nodes/o2ib/o2iblnd.py) instead of the fabric's socklnd model; the LND's outputs
are carried out here. ``Connect`` opens a stream (the emulated port 987) to the node owning
the peer NID, as the fabric's path verdict allows (``paths.py``): an unanswered path leaves
the CM REQ unanswered (the LND times the connect out), a refused or unreachable one fails
it at once. ``Write`` bytes arrive one link latency later, in order (a stream's arrivals
never overtake each other); bytes sent over a path that went down in flight, or to a killed
node, are lost, so the emulated QP's ACK timers fail what was posted (RETRY_EXC_ERR →
REMOTE_DROPPED), as on a fabric whose port or peer vanished. ``Deliver`` is the fabric's
delivery to the engine (a ``recv`` record), ``TxDone`` its completion, ``Notify`` its
``lnet_notify``. Each LND's deadline is one scheduled fabric call, re-asked after each call.
Only o2ib NIs take this path, so tcp topologies schedule exactly as before.
"""

from __future__ import annotations

import functools
from errno import ECONNREFUSED
from typing import TYPE_CHECKING

from nodes.lnet.events import MessageReceived
from nodes.lnet.nid import NID, O2IBLND
from nodes.o2ib import ibfaults, kibtx
from nodes.o2ib.kibtx import Close, Connect, Deliver, Notify, Output, TxDone, Write
from nodes.o2ib.o2iblnd import O2ibLND
from testbed.sim.paths import UNANSWERED

if TYPE_CHECKING:
    from nodes.lnet.actions import Transmit
    from testbed.sim.fabric import Fabric


def is_o2ib(nid: NID) -> bool:
    return nid.net.lnd == O2IBLND


class O2ibSim:
    """The o2iblnd of every node on fabric ``fab``."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.lnds: dict[str, O2ibLND] = {}
        self._engine_of: dict[str, object] = {}
        self._armed: dict[str, float] = {}
        #: (node, stream) -> (peer node, peer stream); the time its last bytes arrive
        self.ends: dict[tuple[str, int], tuple[str, int]] = {}
        self._last: dict[tuple[str, int], float] = {}
        self._lat: dict[tuple[str, int], float] = {}
        self._next_passive = 1 << 30

    def lnd(self, name: str) -> O2ibLND | None:
        """Node ``name``'s LND (a new one when its engine is new: a restarted node), with
        every o2ib NI of its engine started."""
        eng = self.fab.engines.get(name)
        if eng is None:
            return None
        lnd = self.lnds.get(name)
        if lnd is None or self._engine_of.get(name) is not eng:
            for key in [k for k in self.ends if lnd and k[0] == name]:  # a restarted
                self.ends.pop(self.ends.pop(key, key), None)  # node's QPs died: its new
            lnd = self.lnds[name] = O2ibLND(incarnation=eng.incarnation)  # LND reuses ids
            self._engine_of[name] = eng
        for ni in eng.local_nis():
            if is_o2ib(ni.nid) and ni.nid not in lnd.nets:  # with the NI's tunables
                t = ni.net.tunables                            # (nodes/dlc/glue.py)
                lnd.startup_ni(ni.nid, kibtx.O2ibTunables.for_ni(t.peer_credits, t.credits, {
                    **ni.lnd_o2ib, "conns_per_peer": ni.conns_per_peer}))
        return lnd

    # --- from the engine ------------------------------------------------------------------------
    def transmit(self, name: str, act: Transmit) -> None:
        lnd = self.lnd(name)
        if lnd is None:
            return
        self.run(name, lnd.send(act.tx_id, act.ni, act.lpni, act.hdr, bytes(act.payload),
                                self.fab.now))

    def port_down(self, nid: NID) -> None:
        """The port of ``nid`` lost its link: the owning node's LND stops its QPs."""
        name = self.fab.owner.get(nid)
        lnd = self.lnds.get(name) if name is not None else None
        if name is not None and lnd is not None:
            self.run(name, ibfaults.port_down(lnd, nid))

    def ib_fault(self, name: str, nid: NID, kind: str, params: dict[str, object],
                 on: bool) -> None:
        """An IB fault kind (faults/ibspec.py) on node ``name``'s o2ib NI ``nid``, switched on
        or off (``testbed/sim/netfaults.py``; ``port-down`` goes the link's way instead)."""
        lnd = self.lnd(name)
        if lnd is not None:
            self.run(name, ibfaults.apply(lnd, kind, nid, params, on, self.fab.now))

    # --- outputs ---------------------------------------------------------------------------------
    def run(self, name: str, outs: list[Output]) -> None:
        fab = self.fab
        for o in outs:
            if isinstance(o, Write):
                self._write(name, o)
            elif isinstance(o, TxDone):
                fab.complete(name, o.tx_id, o.rc, o.hstatus)
            elif isinstance(o, Deliver):
                self._deliver(name, o)
            elif isinstance(o, Connect):
                self._connect(name, o)
            elif isinstance(o, Close):
                self.ends.pop((name, o.stream), None)
                self._lat.pop((name, o.stream), None)
                self._last.pop((name, o.stream), None)
            elif isinstance(o, Notify) and name in fab.engines:
                fab.notify(name, o.ni, o.peer, o.alive)
        self._rearm(name)

    def _deliver(self, name: str, o: Deliver) -> None:
        fab = self.fab
        drv = fab.drivers.get(name)
        if drv is None:
            return
        fab.record("recv", name, type=o.hdr.type.name, ni=str(o.ni), lpni=str(o.peer),
                   src=str(o.hdr.src_nid), dst=str(o.hdr.dest_nid))
        drv.receive(MessageReceived(ni=o.ni, peer_nid=o.peer, hdr=o.hdr, payload=o.payload))

    def _connect(self, name: str, o: Connect) -> None:
        """A stream to the peer NID's node, as the path verdict allows."""
        fab = self.fab
        link = fab.link(o.ni, o.peer)
        lat = link.latency
        if link.rc in UNANSWERED:
            return  # the CM REQ is never answered: the LND's connreq timeout
        if link.rc or link.dst is None or o.peer in fab.dead:
            rc = link.rc or -ECONNREFUSED
            fab.at(fab.now + lat, functools.partial(self._failed, name, o.stream, rc))
            return
        dst = link.dst
        ps = self._next_passive
        self._next_passive += 1
        self.ends[(name, o.stream)] = (dst, ps)
        self.ends[(dst, ps)] = (name, o.stream)
        self._lat[(name, o.stream)] = self._lat[(dst, ps)] = lat
        fab.at(fab.now + lat, functools.partial(self._accept, dst, ps))
        fab.at(fab.now + 2 * lat, functools.partial(self._connected, name, o.stream))

    def _failed(self, name: str, stream: int, rc: int) -> None:
        lnd = self.lnds.get(name)
        if lnd is not None:
            self.run(name, lnd.connect_failed(stream, rc, self.fab.now))

    def _accept(self, name: str, stream: int) -> None:
        lnd = self.lnd(name)
        if lnd is not None:
            self.run(name, lnd.accept(stream, self.fab.now))

    def _connected(self, name: str, stream: int) -> None:
        lnd = self.lnds.get(name)
        if lnd is not None and name in self.fab.engines:
            self.run(name, lnd.connected(stream, self.fab.now))

    def _write(self, name: str, o: Write) -> None:
        fab = self.fab
        key = (name, o.stream)
        peer = self.ends.get(key)
        if peer is None:
            return
        t = max(fab.now + self._lat.get(key, fab.latency), self._last.get(key, 0.0))
        self._last[key] = t
        data = o.data + bytes(o.tail) if o.tail else o.data  # head + large body, one arrival
        fab.at(t, functools.partial(self._arrive, name, peer, data))

    def _arrive(self, src: str, peer: tuple[str, int], data: bytes) -> None:
        """Bytes reach ``peer`` unless the path failed in flight or its node is gone."""
        fab = self.fab
        name, stream = peer
        lnd = self.lnds.get(name)
        back = self.ends.get(peer)
        if lnd is None or name not in fab.engines or back is None:
            return
        src_lnd = self.lnds.get(src)
        c = src_lnd.streams.get(back[1]) if src_lnd is not None else None
        if c is not None and fab.link(c.ni, c.peer).rc:
            return  # lost on a path that went down
        self.run(name, lnd.receive(stream, data, fab.now))

    # --- the LND's clock --------------------------------------------------------------------------
    def _rearm(self, name: str) -> None:
        lnd = self.lnds.get(name)
        d = lnd.next_deadline() if lnd is not None else None
        if d is None or self._armed.get(name, float("inf")) <= d:
            return
        self._armed[name] = d
        self.fab.at(max(d, self.fab.now), functools.partial(self._timer, name, d))

    def _timer(self, name: str, d: float) -> None:
        if self._armed.get(name) != d:
            return
        del self._armed[name]
        lnd = self.lnds.get(name)
        if lnd is not None and name in self.fab.engines:
            self.run(name, lnd.handle_timer(self.fab.now))
