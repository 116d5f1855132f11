"""The local side of one node: nets and their NIs, added and removed (spec §1.2; cfg-020,
cfg-040; api-ni.c ``lnet_dyn_add_ni``/``lnet_dyn_del_ni``).

Theory of operation: ``LocalNets`` owns ``nets`` (net -> ``LNetNet``, in the order they were
added, the loopback net first) and an index of every local NI by NID, so the lookups the
send and receive paths make on every message (``ni_by_nid``, ``local_nis``) cost a dict or
list read. It is the only writer of ``nets`` and of each net's ``nis``. What an NI added or
removed changes elsewhere is said through the collaborators wired at construction: UDSP rules
applied to the new construct (spec §7.3), the NI state log (dbg-110), the recovery queue,
and ``on_ping_changed`` (the ping buffer is rebuilt with seq+1 and MR peers pushed, §5.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nodes.lnet.cpt import CptTable, tq_credits
from nodes.lnet.errors import EEXIST, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.ni import LNetNet, LNetNI, NetTunables, TxQueue
from nodes.lnet.nid import LO_NET, LO_NID, NID, Net

if TYPE_CHECKING:
    from nodes.lnet.nistate import NIState
    from nodes.lnet.peer import PeerTable
    from nodes.lnet.recovery import Recovery
    from nodes.lnet.udsp import UDSPTable


class LocalNets:
    """Nets and NIs of the node; ``multi_rail`` False allows one NI per net (downrev)."""

    def __init__(self, nistate: NIState, on_ping_changed: Callable[[], None]) -> None:
        self.nets: dict[Net, LNetNet] = {}
        self.by_nid: dict[NID, LNetNI] = {}
        self.nistate = nistate
        self.on_ping_changed = on_ping_changed
        self._nis: list[LNetNI] = []       # non-lo NIs in net order
        self._all: list[LNetNI] = []       # the same with 0@lo first
        self.version = 0  # moves with every change of ``nets`` (each ends in ``_reindex``)
        #: router.c's ``peer_buffer_credits`` module parameter (the engine's tunables)
        self.module_buffer_credits: Callable[[], int] = lambda: 0
        #: libcfs's CPU partitions (``cpt.py``), set from its module parameters before NIs
        self.cpt_table = CptTable()
        self.cpt_params: tuple[int, str] = (0, "")  # cpu_npartitions, cpu_pattern as given

    def _reindex(self) -> None:
        self.version += 1
        self._all = [ni for net in self.nets.values() for ni in net.nis]
        self._nis = [ni for ni in self._all if not ni.is_lo]
        self.by_nid = {ni.nid: ni for ni in self._all}

    # ------------------------------------------------------------------ queries
    def local_nis(self, include_lo: bool = False) -> list[LNetNI]:
        """Every local NI in net order (a shared list: callers do not modify it)."""
        return self._all if include_lo else self._nis

    def ni_by_nid(self, nid: NID) -> LNetNI | None:
        return self.by_nid.get(nid)

    def buffer_credits(self, net: Net) -> int:
        """router.c ``lnet_peer_buffer_credits``: a peer NI's router buffer credits on a
        local net: the net's ``peer_buffer_credits``, else the module parameter, else the
        net's ``peer_credits`` (0 when the net is not local, spec §1.3)."""
        lnet = self.nets.get(net)
        if lnet is None:
            return 0
        t = lnet.tunables
        if t.peer_buffer_credits > 0:
            return t.peer_buffer_credits
        return self.module_buffer_credits() or t.peer_credits

    def peer_credits(self, net: Net) -> int:
        """The ``peer_credits`` of a local net (0 when the net is not local, spec §1.3)."""
        lnet = self.nets.get(net)
        return lnet.tunables.peer_credits if lnet is not None else 0

    # ------------------------------------------------------------------ configure
    def configure(self) -> None:
        """``lnetctl lnet configure``: the loopback NI ``0@lo`` only."""
        lo = LNetNet(LO_NET, NetTunables(peer_timeout=0, peer_credits=0, credits=0))
        # api-ni.c lnet_startup_lndni returns for the LOLND before it sets ni_healthv to
        # LNET_MAX_HEALTH_VALUE: 0@lo keeps the zeroed health of its allocation (E17)
        lo.nis.append(LNetNI(LO_NID, "", lo, healthv=0, tx_credits=0, max_tx_credits=0,
                             min_tx_credits=0))
        self.nets.clear()
        self.nets[LO_NET] = lo
        self._reindex()

    def clear(self) -> list[LNetNI]:
        """``unconfigure``: every NI goes (logged as removed, dbg-110); returns them."""
        nis = list(self._nis)
        self.nets.clear()
        self._reindex()
        for ni in nis:
            self.nistate.removed(ni)
        return nis

    def add(self, net: Net, interface: str, nid: NID, *, peer_credits: int | None,
            credits: int | None, peer_timeout: int | None, cpts: tuple[int, ...] | None,
            numa: int | None, multi_rail: bool, udsp: UDSPTable,
            peers: PeerTable) -> LNetNI:
        """``lnetctl net add`` (cfg-020, cfg-040); see ``LNetEngine.net_add``."""
        if net == LO_NET:
            raise LNetConfigError(-EINVAL, "cannot add network: Invalid argument")
        if numa is not None and numa < 0:
            raise LNetConfigError(-EINVAL, f"cannot add network: invalid NUMA node {numa}")
        if nid in self.by_nid:
            raise LNetConfigError(-EEXIST, "cannot add network: File exists")
        lnet = self.nets.get(net)
        # api-ni.c lnet_set_tune_defaults: peer_timeout < 0 (-1: not given) and 0 credits are
        # the defaults (E8)
        tun = NetTunables()
        if peer_credits:
            tun.peer_credits = peer_credits
        if credits:
            tun.credits = credits
        if peer_timeout is not None and peer_timeout >= 0:
            tun.peer_timeout = peer_timeout
        if lnet is None:
            lnet = LNetNet(net, tun)
            self.nets[net] = lnet
            udsp.on_net(lnet)  # spec §7.3: rules applied to a new net
        elif any(ni.interface == interface for ni in lnet.nis):
            raise LNetConfigError(-EEXIST, "cannot add network: File exists")
        elif not multi_rail:  # downrev LNet: one NI per net (discovery.py, bck-*)
            raise LNetConfigError(-EEXIST, f"cannot add network: non-Multi-Rail node "
                                           f"already has an NI on {net}")
        elif tun != lnet.tunables:
            # lnet_add_net_common: "currently the tunables can not be updated once added"
            # (the net keeps its own), with a console warning (E18)
            self.nistate.warn("All tunables of NIs of a net should be the same")
        ncpts = self.cpt_table.ncpts
        if cpts is not None and (not cpts or any(not 0 <= c < ncpts for c in cpts)):
            raise LNetConfigError(-EINVAL, "cannot add network: Invalid argument")  # ni_alloc
        mine = tuple(range(ncpts)) if cpts is None else tuple(sorted(set(cpts)))
        tq = tq_credits(lnet.tunables.credits, lnet.tunables.peer_credits, len(mine))
        max_cr = tq * len(mine)
        ni = LNetNI(nid, interface, lnet, cpts=mine, tx_credits=max_cr, max_tx_credits=max_cr,
                    min_tx_credits=max_cr, dev_cpt=-1 if numa is None else numa,
                    tx_queues={c: TxQueue(tq, tq, tq) for c in mine})
        lnet.nis.append(ni)
        self._reindex()
        self.nistate.added(ni)
        udsp.on_ni(ni)  # spec §7.3: rules applied to a new NI
        self.on_ping_changed()
        # peer NIs on this net created before it existed now get credits (spec §1.3)
        for lpni in peers.by_nid.values():
            if lpni.nid.net == net and lpni.max_tx_credits == 0:
                c = lnet.tunables.peer_credits
                lpni.tx_credits = lpni.max_tx_credits = lpni.min_tx_credits = c
                lpni.rtr_credits = lpni.min_rtr_credits = self.buffer_credits(net)
        return ni

    def delete(self, net: Net, interface: str | None, recovery: Recovery) -> list[NID]:
        """``lnetctl net del --net N [--if IF]``: returns the NIDs removed."""
        lnet = self.nets.get(net)
        if lnet is None or net == LO_NET:
            raise LNetConfigError(-ENOENT, "cannot delete network: No such file or directory")
        victims = [ni for ni in lnet.nis if interface is None or ni.interface == interface]
        if not victims:
            raise LNetConfigError(-ENOENT, "cannot delete network: No such file or directory")
        for ni in victims:
            lnet.nis.remove(ni)
            recovery.forget_ni(ni)
        if not lnet.nis:
            del self.nets[net]
        self._reindex()
        for ni in victims:
            self.nistate.removed(ni)
        self.on_ping_changed()
        return [ni.nid for ni in victims]
