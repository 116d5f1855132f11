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
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from nodes.echo import clip
from nodes.lnet.actions import Log
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.events import MessageReceived
from nodes.lnet.hdr import LNET_MAX_PORTALS, LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.msg import Msg
from nodes.lnet.nid import ADDR_ANY, NID, parse_net, parse_nid
from nodes.lnet.timers import FAULT_RELEASE, Timers

#: LNET_ACK_BIT .. LNET_REPLY_BIT (1 << lnet_msg_type), spec §8.1
MSG_BITS: Final = {"ack": 1 << MsgType.ACK, "put": 1 << MsgType.PUT, "get": 1 << MsgType.GET,
            "reply": 1 << MsgType.REPLY}
LNET_MSG_MASK: Final = sum(MSG_BITS.values())
#: ``-e`` names -> hstatus value (mask bit = 1 << value); ``random`` is HSTATUS_RANDOM
HEALTH_ERRORS: Final = {h.name.lower(): int(h) for h in HStatus if h != HStatus.OK}
HSTATUS_RANDOM: Final = 0xFFFF_FFFF
HSTATUS_END: Final = 11  # uapi lnetctl.h
EINVAL_TX: Final = -EINVAL  # socklnd fails a simulated tx with -EINVAL (ksocknal_process_transmit)


def parse_fault_nid(text: str) -> NID | None:
    """``fault_attr_nid_parse``: a NID, ``*`` (any: None) or ``*@net`` (any on that net)."""
    text = text.strip()
    if text == "*":
        return None
    if len(text) > 2 and text.startswith("*@"):
        net = parse_net(text[2:])
        if net is not None:
            return NID(net, ADDR_ANY)
    elif (nid := parse_nid(text)) is not None:
        return nid
    raise LNetConfigError(-EINVAL, f"Invalid NID : {text}")


def nid_str(nid: NID | None) -> str:
    """``libcfs_nidstr``: LNET_NID_ANY prints ``<?>``; ``*@tcp`` is ``255.255.255.255@tcp``."""
    return "<?>" if nid is None else str(nid)


def _nid_match(rule_nid: NID | None, msg_nid: NID | None) -> bool:
    """``lnet_fault_nid_match``: ANY matches all; ``*@net`` all addresses of that net."""
    if rule_nid is None:
        return True
    if msg_nid is None:
        return False
    if msg_nid == rule_nid:
        return True
    return rule_nid.net == msg_nid.net and rule_nid.addr == ADDR_ANY


@dataclass(slots=True)
class FaultAttr:
    """``struct lnet_fault_large_attr`` (drop and delay share it; unused fields stay 0)."""

    src: NID | None
    dst: NID | None
    local_nid: NID | None = None
    ptl_mask: int = 0
    msg_mask: int = 0
    rate: int = 0
    interval: int = 0
    latency: int = 0  # delay only
    random: bool = False  # drop only (-n)
    drop_all: bool = False  # drop only (-x)
    health_mask: int = 0  # drop only (-e)

    def validate(self, kind: str) -> None:
        """lctl's checks then ``lnet_fault_attr_validate``; messages are lctl's own."""
        if (self.rate == 0) == (self.interval == 0):
            raise LNetConfigError(-EINVAL, f"please provide either {kind} rate or interval "
                                           "but not both at the same time.")
        if kind == "drop" and self.random and self.interval == 0:
            raise LNetConfigError(-EINVAL, "please provide an interval to randomize")
        if kind == "delay" and self.latency <= 0:
            raise LNetConfigError(-EINVAL, "latency cannot be zero")
        if self.msg_mask == 0:
            self.msg_mask = LNET_MSG_MASK
        if self.ptl_mask:
            # only PUT and GET carry a portal (net_fault.c lnet_fault_attr_validate)
            self.msg_mask &= MSG_BITS["put"] | MSG_BITS["get"]
            if self.msg_mask == 0:
                raise LNetConfigError(-EINVAL, f"add {kind} rule {nid_str(self.src)}->"
                                               f"{nid_str(self.dst)} failed: Invalid argument")

    def matches(self, src: NID, local: NID | None, dst: NID, mtype: int, portal: int) -> bool:
        """``lnet_fault_attr_match``: NIDs, message type bit, then the portal filter."""
        if not (_nid_match(self.src, src) and _nid_match(self.dst, dst)
                and _nid_match(self.local_nid, local)):
            return False
        if not self.msg_mask & (1 << mtype):
            return False
        return not self.ptl_mask or (0 <= portal < LNET_MAX_PORTALS
                                     and bool(self.ptl_mask & (1 << portal)))


