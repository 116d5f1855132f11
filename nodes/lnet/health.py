"""Health: classify a finished send, move health values, decide on resend (spec §3.1-3.3).

Theory of operation: ``apply_health`` runs from finalize for every committed send. Success adds
``health_sensitivity`` to the NI (capped at 1000); each failure class decrements the local NI,
the peer NI, or both, by the sensitivity (never below 0), and only the resendable classes are
resent while ``retry_count`` allows (003: "LNet shall re-transmit messages no more than the retry
count"). Failures after the message deadline change nothing (spec §3.2 step 1). A local NI that
reaches 0 is shown ``status: down``; at 1000 it is ``up`` again (LU-19476).
Recovery queues and pings are the next layer on top of this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
_GLOBAL_KEY = {
    HStatus.LOCAL_INTERRUPT: "local_interrupt_count", HStatus.LOCAL_DROPPED: "local_dropped_count",
    HStatus.LOCAL_ABORTED: "local_aborted_count", HStatus.LOCAL_NO_ROUTE: "local_no_route_count",
    HStatus.LOCAL_TIMEOUT: "local_timeout_count", HStatus.LOCAL_ERROR: "local_error_count",
    HStatus.REMOTE_DROPPED: "remote_dropped_count", HStatus.REMOTE_ERROR: "remote_error_count",
    HStatus.REMOTE_TIMEOUT: "remote_timeout_count",
    HStatus.NETWORK_TIMEOUT: "network_timeout_count",
}
_NI_KEY = {HStatus.LOCAL_INTERRUPT: "interrupts", HStatus.LOCAL_DROPPED: "dropped",
           HStatus.LOCAL_ABORTED: "aborted", HStatus.LOCAL_NO_ROUTE: "no_route",
           HStatus.LOCAL_TIMEOUT: "timeouts", HStatus.LOCAL_ERROR: "error",
           HStatus.NETWORK_TIMEOUT: "timeouts"}
_LPNI_KEY = {HStatus.REMOTE_DROPPED: "dropped", HStatus.REMOTE_ERROR: "error",
             HStatus.REMOTE_TIMEOUT: "timeout", HStatus.NETWORK_TIMEOUT: "network_timeout"}


def inc_ni(eng: LNetEngine, ni: LNetNI) -> None:
    ni.healthv = min(LNET_MAX_HEALTH_VALUE, ni.healthv + eng.tunables.health_sensitivity)
    if ni.healthv == LNET_MAX_HEALTH_VALUE:
        ni.status = LNET_NI_STATUS_UP


def dec_ni(eng: LNetEngine, ni: LNetNI) -> None:
    ni.healthv = max(0, ni.healthv - eng.tunables.health_sensitivity)
    if ni.healthv == 0:
        ni.status = LNET_NI_STATUS_DOWN


def inc_lpni(eng: LNetEngine, lpni: PeerNI) -> None:
    lpni.healthv = min(LNET_MAX_HEALTH_VALUE, lpni.healthv + eng.tunables.health_sensitivity)


def _remote_health_applies(eng: LNetEngine, lpni: PeerNI) -> bool:
    """``handle_remote_health`` (spec §3.2 step 3)."""
    if eng.ni_by_nid(lpni.nid) is not None:
        return False
    return lpni.peer.nnis > 1 or bool(eng.tunables.routing)


def remote_failure(eng: LNetEngine, lpni: PeerNI, hstatus: HStatus, now: float) -> list[Action]:
    """``lnet_handle_remote_failure_locked``: decrement a peer NI (response timeouts too)."""
    key = _LPNI_KEY.get(hstatus)
    if key:
        setattr(lpni.hstats, key, getattr(lpni.hstats, key) + 1)
    if _remote_health_applies(eng, lpni):
        lpni.healthv = max(0, lpni.healthv - eng.tunables.health_sensitivity)
    return []


def apply_health(eng: LNetEngine, msg: Msg, now: float, rc: int,
                 hstatus: HStatus) -> tuple[bool, list[Action]]:
    """``lnet_health_check`` for a tx-committed message; returns (resend?, log actions)."""
    ni, lpni = msg.txni, msg.txpeer
    assert ni is not None and lpni is not None
    if hstatus == HStatus.OK:
        if rc == 0:
            inc_ni(eng, ni)
        return False, []
    if now > msg.deadline:
        return False, []  # late failures change nothing (spec §3.2 step 1, §11.3)
    eng.counters.bump(_GLOBAL_KEY[hstatus])
    if hstatus in LOCAL_CLASSES or hstatus == HStatus.NETWORK_TIMEOUT:
        key = _NI_KEY[hstatus]
        setattr(ni.hstats, key, getattr(ni.hstats, key) + 1)
        dec_ni(eng, ni)
    if hstatus in REMOTE_CLASSES:
        remote_failure(eng, lpni, hstatus, now)
    local_resend = len(eng.local_nis()) >= 2
    remote_resend = lpni.peer.nnis > 1
    retryable = ((hstatus in LOCAL_RESENDABLE and local_resend)
                 or (hstatus == HStatus.REMOTE_DROPPED and remote_resend))
    logs: list[Action] = []
    if retryable and not msg.recovery and not msg.no_resend:
        if msg.retry_count < eng.tunables.retry_count:
            eng.counters.bump("resend_count")
            logs.append(Log(level="error", text=(
                f"{msg.type.name} from {ni.nid} to {lpni.nid} failed: {hstatus.name}; "
                f"resending (attempt {msg.retry_count + 2})")))
            return True, logs
        if eng.tunables.retry_count:
            eng.counters.bump("failed_resends")
    return False, logs
