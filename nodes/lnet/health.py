"""Health: classify a finished message, move health values, decide on resend (spec §3.1-3.3).

Theory of operation: ``health_check`` runs from finalize for every committed message with a
peer (``lnet_health_check``). In order:
1. a failure that arrives after the message deadline changes nothing, not even counters
   (spec §3.2 step 1, §11.3);
2. the per-class counters move (global ``*_count`` + NI ``health stats`` for local classes +
   peer NI ``health stats`` for remote classes; ``successful_resends`` for an OK resent msg);
3. health moves per the spec §3.2 table: every ``−`` is "decrement by ``health_sensitivity``
   (never below 0) and queue for recovery"; OK adds the sensitivity to the NI, and for
   received messages to the peer NI (or sets a router's peer NI straight to 1000);
4. resend: local classes except LOCAL_ERROR need >= 2 local non-lo NIs; REMOTE_DROPPED needs a
   peer with more than one NI; LOCAL_ERROR, REMOTE_ERROR, REMOTE_TIMEOUT and NETWORK_TIMEOUT
   never resend; recovery pings and ``no_resend`` messages never resend; at most
   ``retry_count`` resends (003), after which ``failed_resends`` counts (if retry_count != 0).
Remote health is not touched for a single-NI peer (unless it or this node is a router) nor for
a peer NI that is one of this node's own NIDs (spec §3.2 step 3, §11.4).
A local NI reaching 0 is shown ``status: down``, reaching 1000 ``up`` (LU-19476, spec §3.1).
Sensitivity 0 means health never moves and nothing is queued for recovery.

``Health`` is the one writer of health values (``LNetNI.healthv``, ``PeerNI.healthv``): send
and receive outcomes, the response tracker's penalty (``lnet_finalize_expired_responses``,
spec §3.4), recovery ping replies, ``lnetctl net|peer set --health`` and ``lnet_notify``'s
reset all come through it. Every change raises an ``ni_health`` / ``lpni_health`` notice
with its cause. Its decisions (how far a value moves, whether to resend) go through the
engine's ``Decisions`` (``decisions.py``), the seam a test uses to make one of them wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from nodes.lnet.actions import Action, Log
from nodes.lnet.counters import GlobalCounters
from nodes.lnet.decisions import Decisions
from nodes.lnet.hstatus import HStatus
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP, LNetNI
from nodes.lnet.nid import NID
from nodes.lnet.notify import Notices
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE, Tunables

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.nistate import NIState
    from nodes.lnet.peer import PeerNI
    from nodes.lnet.recovery import Recovery

LOCAL_RESENDABLE: Final = frozenset({HStatus.LOCAL_INTERRUPT, HStatus.LOCAL_DROPPED,
                              HStatus.LOCAL_ABORTED, HStatus.LOCAL_NO_ROUTE,
                              HStatus.LOCAL_TIMEOUT})
LOCAL_CLASSES: Final = LOCAL_RESENDABLE | {HStatus.LOCAL_ERROR}
REMOTE_CLASSES: Final = frozenset({HStatus.REMOTE_ERROR, HStatus.REMOTE_DROPPED,
                            HStatus.REMOTE_TIMEOUT, HStatus.NETWORK_TIMEOUT})
GLOBAL_KEY: Final = {
    HStatus.LOCAL_INTERRUPT: "local_interrupt_count", HStatus.LOCAL_DROPPED: "local_dropped_count",
    HStatus.LOCAL_ABORTED: "local_aborted_count", HStatus.LOCAL_NO_ROUTE: "local_no_route_count",
    HStatus.LOCAL_TIMEOUT: "local_timeout_count", HStatus.LOCAL_ERROR: "local_error_count",
    HStatus.REMOTE_DROPPED: "remote_dropped_count", HStatus.REMOTE_ERROR: "remote_error_count",
    HStatus.REMOTE_TIMEOUT: "remote_timeout_count",
    HStatus.NETWORK_TIMEOUT: "network_timeout_count",
}
#: ``lnet_incr_hstats``: NI counters exist for the local classes only
NI_KEY: Final = {HStatus.LOCAL_INTERRUPT: "interrupts", HStatus.LOCAL_DROPPED: "dropped",
          HStatus.LOCAL_ABORTED: "aborted", HStatus.LOCAL_NO_ROUTE: "no_route",
          HStatus.LOCAL_TIMEOUT: "timeouts", HStatus.LOCAL_ERROR: "error"}
LPNI_KEY: Final = {HStatus.REMOTE_DROPPED: "dropped", HStatus.REMOTE_ERROR: "error",
            HStatus.REMOTE_TIMEOUT: "timeout", HStatus.NETWORK_TIMEOUT: "network_timeout"}


# ---------------------------------------------------------------------- the component
class Health:
    """Health values of one node and the ``lnet_health_check`` decisions (spec §3.1-3.3)."""

    def __init__(self, tunables: Tunables, counters: GlobalCounters, notices: Notices,
                 nistate: NIState, decisions: Decisions) -> None:
        self.tunables = tunables
        self.counters = counters
        self.notices = notices
        self.nistate = nistate
        self.decisions = decisions
        # wired by the engine (they are built after this component)
        self.recovery: Recovery | None = None
        self.local_count: Callable[[], int] = lambda: 0
        self.is_local: Callable[[NID], bool] = lambda nid: False
        self.lpni_fell: Callable[[PeerNI, int], list[Action]] = lambda lpni, before: []
        # whether a peer NI is still the one the peer table has for its NID (wired)
        self.lpni_live: Callable[[PeerNI], bool] = lambda lpni: True
        # fail_loc CFS_FAIL_RTR_HEALTH_INC (failloc.py), wired by the engine
        self.rtr_health_inc_fails: Callable[[], bool] = lambda: False

    # ------------------------------------------------------------------ arithmetic (§3.1)
    def set_ni(self, ni: LNetNI, value: int, cause: str, why: str | None = None, *,
               step: bool = False) -> None:
        """Set a local NI's health; 0 -> status DOWN, 1000 -> UP (LU-19476, spec §3.1/3.6).
        A ``step`` (``lnet_inc_ni_healthv``/``lnet_dec_ni_healthv_locked``) moves the status
        only when the value moved: a success at 1000 leaves a DOWN the router checker set
        (router.c ``lnet_update_ni_status_locked``) alone; ``net set --health`` always sets
        it (api-ni.c ``lnet_ni_set_healthv``)."""
        old = ni.healthv
        ni.healthv = value
        if step and value == old:
            return
        if value == 0 and ni.status != LNET_NI_STATUS_DOWN:
            self.nistate.set_status(ni, LNET_NI_STATUS_DOWN, why)
        elif value == LNET_MAX_HEALTH_VALUE and ni.status != LNET_NI_STATUS_UP:
            self.nistate.set_status(ni, LNET_NI_STATUS_UP, why)
        if value != old:
            self.notices.touch()
            self.notices.emit("ni_health", nid=str(ni.nid), old=old, new=value, cause=cause)
            if self.recovery is not None and (old >= LNET_MAX_HEALTH_VALUE) != (
                    value >= LNET_MAX_HEALTH_VALUE):
                self.recovery.rearm()  # a pending entry's eligibility moved (recovery.deadline)

    def set_lpni(self, lpni: PeerNI, value: int, cause: str) -> None:
        """Set a peer NI's health. A peer NI that discovery or ``peer del`` replaced still
        takes the health checks of the messages holding it (their ``msg_txpeer`` /
        ``msg_rxpeer`` reference, peer.c ``lnet_peer_add_nid`` allocates a new one when a
        primary NID moves to another peer): its value moves, but nothing shows it any more
        (``peer show`` lists the table's), so no ``lpni_health`` notice is raised for it;
        the NID's notices follow the peer NI the table has (explore seed 216)."""
        old = lpni.healthv
        if value == old:
            return
        lpni.healthv = value
        if not self.lpni_live(lpni):
            return
        self.notices.touch()
        self.notices.emit("lpni_health", nid=str(lpni.nid), old=old, new=value, cause=cause)
        if self.recovery is not None and (old >= LNET_MAX_HEALTH_VALUE) != (
                value >= LNET_MAX_HEALTH_VALUE):
            self.recovery.rearm()  # a pending entry's eligibility moved (recovery.deadline)

    def inc_ni(self, ni: LNetNI, cause: str = "ok") -> None:
        """``lnet_inc_ni_healthv``: +sensitivity, capped at 1000. A health check's increment
        (``cause`` ok: a message sent or received on the NI) names its status ``OK`` in the
        NI's status line, as a failure names its own (dbg-110). ``0@lo`` too: its messages'
        health checks raise it back after ``net set --all --health`` (lib-msg.c)."""
        self.set_ni(ni, self.decisions.step(ni.healthv, self.tunables.health_sensitivity,
                                                   True), cause, "OK" if cause == "ok" else None,
                    step=True)

    def dec_ni(self, ni: LNetNI) -> None:
        """``lnet_dec_ni_healthv_locked``: -sensitivity, never below 0 (hlt lnt-020)."""
        if ni.is_lo or self.tunables.health_sensitivity == 0:
            return
        self.set_ni(ni, self.decisions.step(ni.healthv, self.tunables.health_sensitivity,
                                                   False), "error", step=True)

    def inc_lpni(self, lpni: PeerNI) -> None:
        self.set_lpni(lpni, self.decisions.step(
            lpni.healthv, self.tunables.health_sensitivity, True), "ok")

    def dec_lpni(self, lpni: PeerNI) -> None:
        self.set_lpni(lpni, self.decisions.step(
            lpni.healthv, self.tunables.health_sensitivity, False), "error")

    def local_failure(self, ni: LNetNI, now: float, why: str = "") -> None:
        """``lnet_handle_local_failure``: decrement and queue for local recovery (spec §3.5);
        ``why`` (the hstatus) goes out as an ``ni_error`` notice (hlth-lnt-udev)."""
        self.dec_ni(ni)
        assert self.recovery is not None
        self.recovery.ni_enqueue(ni, now)
        if not ni.is_lo:
            self.notices.ni_error(ni, why)

    def remote_failure(self, lpni: PeerNI, now: float, why: str = "") -> list[Action]:
        """``lnet_handle_remote_failure_locked``: decrement and queue for peer recovery; an
        ``lpni_error`` notice (hlth-lnt-udev); the LND is told when a gateway's (or, on a
        router, any) peer NI falls below the router sensitivity (002 rtr-mr-notify-dead)."""
        before = lpni.healthv
        self.dec_lpni(lpni)
        assert self.recovery is not None
        self.recovery.lpni_enqueue(lpni, now)
        self.notices.lpni_error(lpni, why)
        return self.lpni_fell(lpni, before)

    def response_timeout(self, next_hop: PeerNI | None, now: float) -> list[Action]:
        """``lnet_finalize_expired_responses``: the next hop is blamed (spec §3.4, §11.6),
        with no single-NI exemption here (lib-move.c)."""
        self.counters.values["response_timeout_count"] += 1
        if next_hop is None:
            return []
        return self.remote_failure(next_hop, now, "RESPONSE_TIMEOUT")

    def is_router(self, lpni: PeerNI) -> bool:
        """``lnet_isrouter(lpni) || lnet_routing_enabled()`` (spec §3.1 special case)."""
        return lpni.peer.rtr_refcount > 0 or bool(self.tunables.routing)

    def remote_health_applies(self, lpni: PeerNI) -> bool:
        """``handle_remote_health`` (spec §3.2 step 3)."""
        if lpni.peer.nnis <= 1 and not self.is_router(lpni):
            return False
        return not self.is_local(lpni.nid)

    # ------------------------------------------------------------------ manual and reset
    def manual_ni(self, ni: LNetNI, value: int) -> None:
        """``lnetctl net set --health`` (spec §3.6; out of range -> 1000); the status change
        is logged with that cause (dbg-110)."""
        if not 0 <= value <= LNET_MAX_HEALTH_VALUE:
            value = LNET_MAX_HEALTH_VALUE
        self.set_ni(ni, value, "manual", "lnetctl net set --health")

    def manual_lpni(self, lpni: PeerNI, value: int) -> None:
        """``lnetctl peer set --health`` (spec §3.6; out of range -> 1000); its status
        changes are published."""
        if not 0 <= value <= LNET_MAX_HEALTH_VALUE:
            value = LNET_MAX_HEALTH_VALUE
        self.set_lpni(lpni, value, "manual")
        self.notices.watch_lpni(lpni)

    def reset_lpni(self, lpni: PeerNI) -> None:
        """``lnet_notify`` reset: "force LNet to fully recover the peer_ni's health"."""
        self.set_lpni(lpni, LNET_MAX_HEALTH_VALUE, "reset")

    # ------------------------------------------------------------------ finalize (§3.2)
    def rx_ok(self, ni: LNetNI, lpni: PeerNI, now: float) -> None:
        """OK branch for a received message: both ends proved alive (spec §3.2 OK row)."""
        self.inc_ni(ni)
        lpni.ping_count = 0
        ni.ping_count = 0
        if self.is_router(lpni) and not self.rtr_health_inc_fails():
            # lib-msg.c: a router's (or a gateway's) peer NI goes straight to full health,
            # unless fail_loc CFS_FAIL_RTR_HEALTH_INC (0xe004) says otherwise
            self.set_lpni(lpni, LNET_MAX_HEALTH_VALUE, "ok")
        else:
            self.inc_lpni(lpni)
            assert self.recovery is not None
            self.recovery.lpni_enqueue(lpni, now)

    def count(self, msg: Msg, ni: LNetNI, lpni: PeerNI | None, hstatus: HStatus) -> None:
        """``lnet_incr_hstats``: global + NI + peer NI counters of one health status."""
        if hstatus == HStatus.OK:
            if msg.retry_count:
                self.counters.values["successful_resends"] += 1
            return
        self.counters.values[GLOBAL_KEY[hstatus]] += 1
        if hstatus in NI_KEY:
            key = NI_KEY[hstatus]
            setattr(ni.hstats, key, getattr(ni.hstats, key) + 1)
        if hstatus == HStatus.NETWORK_TIMEOUT:  # testbed-only, views.testbed_stats
            ni.hstats.network_timeout += 1
        if hstatus in LPNI_KEY and lpni is not None:
            key = LPNI_KEY[hstatus]
            setattr(lpni.hstats, key, getattr(lpni.hstats, key) + 1)

    def check(self, msg: Msg, now: float) -> tuple[bool, list[Action]]:
        """``lnet_health_check`` for a tx-committed message; returns (resend?, actions)."""
        ni, lpni = msg.txni, msg.txpeer
        assert ni is not None and lpni is not None
        hstatus = msg.hstatus
        if now > msg.deadline and hstatus != HStatus.OK:
            return False, []  # late failures change nothing (spec §3.2 step 1, §11.3)
        self.count(msg, ni, lpni, hstatus)
        if hstatus == HStatus.OK:
            if msg.rx_committed or msg.fwd is not None:
                # a REPLY is the received GET's own lnet_msg (lib-move.c lnet_parse_get sends
                # it with lnet_send), and a forwarded message was received too (its rx
                # credits may be back already): committed for both, one health check, on the
                # tx side, with the received-message branch for its peer NI (lib-msg.c
                # lnet_health_check prefers msg_txni/msg_txpeer)
                self.rx_ok(ni, lpni, now)
            else:
                self.inc_ni(ni)
            return False, []
        local_resend = self.local_count() >= 2
        remote_resend = lpni.peer.nnis > 1
        remote_health = self.remote_health_applies(lpni)
        if hstatus in LOCAL_CLASSES or hstatus == HStatus.NETWORK_TIMEOUT:
            self.local_failure(ni, now, hstatus.name)
        notify_dead: list[Action] = []
        if hstatus in REMOTE_CLASSES and remote_health:
            notify_dead = self.remote_failure(lpni, now, hstatus.name)  # rtr-mr-notify-dead
        retryable = ((hstatus in LOCAL_RESENDABLE and local_resend)
                     or (hstatus == HStatus.REMOTE_DROPPED and remote_resend))
        resend = retryable and not msg.recovery and not msg.no_resend
        exhausted = resend and msg.retry_count >= self.tunables.retry_count
        if self.decisions.resend(msg, resend and not exhausted) is False:
            if exhausted and self.tunables.retry_count:
                self.counters.values["failed_resends"] += 1
            return False, notify_dead
        # dbg-115: say which pair failed; the new pair is logged by the resend itself
        return True, [*notify_dead, Log(level="error", text=(
            f"{msg.type.name} from {ni.nid} to {lpni.nid} failed: {hstatus.name}; "
            f"resending (try {msg.retry_count + 2})"))]
