"""The message invariants of ``testbed check``: completion, resend bounds, fatal NIs, routing.

Theory of operation (ARCHITECTURE "Nothing is ever silently lost: every send ends in exactly
one completion event"; spec §3.3 resend, §2.4 NI selection, §6.2 forwarding): ``MsgCheck``
follows each message of each node through its ``msg`` trace events (TRACE-SCHEMA.md) in one
pass. A message in flight holds the events that will prove a violation; a finished one keeps
only the index of its ``complete`` (to catch a second one). Messages of a node whose process
died or restarted are excused, not flagged: what a dead process held is lost by design.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from testbed.observe.check_state import Tracker, attempt_timeout, lnd_timeout, net_of
from testbed.observe.checktypes import Inv, Item

#: a message must complete within its deadline plus one monitor tick (spec §3.4: the deadline
#: is enforced by the 1 s monitor thread) and a little driver latency -- or, once handed to
#: the LND, within the LND's timeout of that hand-off, whichever is later: LNet finalizes a
#: posted message only when the LND completes it (ksocknal_launch_packet sets ``tx_deadline``
#: = now + ksocknal_timeout(); an MD unlinked at a caller's timeout stays a zombie while a
#: message holds it, lib-md.c lnet_md_unlink), so a deadline a caller's timeout shortened
#: (003) does not end the message (explore seed 341: a router's query ping, router_ping_timeout
#: 10 s, LND timeout 49 s)
COMPLETION_GRACE = 2.0
#: the log's time resolution: ``t`` is rounded to the microsecond, a deadline may not be
#: (a resend at its deadline is on time: ``ktime_after(now, msg_deadline)`` is false)
T_EPS = 1e-6
RESPONSES = frozenset({"ACK", "REPLY"})


#: what is kept of a finished message's completion: its index, t, type, status, hstatus (a
#: stream of millions of messages must not hold every completion event: ``check_rundir``)
Kept = tuple[int, Any, Any, Any, Any]


def _kept(item: Item) -> Kept:
    k, ev = item
    return (k, ev.get("t"), _name(ev.get("type")), ev.get("status"), _name(ev.get("hstatus")))


def _name(v: Any) -> Any:
    return sys.intern(v) if type(v) is str else v


def _proof(key: tuple[str, int, Any], kept: Kept) -> Item:
    """The completion event as kept (the fields a second completion is judged by)."""
    k, t, typ, status, hstatus = kept
    ev = {"t": t, "kind": "msg", "node": key[0], "event": "complete", "msg": key[2],
          "type": typ, "status": status, "hstatus": hstatus}
    return k, {f: v for f, v in ev.items() if v is not None}


@dataclass
class Flight:
    """One message in flight on one node."""

    first: Item
    retry_count: int | None
    deadline: float | None
    resends: int = 0
    proof: list[Item] = field(default_factory=list)
    #: when the NI of the next send was chosen: the last resend (it reselects at once)
    selected: float | None = None
    selected_at: int = -1  # that resend's index in the log (orders events of one instant)
    #: when the last attempt was handed to the LND (a send not marked dropped)
    posted: float | None = None


class MsgCheck:
    """Completion, resend, fatal-NI and routing invariants over ``msg`` events."""

    def __init__(self, invs: dict[str, Inv], tracker: Tracker) -> None:
        self.completion = invs["completion"]
        self.resend = invs["resend"]
        self.fatal = invs["fatal_ni"]
        self.routing = invs["routing"]
        self.tracker = tracker
        self.flight: dict[tuple[str, int, Any], Flight] = {}
        #: finished messages: what proves a second completion, kept small (``_kept``)
        self.done: dict[tuple[str, int, Any], Kept] = {}
        self.excused = 0
        self.sends = 0
        self.queued_on_fatal = 0

    def key(self, ev: dict[str, Any]) -> tuple[str, int, Any]:
        node = sys.intern(str(ev.get("node")))
        return node, self.tracker.node(node).incarnation, ev.get("msg")

    def on_restart(self, node: str) -> None:
        """The node's process is gone: what it had in flight is excused."""
        for key in [k for k in self.flight if k[0] == node]:
            del self.flight[key]
            self.excused += 1

    def handle(self, item: Item, changing: set[tuple[str, str]]) -> None:
        _idx, ev = item
        what = ev.get("event")
        if what == "send":
            self._send(item, changing)
        elif what == "resend":
            self._resend(item)
        elif what == "complete":
            self._complete(item)

    # -------------------------------------------------------------------- per event
    def _send(self, item: Item, changing: set[tuple[str, str]]) -> None:
        _idx, ev = item
        self.sends += 1
        key = self.key(ev)
        node = key[0]
        if isinstance(ev.get("ni"), str):
            self.tracker.learn_ni(node, ev["ni"])
        done = self.done.get(key)
        if done is not None:
            self.completion.flag(f"message {key[2]} of {node} sent again after its "
                                 "completion", [_proof(key, done), item])
        fl = self.flight.get(key)
        if fl is None:
            rc, dl = ev.get("retry_count"), ev.get("deadline")
            fl = self.flight[key] = Flight(item, rc if isinstance(rc, int) else None,
                                           float(dl) if isinstance(dl, int | float) else None)
            self.completion.checked += 1
        elif isinstance(ev.get("deadline"), int | float):
            fl.deadline = float(ev["deadline"])  # a resend re-commits: its own deadline (§3.4)
        fl.proof.append(item)
        if not ev.get("dropped") and isinstance(ev.get("t"), int | float):
            fl.posted = float(ev["t"])
        attempt = ev.get("attempt")
        if isinstance(attempt, int):
            self.resend.checked += 1
            if attempt != fl.resends:
                self.resend.flag(f"message {key[2]} of {node}: attempt {attempt} sent after "
                                 f"{fl.resends} resend decision(s)", fl.proof[-4:])
        self._fatal_ni(item, changing, fl)
        self._forwarding(item, changing)

    def _resend(self, item: Item) -> None:
        _idx, ev = item
        key = self.key(ev)
        done = self.done.get(key)
        if done is not None:
            self.completion.flag(f"message {key[2]} of {key[0]} resent after its completion",
                                 [_proof(key, done), item])
            return
        fl = self.flight.get(key)
        self.resend.checked += 1
        if fl is None:  # only a committed attempt is resent (spec §3.3), and every attempt
            # is traced -- one dropped at the hand-off too (a router's dead next hop)
            self.resend.flag(f"message {key[2]} of {key[0]}: resend of a message never sent",
                             [item])
            return
        fl.resends += 1
        fl.proof.append(item)
        fl.selected, fl.selected_at = float(ev["t"]), item[0]
        if fl.retry_count is not None and fl.resends > fl.retry_count:
            self.resend.flag(f"message {key[2]} of {key[0]}: resend {fl.resends} exceeds "
                             f"retry_count {fl.retry_count}", [fl.first, item])
        if fl.deadline is not None and float(ev["t"]) > fl.deadline + T_EPS:
            self.resend.flag(f"message {key[2]} of {key[0]}: resent at t={ev['t']} after its "
                             f"deadline {fl.deadline}", [fl.first, item])

    def _complete(self, item: Item) -> None:
        _idx, ev = item
        key = self.key(ev)
        done = self.done.get(key)
        if done is not None:
            self.completion.flag(f"message {key[2]} of {key[0]} completed twice",
                                 [_proof(key, done), item])
            return
        fl = self.flight.pop(key, None)
        if fl is None:
            self.completion.checked += 1  # failed before any send (selection, spec §2.8)
        self.done[key] = _kept(item)

    # -------------------------------------------------------------------- selection
    def _selected(self, ev: dict[str, Any], fl: Flight, node: str) -> float | None:
        """When the NI of this send was chosen, if the log tells: the message's last resend
        for a later attempt; its commit for the first (its deadline less the per-attempt
        timeout, ``attempt_timeout``). A message waiting for credits keeps its NI
        (``lnet_post_send_locked`` never selects again), so a send on an NI that went fatal
        after that is not a violation."""
        if ev.get("attempt"):
            return fl.selected
        timeout = attempt_timeout(self.tracker.node(node), fl.retry_count)
        return fl.deadline - timeout if fl.deadline is not None and timeout is not None \
            else None

    def _fatal_ni(self, item: Item, changing: set[tuple[str, str]], fl: Flight) -> None:
        _idx, ev = item
        ni = ev.get("ni")
        if not isinstance(ni, str) or ev.get("fixed_ni") or (
                "fixed_ni" not in ev and ev.get("type") in RESPONSES):
            return
        node = str(ev.get("node"))
        self.fatal.checked += 1
        st = self.tracker.node(node)
        why = st.fatal.get(ni)
        if why is None or (node, ni) in changing:
            return
        chosen = self._selected(ev, fl, node)
        went = float(why[1]["t"])
        if chosen is not None and (chosen < went or (
                ev.get("attempt") and 0 <= fl.selected_at < why[0]) or (
                not ev.get("attempt") and chosen <= went + T_EPS)):
            # chosen before the NI went fatal (earlier, or at the same instant earlier in the
            # log: explore seed 266), sent after when credits came back. A first attempt
            # committed in the very instant the NI went fatal is excused like a send in that
            # instant (``changing``): nothing in the log orders its commit against the link
            # change (explore seed 1616 on mr-routers: a PUT launched at 137.65 chose
            # 10.10.0.1, whose carrier then dropped at 137.65, and went out on it at 138.154)
            self.queued_on_fatal += 1
            return
        for other in sorted(st.nets.get(net_of(ni), ())):
            if chosen is not None and st.unfatal.get(other, float("-inf")) > chosen:
                continue  # fatal too when this NI was chosen (both were; it came back since)
            if other != ni and other not in st.fatal and (node, other) not in changing:
                proof = [why, item]
                self.fatal.flag(f"{node} sent {ev.get('type')} message {ev.get('msg')} on "
                                f"{ni} (link down) while {other} on the same net was not",
                                proof)
                return

    def _forwarding(self, item: Item, changing: set[tuple[str, str]]) -> None:
        _idx, ev = item
        if "forwarded" not in ev:
            return
        self.routing.checked += 1
        node = str(ev.get("node"))
        st = self.tracker.node(node)
        if ev["forwarded"] and not st.routing_on and (node, "routing") not in changing:
            proof = [st.routing, item] if st.routing is not None else [item]
            self.routing.flag(f"{node} forwarded {ev.get('type')} message {ev.get('msg')} "
                              f"({ev.get('src')} -> {ev.get('dst')}) with routing "
                              f"{'off' if st.routing else 'never enabled'}", proof)

    # -------------------------------------------------------------------- end of log
    def _must_end(self, node: str, fl: Flight) -> float:
        """By when LNet must have completed ``fl`` (``COMPLETION_GRACE``'s doc)."""
        assert fl.deadline is not None
        lnd = lnd_timeout(self.tracker.node(node))
        if fl.posted is None or lnd is None:
            return fl.deadline
        return max(fl.deadline, fl.posted + lnd)

    def finish(self, t_end: float | None) -> None:
        """Messages still in flight: past deadline + grace is a violation, else a note."""
        waiting = unknown = 0
        for key, fl in self.flight.items():
            dead = self.tracker.node(key[0]).dead
            if dead is not None:
                self.excused += 1
            elif fl.deadline is None:
                unknown += 1
            elif t_end is not None and t_end > self._must_end(key[0], fl) + COMPLETION_GRACE:
                self.completion.flag(f"message {key[2]} of {key[0]} never completed (deadline "
                                     f"{fl.deadline}, log ends at {t_end})", fl.proof[:6])
            else:
                waiting += 1
        if waiting or unknown:
            self.completion.notes.append(f"{waiting + unknown} message(s) still in flight when "
                                         f"the log ends ({unknown} with no deadline)")
        if self.excused:
            self.completion.notes.append(f"{self.excused} message(s) of nodes that died or "
                                         "restarted excused")
