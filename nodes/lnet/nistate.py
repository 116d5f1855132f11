"""Local NI state: status (up/down), link (fatal) state, and one error-level log line for
every change of a local NI's state (seed 000 dbg-110).

Theory of operation: a local NI's status moves for many reasons (its health reaching 0 or
1000, spec §3.1; the router checker's ``lnet_update_ni_status_locked``, §6.4; traffic on a
router, §6.5; the link coming back, §3.5). Every one of them goes through ``set_status``,
the only writer of ``LNetNI.status``, and the link state through ``set_fatal``
(``lnet_set_link_fatal_state``), the only writer of ``fatal_error``. ``NIState`` remembers
the status last logged for every NI; each status that moved, each NI added and each NI
removed gives one ``Log(level="error")``. Code that knows why a status moved (a send's health
status, a recovery ping) logs through ``log_status`` with that reason; the engine logs the
rest (``status_logs``) at the end of ``handle``, ``handle_timer`` and ``ni_set_fatal``.
Changes made by calls that return no actions (``net add/del``, ``net set --health``) arm the
``NI_LOG`` timer at once, so the next tick logs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from nodes.lnet.actions import Action, Log
from nodes.lnet.ni import LNET_NI_STATUS_UP, LNetNI
from nodes.lnet.timers import NI_LOG, Timers
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.notify import Notices
    from nodes.lnet.recovery import Recovery

_KEY: Final = (NI_LOG, 0)


def _word(status: int) -> str:
    return "up" if status == LNET_NI_STATUS_UP else "down"


class NIState:
    """The status last logged per local NI, why a pending change happened if known, and
    the NIs whose state may differ from what was logged."""

    def __init__(self, live: Callable[[], list[LNetNI]], timers: Timers,
                 notices: Notices) -> None:
        self.live = live
        self.timers = timers
        self.notices = notices
        self.logged: dict[LNetNI, int] = {}
        self.why: dict[LNetNI, str] = {}
        self._dirty: set[LNetNI] = set()
        self._removed = False
        self._console: list[Action] = []  # console lines of NI configuration (``warn``)

    # ------------------------------------------------------------------ writers
    def set_status(self, ni: LNetNI, status: int, why: str | None = None) -> None:
        """The one writer of ``ni.status``; ``why`` is kept for the log line."""
        if ni.status == status:
            return
        ni.status = status
        if why is not None:
            self.why[ni] = why
        self.notices.touch()
        self._mark(ni)

    def set_fatal(self, ni: LNetNI, fatal: bool) -> bool:
        """The one writer of ``ni.fatal_error``; returns whether it changed."""
        if ni.fatal_error == fatal:
            return False
        ni.fatal_error = fatal
        if fatal:
            ni.link_events.down += 1
        else:
            ni.link_events.up += 1
        self.notices.touch()
        return True

    def link_change(self, ni: LNetNI, fatal: bool, now: float, cause: str,
                    recovery: Recovery) -> list[Action]:
        """``lnet_set_link_fatal_state`` (hlt lnd-010). Each change counts as a local
        interface down/up event (hlth-stt-ni-down/up-events) and raises an ``ni_link`` notice
        (``cause``: ``carrier`` from the link watcher, ``simulated`` from ``lctl
        net_ni_down|up``). A fatal NI loses to every non-fatal NI in selection (spec §2.4)
        and shows ``status: down``; clearing it makes the NI selectable again, its status
        ``up`` when its health is 1000 (config.c), otherwise it is queued for local recovery,
        whose pings now succeed and raise it (spec §3.5). The status changes in place in the
        ping buffer: no rebuild, no push (spec §5.1)."""
        if not self.set_fatal(ni, fatal):
            return []
        word = "down" if fatal else "up"
        self.notices.emit("ni_link", nid=str(ni.nid), link=word, cause=cause)
        if not fatal:
            if ni.healthv == LNET_MAX_HEALTH_VALUE:
                self.set_status(ni, LNET_NI_STATUS_UP)
            else:
                recovery.ni_enqueue(ni, now, manual=True)
        return [Log(level="error", text=f"local NI {ni.nid} link {word}: fatal state "
                                        f"{'set' if fatal else 'cleared'}"),
                *self.log_status(ni, f"link {word}")]

    def added(self, ni: LNetNI) -> None:
        self.notices.touch()
        self._mark(ni)

    def removed(self, ni: LNetNI) -> None:
        self.notices.touch()
        self._dirty.discard(ni)
        if ni in self.logged:
            self._removed = True
        self._rearm()

    def warn(self, text: str) -> None:
        """A console warning about NI configuration (api-ni.c ``CWARN``), logged by the next
        tick like the other NI lines."""
        self._console.append(Log(level="warning", text=text))
        self._rearm()

    def _mark(self, ni: LNetNI) -> None:
        self._dirty.add(ni)
        self._rearm()

    def _rearm(self) -> None:
        if self.pending:
            self.timers.arm(_KEY, 0.0)
        else:
            self.timers.cancel(_KEY)

    @property
    def pending(self) -> bool:
        """A change ``status_logs`` would log (the engine's deadline is then due at once)."""
        if not self._dirty:  # (the common case: no generator per engine call)
            return self._removed
        logged = self.logged
        return self._removed or bool(self._console) or any(
            logged.get(ni) != ni.status for ni in self._dirty)

    # ------------------------------------------------------------------ log lines
    def status_moved(self, ni: LNetNI) -> bool:
        """Whether ``log_status`` would log a line for ``ni`` (asked per message first)."""
        old = self.logged.get(ni)
        return old is not None and old != ni.status

    def log_status(self, ni: LNetNI, why: str) -> list[Action]:
        """dbg-110: the error line for ``ni``'s status change, if it moved since last logged.
        An NI not announced yet is left to ``status_logs`` (its "added" line carries it)."""
        old = self.logged.get(ni)
        if old is None or old == ni.status:
            return []
        self.logged[ni] = ni.status
        self.why.pop(ni, None)
        self._dirty.discard(ni)
        self._rearm()
        return [Log(level="error", text=f"local NI {ni.nid} status {_word(ni.status)}: health "
                                        f"{ni.healthv} after {why}")]

    def status_logs(self) -> list[Action]:
        """Every local NI state change not logged yet: added, removed, status up/down."""
        if not self.pending:
            return []
        logs: list[Action] = []
        console, self._console = self._console, []
        live = self.live()
        logged = self.logged
        for ni in live:
            if ni not in logged:
                logged[ni] = ni.status
                logs.append(Log(level="error", text=f"local NI {ni.nid} added on "
                                                    f"{ni.interface}: status {_word(ni.status)}"))
            elif logged[ni] != ni.status:
                logs += self.log_status(ni, self.why.get(ni, "a health change"))
        if len(logged) != len(live):
            alive = set(live)
            for ni in [n for n in logged if n not in alive]:
                del logged[ni]
                self.why.pop(ni, None)
                logs.append(Log(level="error", text=f"local NI {ni.nid} removed from "
                                                    f"{ni.interface}"))
        self._dirty.clear()
        self._removed = False
        self._rearm()
        # the CWARN of lnet_add_net_common follows lnet_startup_lndni's "Added LNI"
        return logs + console