@dataclass(slots=True)
class FaultStat:
    """``struct lnet_fault_stat``: ``fs_count`` counts matches, per-type counters decisions."""

    fs_count: int = 0
    fs_put: int = 0
    fs_ack: int = 0
    fs_get: int = 0
    fs_reply: int = 0
    decided: int = 0  # ds_dropped (drop rules) or ls_delayed (delay rules)

    def bump_type(self, mtype: int) -> None:
        key = {MsgType.PUT: "fs_put", MsgType.ACK: "fs_ack", MsgType.GET: "fs_get",
               MsgType.REPLY: "fs_reply"}.get(MsgType(mtype))
        if key is not None:
            setattr(self, key, getattr(self, key) + 1)


@dataclass(eq=False, slots=True)
class FaultRule:
    """One drop rule (``lnet_drop_rule``) or delay rule (``lnet_delay_rule``)."""

    kind: str  # "drop" | "delay"
    attr: FaultAttr
    stat: FaultStat = field(default_factory=FaultStat)
    drop_at: int = 0
    drop_time: float = 0.0
    time_base: float = 0.0

    def arm(self, rng: random.Random, now: float, *, first: bool) -> None:
        """Initial (add) or reset state: the first drop point of a rate or interval rule."""
        if self.attr.interval:
            self.time_base = now + self.attr.interval
            self.drop_time = now + rng.randrange(self.attr.interval)
        elif first and self.kind == "drop" and self.attr.rate == 2:
            self.drop_at = 0  # "the first matched message is always dropped" (sanity-lnet)
        else:
            self.drop_at = rng.randrange(self.attr.rate)

    def decide(self, rng: random.Random, now: float) -> bool:
        """The rate/interval/random part of ``drop_rule_match``/``delay_rule_match`` (§8.2)."""
        a = self.attr
        if a.random:
            return rng.randrange(a.interval) >= a.interval // 2  # fs_count untouched
        if a.interval:
            self.stat.fs_count += 1
            hit = now >= self.drop_time
            if hit:
                self.time_base = max(self.time_base, now)
                self.drop_time = self.time_base + rng.randrange(a.interval)
                self.time_base += a.interval
            return hit
        hit = self.stat.fs_count == self.drop_at
        self.stat.fs_count += 1
        if self.stat.fs_count % a.rate == 0:
            self.drop_at = self.stat.fs_count + rng.randrange(a.rate)
        return hit

    def count(self, mtype: int) -> None:
        self.stat.bump_type(mtype)
        self.stat.decided += 1

    def show(self) -> dict[str, object]:
        """One entry of ``lnetctl fault drop|delay show`` (kernel key order, spec §8.1)."""
        a, s = self.attr, self.stat
        d: dict[str, object] = {"rule_type": self.kind, "fa_src": nid_str(a.src),
                                "fa_dst": nid_str(a.dst), "fa_ptl_mask": a.ptl_mask,
                                "fa_msg_mask": a.msg_mask}
        if self.kind == "drop":
            d |= {"da_rate": a.rate, "da_interval": a.interval, "ds_dropped": s.decided}
        else:
            d |= {"la_rate": a.rate, "la_interval": a.interval, "la_latency": a.latency,
                  "ls_delayed": s.decided}
        return d | {"fs_count": s.fs_count, "fs_put": s.fs_put, "fs_ack": s.fs_ack,
                    "fs_get": s.fs_get, "fs_reply": s.fs_reply}

    def list_line(self) -> str:
        """One line of ``lctl net_drop_list``/``net_delay_list`` (portals.c print_fault_rules)."""
        a, s = self.attr, self.stat
        ptl = f"{a.ptl_mask:#x}" if a.ptl_mask else "0"  # C's %#jx prints 0 for 0
        rate = (f"(1/{a.rate} | {a.interval})" if self.kind == "drop"
                else f"(1/{a.rate} | {a.interval}, latency {a.latency})")
        return (f"{nid_str(a.src)}->{nid_str(a.dst)} {rate} ptl {ptl}, msg {a.msg_mask:x}, "
                f"{s.decided}/{s.fs_count}, PUT {s.fs_put}, ACK {s.fs_ack}, GET {s.fs_get}, "
                f"REP {s.fs_reply}")


def choose_hstatus(rng: random.Random, mask: int) -> HStatus:
    """``lnet_fault_match_health`` (spec §8.2), including its rounding loop as written.

    A random status in [1, 10]; kept if ``mask`` is random or has that bit; otherwise the
    loop walks bits from HSTATUS_END down and moves ``choice`` to each closer set bit, the
    distance being measured from the *current* choice (the kernel's own arithmetic), with
    ties keeping the higher bit.
    """
    choice = rng.randrange(HSTATUS_END) or 1
    if mask == HSTATUS_RANDOM or mask & (1 << choice):
        return HStatus(choice)
    best = HSTATUS_END
    for i in range(HSTATUS_END, 0, -1):
        if mask & (1 << i):
            delta = abs(choice - i)
            if delta < best:
                best, choice = delta, i
    return HStatus(min(choice, int(HStatus.NETWORK_TIMEOUT)))


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
