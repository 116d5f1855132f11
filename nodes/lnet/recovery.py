"""Recovery queues and recovery pings, run by the monitor tick (spec §3.5, LU-13569).

Theory of operation: a local NI or peer NI whose health drops below 1000 is put on a recovery
queue (``ni_enqueue``/``lpni_enqueue``) with ``next_ping = now + interval(ping_count)``.
Every monitor tick (1 s, driven by the engine's ``next_deadline``/``handle_timer``) each queue
is walked: entries back at 1000 (or deleted) leave; entries whose ``next_ping`` has come and
that have no ping outstanding get a recovery ping, ``ping_count += 1`` and
``next_ping = now + interval(ping_count)`` where ``interval(n) = 2**n`` up to
``floor(log2(max_recovery_ping_interval))``, then ``max_recovery_ping_interval``.

A recovery ping is a GET on portal 0 with the ping match bits, sent non-MR to the exact NID,
tracked for a response and never resent (``Msg.recovery``). Peer NI: the REPLY's own receive
health check raises the peer NI's health. Local NI: real LNet pings the NI's own NID through
its LND and adds +sensitivity explicitly on the REPLY; the emulation answers that ping inside
the engine (it succeeds unless the NI is in fatal state), adds exactly +sensitivity and, as
the REPLY received on the NI would, resets ``ping_count``: a recovering NI is pinged every
2 s and 0 -> 1000 takes 10 pings at sensitivity 100 (seed 004; docs/differences.md).
A failing NI (or peer NI) backs off exponentially.
Peer NIs never heard from (``last_alive == 0``) are not queued; with ``recovery_limit`` > 0 a
peer NI silent for longer than that ages out (ping_count reset, not queued). Local NIs have no
limit. Sensitivity 0 never lowers health, so nothing is queued.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nodes.lnet import nistate
from nodes.lnet.actions import Action, Log
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import MD
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI

#: ``ni_recovery_state`` / ``lpni_state`` recovery bits
RECOVERY_PENDING = 0x1
RECOVERY_FAILED = 0x2
#: the monitor thread's period (spec §0)
MONITOR_PERIOD = 1.0


def interval(eng: LNetEngine, n: int) -> int:
    """``lnet_get_next_recovery_ping``: 2**n seconds, or the maximum past the ping count."""
    max_iv = eng.tunables.max_recovery_ping_interval
    max_count = math.floor(math.log2(max_iv)) if max_iv > 0 else 0
    return max_iv if n > max_count else 1 << n


def ni_enqueue(eng: LNetEngine, ni: LNetNI, now: float, *, manual: bool = False) -> None:
    """``lnet_ni_add_to_recoveryq_locked`` (or the manual ``net set --health`` add)."""
    if ni in eng.ni_recoveryq or ni.is_lo:
        return
    if ni.healthv >= LNET_MAX_HEALTH_VALUE:
        return
    if not manual:
        ni.next_ping = now + interval(eng, ni.ping_count)
    eng.ni_recoveryq.append(ni)


def lpni_enqueue(eng: LNetEngine, lpni: PeerNI, now: float) -> None:
    """``lnet_peer_ni_add_to_recoveryq_locked`` with the last_alive and limit rules."""
    if lpni in eng.lpni_recoveryq or lpni.healthv >= LNET_MAX_HEALTH_VALUE:
        return
    if not lpni.last_alive:
        return  # never heard from: not eligible (spec §3.5, §11.7)
    limit = eng.tunables.recovery_limit
    if limit and now > lpni.last_alive + limit:
        lpni.ping_count = 0  # aged out: the next enqueue pings right away
        return
    lpni.next_ping = now + interval(eng, lpni.ping_count)
    eng.lpni_recoveryq.append(lpni)


def deadline(eng: LNetEngine) -> float | None:
    """When the monitor must tick next: never more often than once a second."""
    due = [x.next_ping for x in (*eng.ni_recoveryq, *eng.lpni_recoveryq)
           if not x.recovery_state & RECOVERY_PENDING or x.healthv >= LNET_MAX_HEALTH_VALUE]
    if not due:
        return None
    return max(min(due), eng.mt_last + MONITOR_PERIOD)


def tick(eng: LNetEngine, now: float) -> list[Action]:
    """One monitor pass over both queues (``lnet_recover_local_nis``/``_peer_nis``)."""
    eng.mt_last = now
    return _recover_local(eng, now) + _recover_peers(eng, now)


def _unlink(eng: LNetEngine, md: MD | None, now: float) -> list[Action]:
    return [] if md is None else eng.unlink(now, md.handle)


def _recover_local(eng: LNetEngine, now: float) -> list[Action]:
    actions: list[Action] = []
    for ni in list(eng.ni_recoveryq):
        if ni.healthv >= LNET_MAX_HEALTH_VALUE or eng.ni_by_nid(ni.nid) is not ni:
            eng.ni_recoveryq.remove(ni)
            ni.recovery_state = 0
            continue
        if ni.recovery_state & RECOVERY_FAILED:
            ni.recovery_state &= ~RECOVERY_FAILED
        if now < ni.next_ping or ni.recovery_state & RECOVERY_PENDING:
            continue
        eng.ni_recoveryq.remove(ni)
        ni.ping_count += 1
        ni_enqueue(eng, ni, now)
        ok = not ni.fatal_error
        actions.append(Log(level="info", text=(
            f"recovery ping of local NI {ni.nid} #{ni.ping_count}: "
            f"{'ok' if ok else 'failed (-ENETDOWN)'}")))
        if ok:
            # lnet_handle_recovery_reply: +sensitivity on the NI explicitly; the REPLY that
            # real LNet receives on the NI also resets its ping_count (spec §3.2 OK row)
            from nodes.lnet.health import inc_ni

            inc_ni(eng, ni)
            ni.ping_count = 0
            actions += nistate.log_status(eng, ni, "recovery ping")  # dbg-110
        else:
            ni.recovery_state |= RECOVERY_FAILED
    return actions


def _recover_peers(eng: LNetEngine, now: float) -> list[Action]:
    actions: list[Action] = []
    for lpni in list(eng.lpni_recoveryq):
        if (lpni.healthv >= LNET_MAX_HEALTH_VALUE
                or eng.peers.find_lpni(lpni.nid) is not lpni):
            eng.lpni_recoveryq.remove(lpni)
            if lpni.recovery_state & RECOVERY_PENDING:
                actions += _unlink(eng, lpni.ping_md, now)
            lpni.recovery_state = 0
            continue
        if lpni.recovery_state & RECOVERY_FAILED:
            actions += _unlink(eng, lpni.ping_md, now)
            lpni.recovery_state &= ~RECOVERY_FAILED
        if now < lpni.next_ping or lpni.recovery_state & RECOVERY_PENDING:
            continue
        lpni.recovery_state |= RECOVERY_PENDING
        eng.lpni_recoveryq.remove(lpni)
        handle, acts = eng.recovery_ping(now, lpni.nid, owner=("lpni", lpni.nid))
        lpni.ping_md = eng.md_by_handle(handle)
        lpni.ping_count += 1
        lpni_enqueue(eng, lpni, now)
        actions += acts
    return actions


def on_md_event(eng: LNetEngine, md: MD, kind: str, status: int) -> list[Action]:
    """``lnet_mt_event_handler``/``lnet_handle_recovery_reply`` for a peer NI recovery ping."""
    owner = md.owner
    assert owner is not None
    lpni = eng.peers.find_lpni(owner[1])
    if lpni is None:
        return []
    if kind != "SEND" or status != 0:
        lpni.recovery_state &= ~RECOVERY_PENDING
    if status != 0:
        lpni.recovery_state |= RECOVERY_FAILED
        return [Log(level="info", text=f"peer NI {lpni.nid} recovery ping failed: {status}")]
    return []
