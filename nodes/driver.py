"""The node driver: what every runtime does around one engine, written once.

Theory of operation (STYLE rule 1: "the daemon driver and the sim driver differ only in where
``now`` comes from and how actions are carried out"): the engine is sans-I/O; after each call
its actions must be carried out and its timer re-armed. ``NodeDriver`` does that for the
asyncio node daemon (``nodes/daemon/runtime.py``) and for the simulator's nodes
(``testbed/sim/fabric.py``), which each supply only what touches a real socket or a real clock:

* ``now()``: the loop's monotonic clock, or the fabric's virtual one;
* ``transmit(Transmit)``: the socklnd, or the in-memory fabric;
* ``arm_timer(deadline | None)``: called only when the engine's earliest deadline changed
  (a timer that fired counts as changed), never once per call;
* ``notify_peer_down(nid)``: ``lnd_notify_peer_down`` (the socklnd closes its conns);
* ``log(Log)``: console lines; ``md_sink(MDEvent)``: every MD event (the sim's event log);
* ``notice_sink(kind, fields)``: health notices (``nodes/lnet/notify.py``, hlth-lnt-udev),
  drained after every batch of actions; with no sink nobody drains (unit harnesses);
* ``trace_sink(MsgTrace)``: the engine's message trace (TRACE-SCHEMA.md), turned on in the
  engine only when a sink is given;
* ``set_lnd_timeout(nid, seconds)``: the LND's own per-NI timeout (socklnd sock_timeout).

MD events go to waiters registered per MD handle (``watch``); what LNet decides about the LND
timeout (``lnd_timeout`` derived from transaction_timeout and retry_count, or an NI's own
``--lnd-timeout``) is kept in step here (``sync_lnd_timeouts``, ``set_lnd_timeout``). No
asyncio: a waiter is a callable, a future is the caller's business.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from nodes.lnet import actions as _actions
from nodes.lnet import notify
from nodes.lnet.actions import Action, Log, MDEvent, NotifyPeerDown, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net

#: the engine's message trace action (TRACE-SCHEMA.md); None until the engine emits it
MSG_TRACE: type | None = getattr(_actions, "MsgTrace", None)
_UNARMED = float("nan")  # the armed deadline of a driver whose timer must be (re)armed

Waiter = Callable[[MDEvent], None]


class Runtime(Protocol):
    """What the daemon's command modules (``nodes/daemon/lnetctl_*.py``, ``lctl_cmd.py``)
    need of a node: ``NodeRuntime`` (daemon) and ``SimRuntime`` (sim) both offer it."""

    engine: LNetEngine

    def now(self) -> float: ...
    def execute(self, actions: list[Action]) -> None: ...

    def wait_final(self, start: Callable[[], tuple[int, list[Action]]]
                   ) -> Coroutine[Any, Any, list[MDEvent]]: ...

    def net_add(self, net: Net, interface: str, **kw: Any) -> Coroutine[Any, Any, NID]: ...
    def net_del(self, net: Net, interface: str | None) -> Coroutine[Any, Any, None]: ...
    def unconfigure(self) -> Coroutine[Any, Any, None]: ...
    def set_lnd_timeout(self, net: Net, seconds: int) -> int: ...
    def lnd_link(self, nid: NID, up: bool) -> bool: ...


class NodeDriver:
    """Carries out one engine's actions; see the module docstring for the callbacks."""

    def __init__(self, engine: LNetEngine, *, now: Callable[[], float],
                 transmit: Callable[[Transmit], None],
                 arm_timer: Callable[[float | None], None],
                 notify_peer_down: Callable[[NID], None],
                 log: Callable[[Log], None] | None = None,
                 md_sink: Callable[[MDEvent], None] | None = None,
                 notice_sink: Callable[[str, dict[str, Any]], None] | None = None,
                 trace_sink: Callable[[Any], None] | None = None,
                 set_lnd_timeout: Callable[[NID, float], None] | None = None) -> None:
        self.engine = engine
        self.now = now
        self._transmit = transmit
        self._arm_timer = arm_timer
        self._notify_peer_down = notify_peer_down
        self._log = log
        self.md_sink = md_sink
        self.notice_sink = notice_sink
        self.trace_sink = trace_sink
        self._set_lnd_timeout = set_lnd_timeout
        if trace_sink is not None and hasattr(engine, "trace_messages"):
            engine.trace_messages = True
        self.waiters: dict[int, Waiter] = {}
        #: per-NI socklnd sock_timeout (``net set --lnd-timeout``); absent = LNet's lnd_timeout
        self.sock_timeout: dict[NID, int] = {}
        self._lnet_lnd_timeout = engine.tunables.lnd_timeout
        self._armed: float | None = _UNARMED

    # ---------------------------------------------------------------- engine plumbing
    def run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Call an engine entry point that returns actions (or (value, actions))."""
        result = fn(*args, **kw)
        if isinstance(result, tuple):
            value, actions = result
        else:
            value, actions = None, result
        self.execute(actions or [])
        return value

    def execute(self, actions: list[Action]) -> None:
        """Carry out ``actions`` in order, then drain notices, sync LND timeouts, re-arm."""
        for act in actions:
            kind = type(act)
            if kind is Transmit:
                self._transmit(act)  # type: ignore[arg-type]
            elif kind is MDEvent:
                self._md_event(act)  # type: ignore[arg-type]
            elif kind is Log:
                if self._log is not None:
                    self._log(act)  # type: ignore[arg-type]
            elif kind is NotifyPeerDown:  # lnd_notify_peer_down (seed 002)
                self._notify_peer_down(act.lpni)  # type: ignore[attr-defined]
            elif kind is MSG_TRACE and self.trace_sink is not None:
                self.trace_sink(act)
        self.flush_notices()
        self.sync_lnd_timeouts()
        self.rearm()

    def _md_event(self, ev: MDEvent) -> None:
        if self.md_sink is not None:
            self.md_sink(ev)
        waiter = self.waiters.get(ev.handle)
        if waiter is not None:
            if ev.unlinked:
                del self.waiters[ev.handle]
            waiter(ev)

    def watch(self, handle: int, callback: Waiter) -> None:
        """Call ``callback`` with every MD event of ``handle`` until it is unlinked."""
        self.waiters[handle] = callback

    def flush_notices(self) -> None:
        """Hand the engine's health notices to the sink (notify.py, hlth-lnt-udev)."""
        if self.notice_sink is None:
            return
        for kind, fields in notify.drain(self.engine):
            self.notice_sink(kind, fields)

    # ---------------------------------------------------------------- timer
    def rearm(self) -> None:
        """Re-arm the timer if the engine's earliest deadline moved."""
        deadline = self.engine.next_deadline()
        if deadline != self._armed:  # (NaN: never equal, so an unarmed driver arms)
            self._armed = deadline
            self._arm_timer(deadline)

    def on_timer(self) -> None:
        """The armed deadline came: run the engine's timers."""
        self._armed = _UNARMED
        self.execute(self.engine.handle_timer(self.now()))

    # ---------------------------------------------------------------- LND timeouts
    def sync_lnd_timeouts(self) -> None:
        """``ksocknal_timeout()`` = ``sock_timeout ?: lnet_get_lnd_timeout()``: an NI without
        its own ``--lnd-timeout`` follows LNet's ``lnd_timeout`` (max((tt-1)/(rc+1), 1)) as
        transaction_timeout and retry_count change (seed 003 hlth-lnd-tx-timeout-from-lnet;
        the socklnd's ``sock_timeout`` defaults to 0, docs/differences.md)."""
        derived = self.engine.tunables.lnd_timeout
        if derived == self._lnet_lnd_timeout:
            return
        self._lnet_lnd_timeout = derived
        for ni in self.engine.local_nis():
            if not ni.is_lo and ni.nid not in self.sock_timeout:
                ni.lnd_timeout = derived
                if self._set_lnd_timeout is not None:
                    self._set_lnd_timeout(ni.nid, float(derived))

    def ni_added(self, nid: NID) -> None:
        """A new NI starts with sock_timeout 0: LNet's lnd_timeout."""
        self.sock_timeout.pop(nid, None)
        ni = self.engine.ni_by_nid(nid)
        if ni is not None:
            ni.lnd_timeout = self.engine.tunables.lnd_timeout

    def set_lnd_timeout(self, net: Net, seconds: int) -> int:
        """``lnetctl net set --net N --lnd-timeout S``: the LND timeout of every NI of ``net``
        (socklnd connect/stale/progress timeout, and the engine's message deadline, spec
        §3.4); 0 goes back to LNet's lnd_timeout. Returns how many NIs changed."""
        count = 0
        for ni in self.engine.local_nis():
            if ni.nid.net == net:
                if seconds:
                    self.sock_timeout[ni.nid] = seconds
                else:  # 0: back to LNet's lnd_timeout (ksocknal_timeout)
                    self.sock_timeout.pop(ni.nid, None)
                ni.lnd_timeout = seconds or self.engine.tunables.lnd_timeout
                if self._set_lnd_timeout is not None:
                    self._set_lnd_timeout(ni.nid, float(ni.lnd_timeout))
                count += 1
        return count

    # ---------------------------------------------------------------- link state
    def link_event(self, nid: NID, up: bool, cause: str = "carrier") -> None:
        """``ksocknal_handle_link_state_change`` after the LND did its part: the NI's fatal
        state follows the link (hlt-005/010; ``cause``: ``carrier`` or ``simulated``)."""
        self.execute(self.engine.ni_set_fatal(nid, not up, self.now(), cause))


def trace_fields(act: Any) -> dict[str, Any]:
    """A message trace action as JSON-ready fields (NIDs as text; TRACE-SCHEMA.md)."""
    out = {}
    for f in dataclasses.fields(act):
        value = getattr(act, f.name)
        out[f.name] = value if value is None or isinstance(value, bool | int | float | str
                                                           | dict | list) else str(value)
    return out
