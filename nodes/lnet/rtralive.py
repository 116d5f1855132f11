"""Peer NI and gateway aliveness between LNet and the LND (seed 001 router and gateway
requirements, seed 002 "Multi-Rail Router Requirements"; router.c ``lnet_notify``).

Theory of operation (machines in ``rtrstate.py``):
* ``notify`` is ``lnet_notify(ni, nid, alive, reset, when)``: the LND's verdict on a peer NI
  (rtr-mr-lnd-notify). Notifications from another net or from the future are ignored, older
  ones than the last are out of date; the peer NI's ``ns_status`` follows (``state:`` in
  ``peer show``), ``reset`` moves a gateway's ``lp_alive`` and, when alive, sets the peer NI's
  health to 1000 ("force LNet to fully recover the peer_ni's health"). With discovery off the
  routes through that NID follow too, unless our local NI was to blame (another NI of its
  net is better: ``lnet_local_ni_superseded``). A death reported by an LND is passed back to
  the LND as ``NotifyPeerDown`` (``lnd_notify_peer_down``), once per transition, for gateway
  peer NIs and on routers (seed 001: "only pertinent on routers or for gateways").
* ``health_fell``: seed 002 rtr-mr-notify-dead -- LNet tells the LND a peer NI is dead when
  its health falls below ``MAX_HEALTH * router_sensitivity / 100`` (gateway peer NIs, and any
  peer NI on a router); today's LNet only does so from ``lnet_notify`` (docs/differences.md).
* ``on_rx``: every received message marks its peer NI up (rtr-router-peer-up-rx, rtr-gw-up),
  refreshes a router's NI (rtr-router-last-rx) and revives a dead gateway it was routed by.
* ``next_hop_dead``: a router does not forward to a peer NI marked down
  (rtr-router-no-send-down) but queries it, at most once a second, while there is traffic
  for it (rtr-router-query-down); the query's REPLY marks it up. Senders that are not routers
  never check aliveness (rtr-peer-no-alive-check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from nodes.lnet.actions import Action, Log, NotifyPeerDown
from nodes.lnet.dc_state import discovery_disabled
from nodes.lnet.msg import MDOwner, OwnerRole
from nodes.lnet.ni import LNET_NI_STATUS_UP

if TYPE_CHECKING:
    from nodes.lnet.events import PeerNotify
    from nodes.lnet.msg import Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.nid import NID
    from nodes.lnet.peer import Peer, PeerNI
    from nodes.lnet.router import Router

#: rtr-router-query-down: a peer NI marked down is queried at most this often (seconds)
QUERY_INTERVAL: Final = 1.0


class RouterAliveness:
    """Part of ``Router``: ``lnet_notify``, rx aliveness, next-hop aliveness on routers."""

    def __init__(self, r: Router) -> None:
        self.r = r
        self.notify_ts: dict[PeerNI, float] = {}  # lpni_timestamp (lnet_notify)
        self.query_last: dict[NID, float] = {}  # last query of a down peer NI
        self.query_wanted: set[NID] = set()

    def gateway_alive(self, gw: Peer) -> bool:
        """``lnet_is_gateway_alive`` (router.c): the gateway's own ``lp_alive`` and, on each of
        its nets, a peer NI alive (``lnet_is_gateway_net_alive``); ``lctl get_param routers``."""
        usable = self.r.table.lpni_usable
        return gw.alive and all(any(usable(p) for p in pn.lpnis) for pn in gw.nets)

    # ------------------------------------------------------------------ lnet_notify
    def notify(self, ev: PeerNotify, now: float) -> list[Action]:
        """``lnet_notify`` (router.c): the LND says peer NI ``ev.nid`` is alive or dead."""
        eng = self.r
        what = "birth" if ev.alive else "death"
        when = now if ev.when is None else ev.when
        if ev.ni is not None and ev.ni.net != ev.nid.net:
            return [Log(level="warning", text=f"Ignoring notification of {ev.nid} {what} by "
                                              f"{ev.ni} (different net)")]
        if when > now:
            return [Log(level="warning", text=f"Ignoring prediction from {ev.ni or 'userspace'}"
                                              f" of {ev.nid} {what} {when - now:g} seconds in "
                                              "the future")]
        lpni = eng.peers.find_lpni(ev.nid) if eng.node.configured else None
        if lpni is None:
            return []
        if ev.ni is not None and not ev.alive and when < lpni.last_alive:
            when = lpni.last_alive
        if self.notify_ts.get(lpni, float("-inf")) > when:
            return []  # out of date
        self.notify_ts[lpni] = when
        gw = lpni.peer
        if gw.rtr_refcount:
            if ev.reset:  # "reset flag indicates gateway peer went up or down"
                self.r.checker.gw_event(gw, "notify_alive_reset" if ev.alive
                                        else "notify_dead_reset")
            if discovery_disabled(eng.discovery, gw) and not (
                    not ev.alive and ev.ni is not None and self.superseded(ev.ni)):
                for route in self.r.table.all_routes():
                    if route.nid == lpni.nid:
                        self.r.checker.route_event(route, "notify_alive" if ev.alive
                                                   else "notify_dead")
        effect = self.r.checker.lpni_event(lpni, "notify_alive" if ev.alive else "notify_dead")
        actions: list[Action] = []
        if ev.alive and ev.reset:
            eng.health.reset_lpni(lpni)  # lnet_set_lpni_healthv_locked
        if effect == "lnd_notify_peer_down" and ev.ni is not None and (
                gw.rtr_refcount or self.r.enabled):  # "only pertinent on routers or gateways"
            actions.append(NotifyPeerDown(lpni=lpni.nid))
        if effect is not None:
            actions.append(Log(level="info", text=f"{ev.ni or 'userspace'} notifying "
                                                  f"{ev.nid}: {'up' if ev.alive else 'down'}"))
        return actions + self.r.checker.log_route_changes(
            f"{'alive' if ev.alive else 'dead'} notification from {ev.ni or 'userspace'}")

    def superseded(self, nid: NID) -> bool:
        """``lnet_local_ni_superseded``: another NI of the net is preferred over ``nid``."""
        ni = self.r.local.ni_by_nid(nid)
        if ni is None:
            return False
        for alt in ni.net.nis:
            if alt is ni:
                continue
            if ni.fatal_error and not alt.fatal_error:
                return True
            if alt.fatal_error == ni.fatal_error and alt.healthv > ni.healthv:
                return True
        return False

    def health_fell(self, lpni: PeerNI, before: int) -> list[Action]:
        """rtr-mr-notify-dead: the peer NI's health crossed below the router sensitivity."""
        thr = self.r.table.threshold()
        if not (thr and before >= thr > lpni.healthv):
            return []
        if lpni.peer.rtr_refcount == 0 and not self.r.enabled:
            return []
        return [Log(level="warning", text=f"peer NI {lpni.nid} health {lpni.healthv} below "
                                          f"router sensitivity {thr}: telling the LND"),
                NotifyPeerDown(lpni=lpni.nid)]

    def tx_failed(self, lpni: PeerNI, hstatus: object) -> None:
        """``TxFinalizer.finalize_tx`` on a failed tx. Aliveness is not touched: a gateway peer NI
        goes down when the LND says so (``notify``, rtr-gw-down-on-fail), as in real LNet.
        On a router the peer NI's non-MR preferred NI is forgotten, so the resend may leave
        from any local NI (``lnet_handle_any_local_nmr_dst`` for ``msg_routing``,
        hlth-lnt-router-any-ni)."""
        if self.r.enabled:
            lpni.pref_nids.clear()

    # ------------------------------------------------------------------ receive side
    def net_rx(self, ni: LNetNI, src: NID, now: float, *, ping: bool) -> None:
        """A message arrived on ``ni``, before LNet's drop and delay rules see it: lib-move.c
        ``lnet_parse`` refreshes ``net_last_alive`` (and sets the NI UP) before
        ``lnet_drop_rule_match``, so a ping a rule then drops still keeps a router's net
        alive (explore seed 593). ``ping``: a GET on the reserved portal."""
        self.r.last_now = max(self.r.last_now, now)
        seed = self.r.tunables.router_sensitivity < 100
        if self.r.enabled and (seed or (ping and self.r.local.ni_by_nid(src) is None)):
            # lib-move.c lnet_parse: "Only update net_last_alive for incoming GETs on the
            # reserved portal (i.e. incoming lnet/discovery pings) [from non-local NIDs].
            # This avoids situations where the router's own traffic results in NI status
            # changes": the ACKs of the router's own pushes would keep a silent NI alive.
            # Seed 002's rtr-router-last-rx (any message) stays behind router_sensitivity
            # below its default, the knob of seed 002's other router rules (differences.md)
            # net_last_alive is the net's: every NI of the net is alive as long as one hears
            # pings (router.c lnet_update_ni_status_locked marks a silent net's NIs down)
            alive = self.r.checker.ni_last_alive
            for sibling in self.r.local.local_nis():
                if sibling.net is ni.net:
                    alive[sibling] = now
            if ni.status != LNET_NI_STATUS_UP:
                # in place in the ping buffer, then pushed (lib-move.c lnet_parse:
                # lnet_ni_set_status_locked -> lnet_push_update_to_peers(1)), whatever the
                # NI's health or fatal state: any incoming ping sets it UP (issue 26 item 6)
                self.r.nistate.set_status(ni, LNET_NI_STATUS_UP)
                self.r.discovery.local_ni_changed(force=True)

    def on_rx(self, lpni: PeerNI, src: NID, now: float) -> str | None:
        """Every received message past the drop and delay rules (spec §4.2 step 4, §6.5);
        returns a drop reason or None."""
        self.r.last_now = max(self.r.last_now, now)
        self.r.checker.lpni_event(lpni, "rx")
        self.query_wanted.discard(lpni.nid)
        if src.net == lpni.nid.net or self.r.local.ni_by_nid(src) is not None:
            return None
        gw = lpni.peer
        if self.r.tunables.drop_asym_route and not any(
                self.r.table.gateway(r) is gw for r in self.r.table.routes.get(src.net, [])):
            return f"Dropping asymmetrical route from {src} through {lpni.nid}"
        if not gw.alive and gw.rtr_refcount > 0:
            self.r.checker.gw_event(gw, "rx")
            for p in gw.lpnis:
                if p.nid.net == src.net:
                    self.r.checker.lpni_event(p, "rx")
        return None

    # ------------------------------------------------------------------ next hop on a router
    def next_hop_dead(self, msg: Msg, lpni: PeerNI) -> bool:
        """Peer aliveness on a router (spec §1.5 step 1): forwarding to a DOWN peer NI.

        The peer NI is queried at the next tick (at most once per QUERY_INTERVAL)."""
        if not self.r.enabled or msg.recovery or msg.fwd is None:
            return False
        lnet = self.r.nets.get(lpni.nid.net)
        dead = bool(lnet and lnet.tunables.peer_timeout > 0
                    and lpni.ns_status != LNET_NI_STATUS_UP)
        if dead:
            self.query_wanted.add(lpni.nid)
        return dead

    def query_deadlines(self) -> list[float]:
        return [max(self.query_last.get(n, float("-inf")) + QUERY_INTERVAL, self.r.last_now)
                for n in self.query_wanted]

    def query_tick(self, now: float) -> list[Action]:
        """rtr-router-query-down: ping each wanted down peer NI (recovery-style, NMR)."""
        actions: list[Action] = []
        for nid in sorted(self.query_wanted, key=str):
            if now < self.query_last.get(nid, float("-inf")) + QUERY_INTERVAL:
                continue
            self.query_wanted.discard(nid)
            self.query_last[nid] = now
            _h, acts = self.r.get(now, nid, length=16 + 16 * 17, portal=0,
                                    match_bits=1 << 63, recovery=True,
                                    timeout=float(max(self.r.tunables.router_ping_timeout,
                                                      1)), owner=MDOwner(OwnerRole.RTR_QUERY, nid))
            actions += [Log(level="warning", text=f"querying down peer NI {nid}"), *acts]
        return actions
