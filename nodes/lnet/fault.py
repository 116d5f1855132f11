"""LNet's own fault rules: drop and delay rules, health error simulation (spec §8, net_fault.c).

Theory of operation: a node owns one ``FaultState`` (``engine.faults``) holding its drop rules
and delay rules, newest first (``lctl net_drop_add`` puts a rule at the **head**, spec §8.1).
The engine asks two hooks; they decide and hold, the engine acts (sends, fails, counts):

* ``tx_check`` from the send path right before a ``Transmit`` would be emitted (credits held):
  delay rules first (``lnet_post_send_locked``, spec §8.3), then the socklnd's
  ``lnet_send_error_simulation``: drop rules **with** ``-e`` (or ``-x``) fail the tx with the
  chosen hstatus and rc -EINVAL, so health, recovery and resend run as for a real error (§3.2).
* ``rx_check`` at the start of ``receive.parse``: drop rules **without** ``-e`` (or ``-x``)
  silently discard the message (``lnet_parse``: counted as a drop; the sender sees nothing),
  then delay rules hold it.

Evaluation walks the list and stops at the first rule that drops (``lnet_drop_rule_match``);
rules passed over still advance their counters. Rate rules drop exactly one message per window
of ``rate`` matches; interval rules once per ``interval`` seconds; ``-n`` about half of the
matches. Delayed messages are released ``latency`` seconds later through the engine's timer
(``timers.py`` ``FAULT_RELEASE``, ``release``) or at once when their rule is deleted.
Randomness comes only
from the engine's injected ``random.Random`` (STYLE rule 1), so a seed replays exactly.
A rule itself (attributes, match, counters, decision) is ``faultrule.py``.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Final

from nodes.echo import clip
from nodes.lnet.actions import Log
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.events import MessageReceived
from nodes.lnet.faultrule import FaultAttr, FaultRule, FaultStat, choose_hstatus
from nodes.lnet.hdr import LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.msg import Msg
from nodes.lnet.nid import NID
from nodes.lnet.timers import FAULT_RELEASE, Timers

EINVAL_TX: Final = -EINVAL  # socklnd fails a simulated tx with -EINVAL (ksocknal_process_transmit)


class FaultState:
    """A node's drop and delay rules and the messages its delay rules hold.

    ``timers`` (the engine's, ``timers.py``) gets the release time of the earliest held
    message under ``FAULT_RELEASE``; a standalone instance (unit tests) keeps none.
    """

    def __init__(self, rng: random.Random, timers: Timers | None = None) -> None:
        self.rng = rng
        self.timers = timers
        self.drop_rules: list[FaultRule] = []
        self.delay_rules: list[FaultRule] = []
        # (release time, seq, rule, item): a Msg (tx side) or a MessageReceived (rx side)
        self.held: list[tuple[float, int, FaultRule, Msg | MessageReceived]] = []
        self.seq = itertools.count()
        # lnet_parse skips RX delay rules under fail_loc CFS_FAIL_DELAY_MSG_FORWARD (0xe002,
        # failloc.py); wired by the engine
        self.skip_rx_delay: Callable[[], bool] = lambda: False

    # ------------------------------------------------------------------ DLC: rule management
    def rules(self, kind: str) -> list[FaultRule]:
        if kind not in ("drop", "delay"):
            raise LNetConfigError(-EINVAL, f"unknown rule type '{clip(str(kind))}'")
        return self.drop_rules if kind == "drop" else self.delay_rules

    def add(self, kind: str, attr: FaultAttr, now: float) -> FaultRule:
        """``lnet_drop_rule_add``/``lnet_delay_rule_add``: validate, arm, insert at the head."""
        attr.validate(kind)
        rule = FaultRule(kind, attr)
        rule.arm(self.rng, now, first=True)
        self.rules(kind).insert(0, rule)
        return rule

    def delete(self, kind: str, src: NID | None, dst: NID | None, now: float) -> int:
        """``lnet_*_rule_del``: every rule whose src (dst) equals the given one; None = any.

        Messages held by a deleted delay rule are released at once (``delayed_msg_check``
        with ``all``): they become due ``now`` and go out on the next ``release``.
        """
        rules = self.rules(kind)
        gone = [r for r in rules if (src is None or r.attr.src == src)
                and (dst is None or r.attr.dst == dst)]
        for r in gone:
            rules.remove(r)
        if kind == "delay" and gone:
            self.held = [(min(t, now) if r in gone else t, s, r, it)
                         for t, s, r, it in self.held]
            heapq.heapify(self.held)
            self._rearm()
        return len(gone)

    def reset(self, kind: str, now: float) -> None:
        """``lnet_*_rule_reset``: zero the counters and pick new drop points."""
        for r in self.rules(kind):
            r.stat = FaultStat()
            r.arm(self.rng, now, first=False)

    # ------------------------------------------------------------------ decisions
    def drop_match(self, src: NID, local: NID | None, dst: NID, mtype: int, portal: int,
                   now: float, *, tx: bool) -> HStatus | None:
        """``lnet_drop_rule_match``: the hstatus to simulate (TX) or OK (RX drop), else None."""
        for rule in self.drop_rules:
            a = rule.attr
            if not a.matches(src, local, dst, mtype, portal):
                continue
            if a.drop_all:
                hit = True
            elif tx != bool(a.health_mask):
                continue  # -e rules act on TX only, the others on RX only
            else:
                hit = rule.decide(self.rng, now)
            if hit:
                hs = choose_hstatus(self.rng, a.health_mask) if tx else HStatus.OK
                rule.count(mtype)
                return hs
        return None

    def delay_match(self, src: NID, dst: NID, mtype: int, portal: int,
                    now: float) -> FaultRule | None:
        """``lnet_delay_rule_match_locked``: the first delay rule that decides to delay."""
        for rule in self.delay_rules:
            if rule.attr.matches(src, None, dst, mtype, portal) and rule.decide(self.rng, now):
                rule.count(mtype)
                return rule
        return None

    def hold(self, rule: FaultRule, item: Msg | MessageReceived, now: float) -> None:
        heapq.heappush(self.held, (now + rule.attr.latency, next(self.seq), rule, item))
        self._rearm()

    def _rearm(self) -> None:
        if self.timers is None:
            return
        if self.held:
            self.timers.arm((FAULT_RELEASE, 0), self.held[0][0])
        else:
            self.timers.cancel((FAULT_RELEASE, 0))

    def next_deadline(self) -> float | None:
        return self.held[0][0] if self.held else None

    def held_count(self) -> int:
        return len(self.held)

    # ------------------------------------------------------------------ the two hooks
    def tx_check(self, msg: Msg, now: float, *, released: bool) -> HStatus | bool:
        """Before ``Transmit`` (credits held): delay (spec §8.3) then error simulation
        (``lnet_send_error_simulation``, §8.2). Returns False (send now), True (held by a
        delay rule) or the hstatus of a simulated failure (the tx fails with ``EINVAL_TX``).
        ``released``: the message comes out of a delay rule and is not matched again."""
        hdr = msg.hdr
        mtype, portal = int(hdr.type), _portal(hdr.type, hdr.ptl_index)
        if not released and self.delay_rules:
            rule = self.delay_match(hdr.src_nid, hdr.dest_nid, mtype, portal, now)
            if rule is not None:
                self.hold(rule, msg, now)
                return True
        if not self.drop_rules:
            return False
        hs = self.drop_match(hdr.src_nid, None, hdr.dest_nid, mtype, portal, now, tx=True)
        return False if hs is None else hs

    def rx_check(self, ev: MessageReceived, now: float) -> Log | bool:
        """At the start of ``lnet_parse``: silent drop (a ``Log`` saying so; the receiver
        counts the drop), then delay (True: held); False: parse it now."""
        hdr = ev.hdr
        mtype, portal = int(hdr.type), _portal(hdr.type, hdr.ptl_index)
        if self.drop_rules and self.drop_match(hdr.src_nid, ev.ni, hdr.dest_nid, mtype, portal,
                                               now, tx=False) is not None:
            return Log(level="info", text=f"{ev.peer_nid}, src {hdr.src_nid}, dst "
                                          f"{hdr.dest_nid}: Dropping {hdr.type.name} to "
                                          "simulate silent message loss")
        if self.delay_rules and not self.skip_rx_delay():
            rule = self.delay_match(hdr.src_nid, hdr.dest_nid, mtype, portal, now)
            if rule is not None:
                self.hold(rule, ev, now)
                return True
        return False

    def release(self, now: float) -> list[Msg | MessageReceived]:
        """The delay daemon: every held message that is due, oldest first; the engine sends
        (tx side) or parses (rx side) each, without matching the delay rules again."""
        out: list[Msg | MessageReceived] = []
        while self.held and self.held[0][0] <= now:
            out.append(heapq.heappop(self.held)[3])
        if out:
            self._rearm()
        return out


def _portal(mtype: int, ptl_index: int) -> int:
    return ptl_index if mtype in (MsgType.PUT, MsgType.GET) else -1


def simulated_error_log(hdr: LNetHdr, hs: HStatus) -> Log:
    """The console line of a simulated tx health error (``lnet_send_error_simulation``)."""
    return Log(level="info", text=f"src {hdr.src_nid}->dst {hdr.dest_nid}: {hdr.type.name} "
                                  f"simulate health error: {hs.name}")
