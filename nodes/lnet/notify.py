"""Health notices: the structured events LNet would raise to user space (hlth-lnt-udev).

Theory of operation: seed 003 asks LNet to "use UDEV events to propagate errors detected on a
local or peer NI". The engine has no I/O, so it queues *notices* (``kind``, ``fields``) here
and the driver drains them after every engine call (``drain``) and writes them where user
space can consume them: the node daemon appends them to the testbed event log
(``events.jsonl``, ``testbed events --follow``), the sim backend to its in-memory log. The
driver stamps the time.

Kinds (every one carries ``nid``; peer NI kinds also the peer's ``peer`` primary NID):

* ``ni_error`` / ``lpni_error``: a failure was blamed on the local NI / peer NI
  (``hstatus`` as ``lnet_health_check`` classified it, or ``RESPONSE_TIMEOUT``), with the
  ``health`` value after the decrement (spec §3.2);
* ``ni_link``: the LND reported the NI's link ``down``/``up`` (``cause``: ``carrier`` from the
  link watcher, ``simulated`` from the ``lctl net_ni_down|up`` hook, hlth-dbg-sim-ni-*);
* ``ni_status`` / ``lpni_status``: what ``net show`` / ``peer show`` would show changed:
  the NI's ``status`` (up/down) or whether its ``health`` is full (``healthy``).

* ``ni_health`` / ``lpni_health``: every change of a health value, with ``old``, ``new`` and
  the ``cause`` (``error``, ``ok``, ``recovery``, ``manual``, ``reset``), raised by
  ``health.py``, the one writer of health values (TRACE-SCHEMA);
* ``route_state`` (``net``, ``gateway``, ``state`` up/down, ``reason``) and ``routing``
  (``enabled``), raised by the router.

Status changes are found by comparing each local NI (and each peer NI that had an error or a
manual health change) with what was last published, at drain time. The comparison runs only
after something that can move a status or a health value said so (``touch``: the NI state
and health writers do), so a drain after an ordinary message costs nothing. The queue is
bounded: an engine nobody drains (unit harnesses) keeps the latest ``MAX_PENDING`` notices.

"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI

MAX_PENDING: Final = 4096
Notice = tuple[str, dict[str, Any]]


class Notices:
    """Pending notices of one engine, and the NI / peer NI states last published.

    ``local_nis`` and ``find_lpni`` (wired by the engine) read the live NI and peer NI
    tables at drain time."""

    def __init__(self, local_nis: Callable[[], list[LNetNI]] | None = None,
                 find_lpni: Callable[[Any], PeerNI | None] | None = None) -> None:
        self.pending: deque[Notice] = deque(maxlen=MAX_PENDING)
        # local NI -> ((fatal, status, health), (status shown, healthy)) last published
        self.ni_state: dict[LNetNI, tuple[tuple[bool, int, int], tuple[str, bool]]] = {}
        self.lpni_watch: dict[PeerNI, bool] = {}  # peer NI -> healthy as last published
        self.local_nis = local_nis or (lambda: [])
        self.find_lpni = find_lpni or (lambda nid: None)
        self.dirty = True  # something may have moved since the last sweep

    def emit(self, kind: str, **fields: Any) -> None:
        self.pending.append((kind, fields))

    def touch(self) -> None:
        """A status, link state, health value or the NI table may have changed."""
        self.dirty = True

    def watch_lpni(self, lpni: PeerNI) -> None:
        """Follow ``lpni``'s health until it is published healthy again."""
        self.lpni_watch.setdefault(lpni, True)
        self.dirty = True

    def ni_error(self, ni: LNetNI, hstatus: str) -> None:
        self.emit("ni_error", nid=str(ni.nid), hstatus=hstatus, health=ni.healthv)

    def lpni_error(self, lpni: PeerNI, hstatus: str) -> None:
        self.emit("lpni_error", nid=str(lpni.nid), peer=str(lpni.peer.primary_nid),
                  hstatus=hstatus, health=lpni.healthv)
        self.watch_lpni(lpni)

    # ------------------------------------------------------------------ the sweep
    def sweep(self) -> None:
        """Publish the status changes of local NIs and watched peer NIs since the last
        drain (nothing to do unless ``touch`` was called)."""
        if not self.dirty:
            return
        self.dirty = False
        count = 0
        for ni in self.local_nis():
            count += 1
            key = (ni.fatal_error, ni.status, ni.healthv)
            old = self.ni_state.get(ni)
            if old is not None and old[0] == key:
                continue  # the common case: nothing moved since the last drain
            state = (ni.status_str, ni.healthv >= LNET_MAX_HEALTH_VALUE)
            self.ni_state[ni] = (key, state)
            if (old is None and state != ("up", True)) or (old is not None and old[1] != state):
                self.emit("ni_status", nid=str(ni.nid), status=state[0], healthy=state[1],
                          health=ni.healthv, fatal_error=int(ni.fatal_error))
        if count != len(self.ni_state):  # an NI was deleted
            live = set(self.local_nis())
            for ni in [k for k in self.ni_state if k not in live]:
                del self.ni_state[ni]
        for lpni, was in list(self.lpni_watch.items()):
            if self.find_lpni(lpni.nid) is not lpni:
                del self.lpni_watch[lpni]  # peer NI deleted
                continue
            healthy = lpni.healthv >= LNET_MAX_HEALTH_VALUE
            if healthy != was:
                self.emit("lpni_status", nid=str(lpni.nid), peer=str(lpni.peer.primary_nid),
                          healthy=healthy, health=lpni.healthv)
            if healthy:
                del self.lpni_watch[lpni]
            else:
                self.lpni_watch[lpni] = healthy

    def drain(self) -> list[Notice]:
        """Every notice since the last drain, status changes included, oldest first."""
        self.sweep()
        pending = self.pending
        if not pending:
            return []
        out = list(pending)
        pending.clear()
        return out


class _HasNotices(Protocol):
    @property
    def notices(self) -> Notices: ...


def drain(eng: _HasNotices) -> list[Notice]:
    """Every notice of ``eng`` since the last drain, oldest first (the drivers' entry point)."""
    return eng.notices.drain()
