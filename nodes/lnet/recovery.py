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
health check raises the peer NI's health. Local NI (lib-move.c ``lnet_recover_local_nis``):
the ping goes to the NI's own NID through the LND like any other message (from the best NI on
that net, so a sick NI is reached over a healthy path, sanity-lnet 218), where LNet drop rules
and link failures apply; the monitor marks it PENDING, and ``lnet_handle_recovery_reply``
(``on_ni_md_event``) clears PENDING on the REPLY or a failed send, marks FAILED on a failure
(the MD is unlinked at the next pass) and adds +sensitivity on a REPLY, on top of what the
messages' own health checks add: the GET the NI receives and the REPLY it sends are one
message, checked once (lib-msg.c ``lnet_health_check``), so a success adds 2 x sensitivity
when a healthy sibling NI pings it, 4 x when the NI is alone on its net and pings itself.
That check (and the REPLY received on a NI) resets its ``ping_count``.
Seed 004's pre-2.15 recovery (a ping every N seconds, answered inside the engine, exactly
+sensitivity each, so 0 -> 1000 in 10 pings at sensitivity 100) stays behind the testbed-only
knob ``testbed_seed_recovery_interval`` N > 0 (``Tunables``, docs/differences.md); today's
``recovery_interval`` does nothing (api-ni.c ``recovery_interval_set``).
A failing NI (or peer NI) backs off exponentially.
Peer NIs never heard from (``last_alive == 0``) are not queued; with ``recovery_limit`` > 0 a
peer NI silent for longer than that ages out (ping_count reset, not queued). Local NIs have no
limit. Sensitivity 0 never lowers health, so nothing is queued.

``Recovery`` owns both queues and the monitor tick's ``MONITOR`` timer (``timers.py``), which
it re-arms whenever what ``deadline`` reads changes: an entry queued or leaving, a ping sent
or answered, the tick itself, or a pending entry's health crossing 1000 (``Health`` says so).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from nodes.lnet.actions import Action, Log
from nodes.lnet.hdr import Payload
from nodes.lnet.msg import MD, MDOwner, OwnerRole
from nodes.lnet.nid import NID
from nodes.lnet.timers import MONITOR, Timers
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE, Tunables

if TYPE_CHECKING:
    from nodes.lnet.health import Health
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.nistate import NIState
    from nodes.lnet.peer import PeerNI, PeerTable

#: ``ni_recovery_state`` / ``lpni_state`` recovery bits
RECOVERY_PENDING: Final = 0x1
RECOVERY_FAILED: Final = 0x2
#: a recovery queue's entry: a local NI or a peer NI
_Entry = TypeVar("_Entry", bound="LNetNI | PeerNI")
#: the monitor thread's period (spec §0)
MONITOR_PERIOD: Final = 1.0
_KEY: Final = (MONITOR, 0)

#: sends a recovery ping: (now, dst, owner) -> (MD handle, actions) (``LNetEngine``)
PingFn = Callable[[float, NID, MDOwner], tuple[int, list[Action]]]
#: unlinks an MD: (now, handle) -> actions
UnlinkFn = Callable[[float, int], list[Action]]


class _HasTunables(Protocol):
    @property
    def tunables(self) -> Tunables: ...


def interval(eng: _HasTunables, n: int) -> int:
    """``lnet_get_next_recovery_ping`` for an engine (``next_interval``)."""
    return next_interval(eng.tunables, n)


def next_interval(tunables: Tunables, n: int) -> int:
    """``lnet_get_next_recovery_ping``: 2**n seconds, or the maximum past the ping count."""
    max_iv = tunables.max_recovery_ping_interval
    max_count = math.floor(math.log2(max_iv)) if max_iv > 0 else 0
    return max_iv if n > max_count else 1 << n


