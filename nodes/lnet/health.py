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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet import notify, recovery
from nodes.lnet.actions import Action, Log
from nodes.lnet.hstatus import HStatus
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNET_NI_STATUS_UP, LNetNI
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import Msg
    from nodes.lnet.peer import PeerNI

LOCAL_RESENDABLE = frozenset({HStatus.LOCAL_INTERRUPT, HStatus.LOCAL_DROPPED,
                              HStatus.LOCAL_ABORTED, HStatus.LOCAL_NO_ROUTE,
                              HStatus.LOCAL_TIMEOUT})
LOCAL_CLASSES = LOCAL_RESENDABLE | {HStatus.LOCAL_ERROR}
REMOTE_CLASSES = frozenset({HStatus.REMOTE_ERROR, HStatus.REMOTE_DROPPED,
                            HStatus.REMOTE_TIMEOUT, HStatus.NETWORK_TIMEOUT})
GLOBAL_KEY = {
    HStatus.LOCAL_INTERRUPT: "local_interrupt_count", HStatus.LOCAL_DROPPED: "local_dropped_count",
    HStatus.LOCAL_ABORTED: "local_aborted_count", HStatus.LOCAL_NO_ROUTE: "local_no_route_count",
    HStatus.LOCAL_TIMEOUT: "local_timeout_count", HStatus.LOCAL_ERROR: "local_error_count",
    HStatus.REMOTE_DROPPED: "remote_dropped_count", HStatus.REMOTE_ERROR: "remote_error_count",
    HStatus.REMOTE_TIMEOUT: "remote_timeout_count",
    HStatus.NETWORK_TIMEOUT: "network_timeout_count",
}
#: ``lnet_incr_hstats``: NI counters exist for the local classes only
NI_KEY = {HStatus.LOCAL_INTERRUPT: "interrupts", HStatus.LOCAL_DROPPED: "dropped",
          HStatus.LOCAL_ABORTED: "aborted", HStatus.LOCAL_NO_ROUTE: "no_route",
          HStatus.LOCAL_TIMEOUT: "timeouts", HStatus.LOCAL_ERROR: "error"}
LPNI_KEY = {HStatus.REMOTE_DROPPED: "dropped", HStatus.REMOTE_ERROR: "error",
            HStatus.REMOTE_TIMEOUT: "timeout", HStatus.NETWORK_TIMEOUT: "network_timeout"}


# ---------------------------------------------------------------------- arithmetic (§3.1)
def set_ni_health(ni: LNetNI, value: int) -> None:
    """Set a local NI's health; 0 -> status DOWN, 1000 -> UP (LU-19476, spec §3.1/3.6)."""
    ni.healthv = value
    if value == 0:
        ni.status = LNET_NI_STATUS_DOWN
    elif value == LNET_MAX_HEALTH_VALUE:
        ni.status = LNET_NI_STATUS_UP


def inc_ni(eng: LNetEngine, ni: LNetNI) -> None:
    """``lnet_inc_ni_healthv``: +sensitivity, capped at 1000."""
    if ni.is_lo:
        return
    set_ni_health(ni, min(LNET_MAX_HEALTH_VALUE, ni.healthv + eng.tunables.health_sensitivity))


def dec_ni(eng: LNetEngine, ni: LNetNI) -> None:
    """``lnet_dec_ni_healthv_locked``: −sensitivity, never below 0 (hlt lnt-020)."""
    if ni.is_lo or eng.tunables.health_sensitivity == 0:
        return
    set_ni_health(ni, max(0, ni.healthv - eng.tunables.health_sensitivity))


def inc_lpni(eng: LNetEngine, lpni: PeerNI) -> None:
    lpni.healthv = min(LNET_MAX_HEALTH_VALUE, lpni.healthv + eng.tunables.health_sensitivity)


def dec_lpni(eng: LNetEngine, lpni: PeerNI) -> None:
    lpni.healthv = max(0, lpni.healthv - eng.tunables.health_sensitivity)


def local_failure(eng: LNetEngine, ni: LNetNI, now: float, why: str = "") -> None:
    """``lnet_handle_local_failure``: decrement and queue for local recovery (spec §3.5);
    ``why`` (the hstatus) goes out as an ``ni_error`` notice (hlth-lnt-udev, notify.py)."""
    dec_ni(eng, ni)
    recovery.ni_enqueue(eng, ni, now)
    if not ni.is_lo:
        notify.ni_error(eng, ni, why)


