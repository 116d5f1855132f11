"""LNet's fault rules themselves (spec §8.1-8.2, net_fault.c): a rule's attributes as
``lctl net_drop_add``/``net_delay_add`` give them (``FaultAttr``, ``struct
lnet_fault_large_attr``, checked as ``lnet_fault_attr_validate``), what a message must be to
match (``lnet_fault_attr_match``, ``lnet_fault_nid_match``), its counters (``FaultStat``) and
its decision (``FaultRule``: rate, interval, ``-n``; ``choose_hstatus``:
``lnet_fault_match_health``). The node's rule lists, the held messages and the send/receive
hooks are ``fault.py`` ``FaultState``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.hdr import LNET_MAX_PORTALS, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import ADDR_ANY, NID, parse_net, parse_nid

#: LNET_ACK_BIT .. LNET_REPLY_BIT (1 << lnet_msg_type), spec §8.1
MSG_BITS: Final = {"ack": 1 << MsgType.ACK, "put": 1 << MsgType.PUT, "get": 1 << MsgType.GET,
            "reply": 1 << MsgType.REPLY}
LNET_MSG_MASK: Final = sum(MSG_BITS.values())
#: ``-e`` names -> hstatus value (mask bit = 1 << value); ``random`` is HSTATUS_RANDOM
HEALTH_ERRORS: Final = {h.name.lower(): int(h) for h in HStatus if h != HStatus.OK}
HSTATUS_RANDOM: Final = 0xFFFF_FFFF
HSTATUS_END: Final = 11  # uapi lnetctl.h


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