class Recovery:
    """``ln_mt_localNIRecovq`` and ``ln_mt_peerNIRecovq`` and the monitor tick."""

    def __init__(self, tunables: Tunables, timers: Timers, health: Health,
                 nistate: NIState) -> None:
        self.tunables = tunables
        self.timers = timers
        self.health = health
        self.nistate = nistate
        self.ni_queue: list[LNetNI] = []      # ln_mt_localNIRecovq (spec §3.5)
        self.lpni_queue: list[PeerNI] = []    # ln_mt_peerNIRecovq
        self.mt_last = float("-inf")          # last monitor tick
        # wired by the engine
        self.ping: PingFn = lambda now, nid, owner: (0, [])
        self.unlink: UnlinkFn = lambda now, handle: []
        self.md_by_handle: Callable[[int], MD | None] = lambda handle: None
        self.ni_by_nid: Callable[[NID], LNetNI | None] = lambda nid: None
        self.peers: PeerTable | None = None

    # ------------------------------------------------------------------ queues
    def ni_enqueue(self, ni: LNetNI, now: float, *, manual: bool = False) -> None:
        """``lnet_ni_add_to_recoveryq_locked`` (or the manual ``net set --health`` add); like
        it, ``0@lo`` too, which only ``net set --all --health`` lowers (api-ni.c
        ``lnet_ni_set_healthv``)."""
        if ni in self.ni_queue:
            return
        if ni.healthv >= LNET_MAX_HEALTH_VALUE:
            return
        if not manual:
            ni.next_ping = now + next_interval(self.tunables, ni.ping_count)
        self.ni_queue.append(ni)
        self.rearm()

    def lpni_enqueue(self, lpni: PeerNI, now: float) -> None:
        """``lnet_peer_ni_add_to_recoveryq_locked`` with the last_alive and limit rules."""
        if lpni.healthv >= LNET_MAX_HEALTH_VALUE or lpni in self.lpni_queue:
            return
        if not lpni.last_alive:
            return  # never heard from: not eligible (spec §3.5, §11.7)
        limit = self.tunables.recovery_limit
        if limit and now > lpni.last_alive + limit:
            lpni.ping_count = 0  # aged out: the next enqueue pings right away
            return
        lpni.next_ping = now + next_interval(self.tunables, lpni.ping_count)
        self.lpni_queue.append(lpni)
        self.rearm()

    def forget_ni(self, ni: LNetNI) -> None:
        """A local NI was deleted (``net del``)."""
        if ni in self.ni_queue:
            self.ni_queue.remove(ni)
            self.rearm()

    def forget_deleted_peers(self) -> None:
        """Peer NIs no longer in the peer table leave the queue (peer del, discovery)."""
        assert self.peers is not None
        find = self.peers.find_lpni
        self.lpni_queue[:] = [p for p in self.lpni_queue if find(p.nid) is p]
        self.rearm()

    def clear(self) -> None:
        self.ni_queue.clear()
        self.lpni_queue.clear()
        self.rearm()

    # ------------------------------------------------------------------ the monitor tick
    def deadline(self) -> float | None:
        """When the monitor must tick next: never more often than once a second. An entry
        back at 1000 is due at the next pass whatever its ``next_ping``: the monitor thread
        walks both queues every second (``lnet_monitor_thread``) and drops healthy entries
        before it looks at ``next_ping`` (``lnet_recover_local_nis``/``_peer_nis``), so a
        failure after that pass queues it afresh with the interval of its reset ping count
        (explore seed 559)."""
        entries: list[LNetNI | PeerNI] = [*self.ni_queue, *self.lpni_queue]
        due = [-math.inf if x.healthv >= LNET_MAX_HEALTH_VALUE else x.next_ping
               for x in entries
               if not x.recovery_state & RECOVERY_PENDING or x.healthv >= LNET_MAX_HEALTH_VALUE]
        if not due:
            return None
        return max(min(due), self.mt_last + MONITOR_PERIOD)

    def rearm(self) -> None:
        at = self.deadline()
        if at is None:
            self.timers.cancel(_KEY)
        else:
            self.timers.arm(_KEY, at)

    def tick(self, now: float) -> list[Action]:
        """One monitor pass over both queues (``lnet_recover_local_nis``/``_peer_nis``)."""
        self.mt_last = now
        actions = self._recover_local(now) + self._recover_peers(now)
        self.rearm()
        return actions

    def _unlink(self, md: MD | None, now: float) -> list[Action]:
        return [] if md is None else self.unlink(now, md.handle)

    def _due(self, entry: _Entry, queue: list[_Entry], gone: bool, now: float,
             actions: list[Action]) -> bool:
        """The steps ``lnet_recover_local_nis`` and ``lnet_recover_peer_nis`` share for one
        queued NI or peer NI: a healthy or deleted (``gone``) one leaves ``queue``, its pending
        ping unlinked (``lnet_unlink_ni|lpni_recovery_mdh_locked``); a failed
        ping's MD is unlinked and FAILED cleared. True when a ping is due now: none pending
        and ``next_ping`` reached. The unlinks' actions are added to ``actions``."""
        if entry.healthv >= LNET_MAX_HEALTH_VALUE or gone:
            queue.remove(entry)
            if entry.recovery_state & RECOVERY_PENDING:
                actions.extend(self._unlink(entry.ping_md, now))
            entry.recovery_state = 0
            return False
        if entry.recovery_state & RECOVERY_FAILED:
            actions.extend(self._unlink(entry.ping_md, now))
            entry.recovery_state &= ~RECOVERY_FAILED
        return not (now < entry.next_ping or entry.recovery_state & RECOVERY_PENDING)

    def _recover_local(self, now: float) -> list[Action]:
        """``lnet_recover_local_nis``: one pass over the local NI recovery queue."""
        actions: list[Action] = []
        for ni in list(self.ni_queue):
            if not self._due(ni, self.ni_queue, self.ni_by_nid(ni.nid) is not ni, now, actions):
                continue
            if self.tunables.testbed_seed_recovery_interval:
                actions += self._seed_ping(ni, now)
                continue
            ni.recovery_state |= RECOVERY_PENDING
            self.ni_queue.remove(ni)
            handle, acts = self.ping(now, ni.nid, MDOwner(OwnerRole.NI_RECOVERY, ni.nid))
            ni.ping_md = self.md_by_handle(handle)
            if self.ni_by_nid(ni.nid) is not ni:
                actions += acts  # deleted meanwhile: the MD is unlinked by the next pass
                continue
            ni.ping_count += 1
            self.ni_enqueue(ni, now)
            actions += acts
        return actions

    def _seed_ping(self, ni: LNetNI, now: float) -> list[Action]:
        """Seed 004 (pre-2.15, behind ``testbed_seed_recovery_interval`` > 0): the ping is
        answered inside the engine, succeeds unless the NI is fatal, adds exactly
        +sensitivity; the next one comes that many seconds later (docs/differences.md)."""
        ni.ping_count += 1
        ok = not ni.fatal_error
        actions: list[Action] = [Log(level="info", text=(
            f"recovery ping of local NI {ni.nid} #{ni.ping_count}: "
            f"{'ok' if ok else 'failed (-ENETDOWN)'}"))]
        if ok:
            self.health.inc_ni(ni, "recovery")
            ni.ping_count = 0
            actions += self.nistate.log_status(ni, "recovery ping")  # dbg-110
        ni.next_ping = now + self.tunables.testbed_seed_recovery_interval
        self.rearm()
        return actions

    def on_ni_md_event(self, md: MD, kind: str, status: int, payload: Payload,
                       source: NID | None) -> list[Action]:
        """``lnet_mt_event_handler`` -> ``lnet_handle_recovery_reply`` for a local NI ping:
        SEND clears PENDING only when it failed; REPLY and UNLINK clear it; a failure marks
        FAILED; a REPLY adds +sensitivity to the NI pinged (``lnet_inc_ni_healthv``)."""
        assert md.owner is not None
        ni = self.ni_by_nid(md.owner.nid)
        if ni is None:
            return []
        if self._ping_result(ni, kind, status):
            return [Log(level="info", text=f"local NI ({ni.nid}) recovery failed with "
                                           f"{status}")]
        if kind != "REPLY":
            return []
        self.health.inc_ni(ni, "recovery")
        return self.nistate.log_status(ni, "recovery ping")  # dbg-110

    def _recover_peers(self, now: float) -> list[Action]:
        assert self.peers is not None
        actions: list[Action] = []
        for lpni in list(self.lpni_queue):
            gone = self.peers.find_lpni(lpni.nid) is not lpni
            if not self._due(lpni, self.lpni_queue, gone, now, actions):
                continue
            lpni.recovery_state |= RECOVERY_PENDING
            self.lpni_queue.remove(lpni)
            handle, acts = self.ping(now, lpni.nid, MDOwner(OwnerRole.LPNI_RECOVERY, lpni.nid))
            lpni.ping_md = self.md_by_handle(handle)
            lpni.ping_count += 1
            self.lpni_enqueue(lpni, now)
            actions += acts
        return actions

    def on_md_event(self, md: MD, kind: str, status: int, payload: Payload,
                    source: NID | None) -> list[Action]:
        """``lnet_mt_event_handler``/``lnet_handle_recovery_reply`` for a peer NI ping."""
        assert md.owner is not None and self.peers is not None
        lpni = self.peers.find_lpni(md.owner.nid)
        if lpni is None:
            return []
        if self._ping_result(lpni, kind, status):
            return [Log(level="info", text=f"peer NI {lpni.nid} recovery ping failed: "
                                           f"{status}")]
        return []

    def _ping_result(self, entry: LNetNI | PeerNI, kind: str, status: int) -> bool:
        """The state bits of ``lnet_handle_recovery_reply``: a SEND clears PENDING only when it
        failed, a REPLY or UNLINK always; a failure sets FAILED. Returns whether it failed."""
        if kind != "SEND" or status != 0:
            entry.recovery_state &= ~RECOVERY_PENDING
        if status != 0:
            entry.recovery_state |= RECOVERY_FAILED
        self.rearm()
        return status != 0
