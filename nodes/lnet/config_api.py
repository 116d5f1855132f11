"""The engine's configuration entry points (the DLC API of ``lnetctl``/``lctl``), a mixin
of ``LNetEngine`` (``engine.py`` is the facade and keeps the send/receive/timer surface).

Theory of operation: each method is one kernel entry point (api-ni.c ``LNetCtl`` ioctls and
their netlink twins, peer.c) applied to the components the engine built: ``LocalNets`` for
NIs, ``PeerTable`` for peers, ``Tunables``, ``Health``/``Recovery`` for manual health,
``NIState`` for link changes, ``FailLoc`` for ``fail_loc``. They return the actions the change
causes (or nothing when the change only arms timers). The attributes below are the
engine's; this class only declares their types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet import cpt
from nodes.lnet.actions import Action, Log
from nodes.lnet.addpeer import add_peer
from nodes.lnet.errors import EBUSY, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.lpstate import PeerEvent, fire
from nodes.lnet.ni import LNET_NI_STATUS_UP, LNetNI
from nodes.lnet.nid import NID, Net
from nodes.lnet.router import ROUTER_PARAMS

if TYPE_CHECKING:
    from nodes.lnet.counters import GlobalCounters
    from nodes.lnet.discovery import Discovery
    from nodes.lnet.failloc import FailLoc
    from nodes.lnet.health import Health
    from nodes.lnet.nets import LocalNets
    from nodes.lnet.nistate import NIState
    from nodes.lnet.node import NodeState
    from nodes.lnet.peer import PeerTable
    from nodes.lnet.recovery import Recovery
    from nodes.lnet.router import Router
    from nodes.lnet.trace import Tracer
    from nodes.lnet.tunables import Tunables
    from nodes.lnet.udsp import UDSPTable

class ConfigAPI:
    """Configuration entry points of ``LNetEngine`` (see the module doc)."""

    node: NodeState
    tunables: Tunables
    counters: GlobalCounters
    local: LocalNets
    peers: PeerTable
    udsp: UDSPTable
    recovery: Recovery
    router: Router
    discovery: Discovery
    health: Health
    nistate: NIState
    tracer: Tracer
    fail: FailLoc

    def _ping_changed(self) -> None:
        raise NotImplementedError  # the engine's

    # ------------------------------------------------------------------ DLC: configuration
    def configure(self, large: bool = False) -> None:
        """``lnetctl lnet configure [--large]``: LNet up with its loopback NI ``0@lo``;
        ``large`` is ``NLM_F_APPEND``: ``ln_nis_use_large_nids`` (api-ni.c
        ``lnet_net_conf_cmd``)."""
        if self.node.configured:
            return
        self.local.configure()
        self.node.configured = True
        self.node.large_nids = large
        if self.tunables.forwarding:  # module param forwarding=enabled: a router at once
            self.router.on_tunable("forwarding", 1, None)

    def unconfigure(self) -> list[NID]:
        """``lnetctl lnet unconfigure``: the NIDs the LND must shut down."""
        nis = self.local.clear()
        self.peers.clear()
        self.udsp.rules.clear()  # lnet_udsp_destroy(shutdown) on LNetNIFini
        self.recovery.clear()
        self.router.clear()
        self.discovery.clear()
        self.node.configured = False
        self.node.large_nids = False
        return [ni.nid for ni in nis]

    def net_add(self, net: Net, interface: str, nid: NID, *, peer_credits: int | None = None,
                credits: int | None = None, peer_timeout: int | None = None,
                cpts: tuple[int, ...] | None = None, numa: int | None = None,
                conns_per_peer: int | None = None, tos: int | None = None) -> LNetNI:
        """``lnetctl net add``: one NI per interface (cfg-020, cfg-040); ``numa`` is the
        emulated NUMA node of its device (snd-010), None unbound (``nets.py``).

        Tunables as api-ni.c ``lnet_set_tune_defaults`` reads them: a negative
        ``peer_timeout`` (``-1``: not given) is DEFAULT_PEER_TIMEOUT, 0 credits are the
        defaults (E8). ``conns_per_peer`` and ``tos`` are the NI's ``lnd tunables`` (socklnd
        ``ksocknal_tunables_setup``: -1 or None keeps the LND default; E5/E6). Adding an NI to
        an existing net with other tunables keeps the net's and warns as
        ``lnet_add_net_common`` does (E18)."""
        self.router.require_up()  # -ENODEV
        if tos is not None and not -1 <= tos <= 255:
            raise LNetConfigError(-EINVAL, f"cannot add network: invalid ToS {tos}")
        ni = self.local.add(net, interface, nid, peer_credits=peer_credits, credits=credits,
                            peer_timeout=peer_timeout, cpts=cpts, numa=numa,
                            multi_rail=self.node.multi_rail, udsp=self.udsp,
                            peers=self.peers)
        if conns_per_peer is not None and conns_per_peer >= 0:
            ni.conns_per_peer = conns_per_peer or 1
        if tos is not None:
            ni.tos = tos
        return ni

    def net_del(self, net: Net, interface: str | None = None) -> list[NID]:
        """``lnetctl net del --net N [--if IF]``: returns the NIDs removed (logged, dbg-110).
        When the net's last NI goes, api-ni.c ``lnet_shutdown_lndnet`` cleans the peer table
        for it (peer.c ``lnet_peer_tables_cleanup``): routes through a gateway with a peer
        NI on that net first, then its peer NIs (``PeerTable.net_cleanup``, LU-20403)."""
        self.router.require_up()  # -ENODEV
        removed = self.local.delete(net, interface, self.recovery)
        if net not in self.local.nets:
            for gw in self.router.gateways():
                if any(lpni.nid.net == net for lpni in gw.lpnis):
                    self.router.delete(None, gw.primary_nid)  # lnet_peer_table_del_rtrs_locked
            self.peers.net_cleanup(net, lambda n: n in self.local.nets)
            self.recovery.forget_deleted_peers()
        return removed

    def peer_add(self, prim: NID, nids: list[NID], *, non_mr: bool = False,
                 lock_prim: bool = False) -> None:
        """``lnetctl peer add --prim_nid P --nid LIST`` (cfg-070, cfg-075, cfg-080).

        The node's own NIDs may be peers, as the kernel allows (peer.c ``lnet_add_peer_ni``
        has no local-NID check; sanity-lnet 215 and 304 add them)."""
        self.router.require_up()  # -ENODEV
        credits = {n: ln.tunables.peer_credits for n, ln in self.local.nets.items()}
        self.peers.user_add(prim, nids, non_mr, lock_prim, credits)

    def add_peer(self, nids: list[NID], now: float) -> list[Action]:
        """``LNetAddPeer`` (peer.c, ``addpeer.py``): the NIDs Lustre gives for one server
        (``lctl add_uuid``) become one peer, its primary locked while ``lock_prim_nid`` is 1.
        Nothing happens while LNet is down (the testbed does not bring LNet up for it, as
        ``LNetNIInit`` would)."""
        if not self.node.configured:
            return []
        return add_peer(self.discovery, nids, now) + self.tracer.take()

    def peer_set_state(self, nid: NID, state: int) -> None:
        """``lnetctl peer set --nid NID --state S`` (E7): api-ni.c ``lnet_genl_parse_peer``
        ("peer state") / IOC_LIBCFS_SET_PEER store ``lp->lp_state = state`` as given, on the
        peer owning ``nid``.

        Raises:
            LNetConfigError: -ENOENT, no peer NI ``nid`` ("invalid peer state param").
        """
        lpni = self.peers.find_lpni(nid)
        if lpni is None:
            raise LNetConfigError(-ENOENT, "invalid peer state param")
        fire(lpni.peer, PeerEvent.SET_STATE, state)

    def set_cpu_param(self, name: str, value: str) -> None:
        """libcfs's ``cpu_npartitions``/``cpu_pattern`` (``cpt.py``): module parameters,
        read when LNet starts, so refused while an NI is configured (the module is in use).

        Raises:
            LNetConfigError: -EBUSY, or -EINVAL naming a bad value.
        """
        if self.local.local_nis():
            raise LNetConfigError(-EBUSY, f"{name}: CPU partitions are fixed while LNet has NIs")
        npart, pattern = self.local.cpt_params
        if name == "libcfs.cpu_npartitions":
            if not value.strip().isdigit():
                raise LNetConfigError(-EINVAL, f"{name}: expected a number, got '{value[:40]}'")
            npart = int(value)
        else:
            pattern = value
        self.local.cpt_table = cpt.table(npart, pattern)
        self.local.cpt_params = (npart, pattern)
        self.peers.ncpts = self.local.cpt_table.ncpts  # one peer table per CPT

    def set_fail_loc(self, loc: int, val: int | None = None) -> None:
        """``lctl set_param fail_loc=LOC [fail_val=VAL]`` (E11, ``failloc.py``)."""
        self.fail.set(loc, val)

    def set_fail_val(self, val: int) -> None:
        """``lctl set_param fail_val=VAL`` (``failloc.py``)."""
        self.fail.set_val(val)

    def peer_del(self, prim: NID, nids: list[NID], *, force: bool = False) -> None:
        self.router.require_up()  # -ENODEV
        self.peers.user_del(prim, nids, force)
        self.recovery.forget_deleted_peers()

    def set_tunable(self, name: str, value: int, now: float | None = None) -> list[Action]:
        old = getattr(self.tunables, name, None)
        self.tunables.set(name, value)
        if name == "discovery":  # disabling force-pushes to MR peers (discovery.py, §5.4)
            self.discovery.set_discovery(int(old or 0), value)
        if name in ROUTER_PARAMS:  # routing state and buffer pools (router.py, spec §6.2)
            return self.router.on_tunable(name, value, now) + self.tracer.take()
        if name == "recovery_interval":  # api-ni.c recovery_interval_set: CWARN, no effect
            return [Log(level="warning", text="'lnet_recovery_interval' has been deprecated")]
        return []

    # ------------------------------------------------------------------ health controls
    def ni_set_fatal(self, nid: NID, fatal: bool, now: float,
                     cause: str = "carrier") -> list[Action]:
        """``lnet_set_link_fatal_state``: the LND saw the device's link go down/up (hlt
        lnd-010); ``cause`` is ``carrier`` or ``simulated`` (``NIState.link_change``)."""
        ni = self.local.ni_by_nid(nid)
        if ni is None or ni.is_lo:
            return [Log(level="warning", text=f"link state change for unknown NI {nid}")]
        was_up = ni.status == LNET_NI_STATUS_UP
        actions = self.nistate.link_change(ni, fatal, now, cause, self.recovery)
        if not actions:
            return []  # the fatal state did not change
        if not fatal and not was_up and ni.status == LNET_NI_STATUS_UP:
            # config.c lnet_set_link_fatal_state: back UP at full health: forced push
            self.discovery.local_ni_changed(force=True)
        if not self.router.enabled:
            # socklnd.c ksocknal_handle_link_state_change -> lnet_mark_ping_buffer_for_update
            # (not on a router): the monitor rebuilds the buffer (seq+1) and pushes it to the
            # MR peers (api-ni.c lnet_update_ping_buffer -> lnet_push_update_to_peers(0))
            self._ping_changed()
        return actions

    def net_set_health(self, nid: NID | None, value: int, now: float) -> None:
        """``lnetctl net set --nid X|--all --health V`` (spec §3.6; out of range -> 1000).
        api-ni.c ``lnet_ni_set_healthv`` walks every net, the loopback one included: ``--all``
        sets ``0@lo`` too, which then recovers like any local NI."""
        for ni in self.local.local_nis(True):
            if nid is None or ni.nid == nid:
                self.health.manual_ni(ni, value)
                self.recovery.ni_enqueue(ni, now, manual=True)

    def peer_set_health(self, nid: NID | None, value: int, now: float) -> None:
        """``lnetctl peer set --nid X|--all --health V`` (spec §3.6; subject to §3.5 rules)."""
        for lpni in list(self.peers.by_nid.values()):
            if nid is None or lpni.nid == nid:
                self.health.manual_lpni(lpni, value)
                self.recovery.lpni_enqueue(lpni, now)

    def stats_reset(self) -> None:
        """``lnetctl stats reset`` (spec §4.5): global counters incl. gauges, per-NI and
        per-peer-NI statistics and the testbed's (counters.py); health counters are kept."""
        self.counters.reset()
        for ni in self.local.local_nis(True):
            ni.stats.reset()
            ni.link_events.reset()
        for lpni in self.peers.by_nid.values():
            lpni.stats.reset()

