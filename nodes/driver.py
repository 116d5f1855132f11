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
* ``defer_rearm()``: if given, called after a batch instead of asking the deadline; the
  runtime calls ``rearm`` before it needs it (the sim: once per virtual instant);
* ``notify_peer_down(nid)``: ``lnd_notify_peer_down`` (the socklnd closes its conns);
* ``log(Log)``: console lines; ``md_sink(MDEvent)``: every MD event (the sim's event log);
* ``notice_sink(kind, fields)``: health notices (``nodes/lnet/notify.py``, hlth-lnt-udev),
  drained after every batch of actions; with no sink nobody drains (unit harnesses);
* ``trace_sink(MsgTrace)``: the engine's message trace (TRACE-SCHEMA.md), turned on in the
  engine only when a sink is given;
* ``set_lnd_timeout(nid, seconds)``: the LND's own per-NI timeout (socklnd sock_timeout),
  which ``timeouts`` (``nodes/lndtimeouts.py`` ``LndTimeouts``) keeps in step with LNet;
* ``recorder`` (``nodes/recorder.py``) and ``arm_sample(at)``: the recorder of issue 16 item 1,
  counted per Transmit (``tx``) and per receive (``receive``), sampled after every batch
  (``maybe_sample``) and from a second timer at ``next_sample()`` (``on_sample_timer``), so a
  change is in the file at most one period later even if the node then goes idle.

What the engine says only through its state is published as notices too: a ``tunable`` notice
(``name``, ``value``) for each health tunable (``HEALTH_TUNABLES``) when first drained and
whenever it changes, so ``testbed check``'s health-step rule knows the sensitivity exactly
(docs/events.md §1.3) whichever path changed it (``lnetctl set``, import, module parameter);
``ni_add``/``ni_del`` when the runtime adds or removes an NI (``ni_added``, ``ni_removed``).

MD events go to waiters registered per MD handle (``watch``), except those of an upper layer
that drives LNet itself (``upper``: lnet_selftest, ``nodes/selftest``): its MD events go to
it, the actions it returns are carried out after the batch that produced them (a loop, never
recursion: a loopback RPC completes within one call), and its deadline joins the engine's.
What LNet decides about the LND timeout (``lnd_timeout`` derived from transaction_timeout
and retry_count, or an NI's own ``--lnd-timeout``) is kept in step by ``timeouts``
(``nodes/lndtimeouts.py``), asked after a batch that moved those tunables
(``sync_lnd_timeouts``). No asyncio: a waiter is a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, Protocol

from nodes.lndtimeouts import LndTimeouts
from nodes.lnet import notify
from nodes.lnet.actions import Action, Log, MDEvent, MsgTrace, NotifyPeerDown, Transmit
from nodes.lnet.engine import LNetEngine
from nodes.lnet.events import MessageReceived
from nodes.lnet.nid import LO_NID, NID
from nodes.recorder import Recorder

_UNARMED = float("nan")  # the armed deadline of a driver whose timer must be (re)armed
#: tunables published as ``tunable`` notices (``testbed check`` judges health steps by them)
HEALTH_TUNABLES = ("health_sensitivity", "retry_count", "transaction_timeout")

Waiter = Callable[[MDEvent], None]


class UpperLayer(Protocol):
    """A sans-I/O layer above LNet on the same node (``nodes/selftest``): fed the events of
    its own MDs (``handles``) and the time, it returns more engine actions."""

    handles: Container[int]

    def on_md_event(self, ev: MDEvent, now: float) -> list[Action]: ...
    def next_deadline(self) -> float | None: ...
    def handle_timer(self, now: float) -> list[Action]: ...


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
                 set_lnd_timeout: Callable[[NID, float], None] | None = None,
                 recorder: Recorder | None = None,
                 arm_sample: Callable[[float], None] | None = None,
                 defer_rearm: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self._now = now
        self._transmit = transmit
        self._arm_timer = arm_timer
        self._defer_rearm = defer_rearm
        self._notify_peer_down = notify_peer_down
        self._log = log
        self.md_sink = md_sink
        self.notice_sink = notice_sink
        self.trace_sink = trace_sink
        if trace_sink is not None and hasattr(engine, "trace_messages"):
            engine.trace_messages = True
        self.waiters: dict[int, Waiter] = {}
        #: the LND's per-NI timeouts and socket-side module parameters (``lnd_params``)
        self.timeouts = LndTimeouts(engine, set_lnd_timeout)
        self._armed: float | None = _UNARMED
        self.recorder = recorder
        self.arm_sample = arm_sample
        self._sample_armed: float | None = None
        self._tunables: tuple[int, ...] | None = None  # HEALTH_TUNABLES last published
        #: HEALTH_TUNABLES as both published (``flush_notices``) and followed by the LND
        #: timeouts (``sync_lnd_timeouts``); None once either saw them move. While the
        #: tunables equal it, ``execute``'s tail need not call either unless a notice waits
        self._tail_key: tuple[int, ...] | None = None
        #: lnet_selftest on this node (``nodes.selftest.attach``), or None
        self.upper: UpperLayer | None = None
        self._holding = 0  # hold() depth: execute() keeps actions in _held meanwhile
        self._held: list[Action] | None = None

    # ---------------------------------------------------------------- the runtime's side
    # The callbacks as methods: a runtime may override them in a subclass instead (compiled,
    # a call to an override is direct, one through a callable object is not: the sim's).
    def now(self) -> float:
        """The runtime's clock."""
        return self._now()

    def transmit(self, act: Transmit) -> None:
        """Hand ``act`` to the LND."""
        self._transmit(act)

    def sink_md(self, ev: MDEvent) -> None:  # (an MD event to the runtime's sink, if any)
        if self.md_sink is not None:
            self.md_sink(ev)

    def sink_trace(self, rec: MsgTrace) -> None:  # (a message trace record: to the sink)
        if self.trace_sink is not None:
            self.trace_sink(rec)

    def batch_done(self) -> None:
        """After a batch: re-arm now, or let the runtime ask later (``defer_rearm``)."""
        self._defer_rearm() if self._defer_rearm is not None else self.rearm()

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

    def hold(self) -> None:
        """Keep what ``execute`` is given until ``release``: a runtime that hands the engine
        a batch of LND events (frames one socket read brought, txs one write completed)
        carries out their actions once, and pays the per-batch tail (notices, LND timeouts,
        the timer, the recorder) once per batch instead of once per message."""
        self._holding += 1

    def release(self) -> None:
        """The batch ended: carry out, in order, every action held since ``hold``."""
        self._holding -= 1
        if not self._holding and self._held is not None:
            actions, self._held = self._held, None
            self.execute(actions)

    def execute(self, actions: list[Action]) -> None:
        """Carry out ``actions`` in order (then what the upper layer returned for its MD
        events, batch after batch), then drain notices, sync LND timeouts, re-arm, and give
        the recorder its chance to sample. While held (``hold``) they are kept, in order,
        for ``release``."""
        if self._holding:
            if self._held is None:
                self._held = []
            self._held += actions
            return
        upper, rec = self.upper, self.recorder
        now: float | None = None  # read once, for the upper layer's MD events
        while actions:
            follow: list[Action] = []
            for act in actions:  # (isinstance: what compiled code tests fastest)
                if isinstance(act, Transmit):
                    if rec is not None:
                        rec.tx(act.ni, act.lpni, len(act.payload))
                    self.transmit(act)
                elif isinstance(act, MDEvent):
                    if upper is not None and act.handle in upper.handles:
                        self.sink_md(act)
                        now = self.now() if now is None else now
                        follow += upper.on_md_event(act, now)
                    else:
                        self._md_event(act)
                elif isinstance(act, Log):
                    if self._log is not None:
                        self._log(act)
                elif isinstance(act, NotifyPeerDown):  # lnd_notify_peer_down (seed 002)
                    self._notify_peer_down(act.lpni)
                elif self.trace_sink is not None:  # (a MsgTrace)
                    self.sink_trace(act)
            actions = follow
        # the tail: notices, LND timeouts (both only if something moved), then the timer
        t, notices = self.engine.tunables, self.engine.notices
        key = (t.health_sensitivity, t.retry_count, t.transaction_timeout)
        if key != self._tail_key:
            self.flush_notices()
            self.sync_lnd_timeouts()
            if self.notice_sink is not None:  # both have seen ``key`` now
                self._tail_key = key
        elif notices.dirty or notices.pending:  # (``Notices.drain`` would do nothing else)
            self.flush_notices()
        self.batch_done()
        if rec is not None:
            self.sample()

    def receive(self, ev: MessageReceived, now: float | None = None) -> None:
        """A message the LND received at ``now`` (None: read the clock), to the engine."""
        if self.recorder is not None:
            self.recorder.rx(ev.ni, ev.peer_nid, len(ev.payload))
        self.execute(self.engine.handle(ev, self.now() if now is None else now))

    def _md_event(self, ev: MDEvent) -> None:
        self.sink_md(ev)
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
        sink = self.notice_sink
        if sink is None:
            return
        t = self.engine.tunables
        values = (t.health_sensitivity, t.retry_count, t.transaction_timeout)
        if values != self._tunables:
            self._tail_key = None
            old = self._tunables
            self._tunables = values
            for i, name in enumerate(HEALTH_TUNABLES):
                if old is None or old[i] != values[i]:
                    sink("tunable", {"name": name, "value": values[i]})
        for kind, fields in notify.drain(self.engine):
            sink(kind, fields)

    def set_trace_sink(self, sink: Callable[[Any], None] | None) -> None:
        """Start (a sink) or stop (None) the engine's message trace (TRACE-SCHEMA)."""
        self.trace_sink = sink
        if hasattr(self.engine, "trace_messages"):
            self.engine.trace_messages = sink is not None

    # ---------------------------------------------------------------- recorder
    def sample(self) -> None:
        """Let the recorder sample if a period boundary passed; if it left a change
        unsampled, arm the sample timer at the period's end (once per period)."""
        rec = self.recorder
        if rec is None:
            return
        rec.maybe_sample(self.now())
        at = rec.next_sample()
        if at is not None and at != self._sample_armed and self.arm_sample is not None:
            self._sample_armed = at
            self.arm_sample(at)

    def on_sample_timer(self) -> None:
        """The sample timer came: sample now (a loop timer may fire a hair early: the
        sample is stamped no earlier than the period boundary it was armed for)."""
        at, self._sample_armed = self._sample_armed, None
        rec = self.recorder
        if rec is not None:
            now = self.now()
            rec.maybe_sample(now if at is None or now >= at else at)

    # ---------------------------------------------------------------- timer
    def rearm(self) -> None:
        """Re-arm the timer if the earliest deadline (the engine's, the upper layer's)
        moved."""
        deadline = self.engine.next_deadline()
        if self.upper is not None:
            later = self.upper.next_deadline()
            if later is not None and (deadline is None or later < deadline):
                deadline = later
        if deadline != self._armed:  # (NaN: never equal, so an unarmed driver arms)
            self._armed = deadline
            self._arm_timer(deadline)

    def on_timer(self) -> None:
        """The armed deadline came: run the engine's timers."""
        self._armed = _UNARMED
        now = self.now()
        actions = self.engine.handle_timer(now)
        if self.upper is not None:
            actions = actions + self.upper.handle_timer(now)
        self.execute(actions)

    # ---------------------------------------------------------------- LND timeouts
    def sync_lnd_timeouts(self) -> None:
        """The LND timeouts follow LNet's ``lnd_timeout`` (``LndTimeouts.sync``); when
        transaction_timeout or retry_count moved, the tail looks again after the next batch."""
        if self.timeouts.sync():
            self._tail_key = None

    def ni_added(self, nid: NID) -> None:
        """A new NI starts with ``ksocknal_timeout()``. Logged as ``ni_add``."""
        self.timeouts.ni_added(nid)
        ni = self.engine.ni_by_nid(nid)
        if ni is not None and self.notice_sink is not None:
            self.notice_sink("ni_add", {"nid": str(nid), "interface": ni.interface})

    def ni_removed(self, nid: NID) -> None:
        """An NI was deleted (``net del``, ``lnet unconfigure``): logged as ``ni_del``, the
        evidence a route through this node may go down for (docs/events.md §1.3)."""
        self.timeouts.ni_removed(nid)
        if self.notice_sink is not None and nid != LO_NID:
            self.notice_sink("ni_del", {"nid": str(nid)})

    # ---------------------------------------------------------------- link state
    def link_event(self, nid: NID, up: bool, cause: str = "carrier") -> None:
        """``ksocknal_handle_link_state_change`` after the LND did its part: the NI's fatal
        state follows the link (hlt-005/010; ``cause``: ``carrier`` or ``simulated``)."""
        self.execute(self.engine.ni_set_fatal(nid, not up, self.now(), cause))