def remote_failure(eng: LNetEngine, lpni: PeerNI, now: float, why: str = "") -> None:
    """``lnet_handle_remote_failure_locked``: decrement and queue for peer recovery; an
    ``lpni_error`` notice (hlth-lnt-udev)."""
    dec_lpni(eng, lpni)
    recovery.lpni_enqueue(eng, lpni, now)
    notify.lpni_error(eng, lpni, why)


def is_router(eng: LNetEngine, lpni: PeerNI) -> bool:
    """``lnet_isrouter(lpni) || lnet_routing_enabled()`` (spec §3.1 special case)."""
    return lpni.peer.rtr_refcount > 0 or bool(eng.tunables.routing)


def remote_health_applies(eng: LNetEngine, lpni: PeerNI) -> bool:
    """``handle_remote_health`` (spec §3.2 step 3)."""
    if lpni.peer.nnis <= 1 and not is_router(eng, lpni):
        return False
    return eng.ni_by_nid(lpni.nid) is None


# ---------------------------------------------------------------------- finalize (§3.2)
def rx_ok(eng: LNetEngine, ni: LNetNI, lpni: PeerNI, now: float) -> None:
    """OK branch for a received message: both ends proved alive (spec §3.2 OK row)."""
    inc_ni(eng, ni)
    lpni.ping_count = 0
    ni.ping_count = 0
    if is_router(eng, lpni):
        lpni.healthv = LNET_MAX_HEALTH_VALUE
    else:
        inc_lpni(eng, lpni)
        recovery.lpni_enqueue(eng, lpni, now)


def count(eng: LNetEngine, msg: Msg, ni: LNetNI, lpni: PeerNI | None, hstatus: HStatus) -> None:
    """``lnet_incr_hstats``: global + NI + peer NI counters of one health status."""
    if hstatus == HStatus.OK:
        if msg.retry_count:
            eng.counters.bump("successful_resends")
        return
    eng.counters.bump(GLOBAL_KEY[hstatus])
    if hstatus in NI_KEY:
        key = NI_KEY[hstatus]
        setattr(ni.hstats, key, getattr(ni.hstats, key) + 1)
    if hstatus == HStatus.NETWORK_TIMEOUT:  # testbed-only, views.testbed_stats
        ni.hstats.network_timeout += 1
    if hstatus in LPNI_KEY and lpni is not None:
        key = LPNI_KEY[hstatus]
        setattr(lpni.hstats, key, getattr(lpni.hstats, key) + 1)


def health_check(eng: LNetEngine, msg: Msg, now: float) -> tuple[bool, list[Action]]:
    """``lnet_health_check`` for a tx-committed message; returns (resend?, log actions)."""
    ni, lpni = msg.txni, msg.txpeer
    assert ni is not None and lpni is not None
    hstatus = msg.hstatus
    if now > msg.deadline and hstatus != HStatus.OK:
        return False, []  # late failures change nothing (spec §3.2 step 1, §11.3)
    count(eng, msg, ni, lpni, hstatus)
    if hstatus == HStatus.OK:
        inc_ni(eng, ni)
        return False, []
    local_resend = len(eng.local_nis()) >= 2
    remote_resend = lpni.peer.nnis > 1
    remote_health = remote_health_applies(eng, lpni)
    if hstatus in LOCAL_CLASSES or hstatus == HStatus.NETWORK_TIMEOUT:
        local_failure(eng, ni, now, hstatus.name)
    notify_dead: list[Action] = []
    if hstatus in REMOTE_CLASSES and remote_health:
        before = lpni.healthv
        remote_failure(eng, lpni, now, hstatus.name)
        notify_dead = eng.router.health_fell(lpni, before)  # rtr-mr-notify-dead (seed 002)
    retryable = ((hstatus in LOCAL_RESENDABLE and local_resend)
                 or (hstatus == HStatus.REMOTE_DROPPED and remote_resend))
    if not retryable or msg.recovery or msg.no_resend:
        return False, notify_dead
    if msg.retry_count >= eng.tunables.retry_count:
        if eng.tunables.retry_count:
            eng.counters.bump("failed_resends")
        return False, notify_dead
    # dbg-115: say which pair failed; the new pair is logged by the resend itself
    return True, [*notify_dead, Log(level="error", text=(
        f"{msg.type.name} from {ni.nid} to {lpni.nid} failed: {hstatus.name}; "
        f"resending (try {msg.retry_count + 2})"))]
