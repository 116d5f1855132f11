"""Counters: global ``stats show`` (spec §4.5) and per-NI / per-peer-NI blocks (spec §4.6).

Theory of operation: counters are plain mutable records owned by the engine; the engine bumps
them at the points lib-msg.c does (decommit of tx/rx, drops), and ``views`` renders them.
dbg-010/015/050/055: per local NI and per peer NI transmitted/received counts.

Seed 003's DESIRED statistics that real LNet does not keep live here too, shown only by the
testbed-only ``lctl testbed_stats`` (``views.testbed_stats``) so lnetctl output stays real:
``send_time`` (hlth-stt-avg-send-time: commit of the attempt that succeeded -> the LND's
successful tx completion, every message type) and ``transaction_time``
(hlth-stt-avg-transaction-time: PUT/GET sent -> its ACK/REPLY, on the responding peer NI),
and per local NI the link down/up events the LND reported (``LinkEvents``,
hlth-stt-ni-down-events / hlth-stt-ni-up-events). ``lnetctl stats reset`` clears them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Final

from nodes.lnet.hdr import MsgType

#: `lnetctl stats show` keys, in order (spec §4.5).
GLOBAL_KEYS: Final = (
    "msgs_alloc", "msgs_max", "rst_alloc", "errors", "send_count", "resend_count",
    "response_timeout_count", "local_interrupt_count", "local_dropped_count",
    "local_aborted_count", "local_no_route_count", "local_timeout_count", "local_error_count",
    "remote_dropped_count", "remote_error_count", "remote_timeout_count",
    "network_timeout_count", "failed_resends", "successful_resends", "recv_count",
    "route_count", "drop_count", "send_length", "recv_length", "route_length", "drop_length",
)
_TYPE_KEYS: Final = ("put", "get", "reply", "ack", "hello")
_TYPE_BY_MSG: Final = {MsgType.PUT: "put", MsgType.GET: "get", MsgType.REPLY: "reply",
                MsgType.ACK: "ack", MsgType.HELLO: "hello"}
LATENCY_KEYS: Final = tuple(
    f"{op}_{k}" for op in ("put_egress", "get_rtt", "put_ack")
    for k in ("samples", "min_nsec", "max_nsec", "avg_nsec")
)


class GlobalCounters:
    """``struct lnet_counters`` as lnetctl shows it; ``errors`` is never incremented (§11.11)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = dict.fromkeys(GLOBAL_KEYS, 0)

    def bump(self, key: str, n: int = 1) -> None:
        self.values[key] += n

    def msg_alloc(self) -> None:
        self.values["msgs_alloc"] += 1
        self.values["msgs_max"] = max(self.values["msgs_max"], self.values["msgs_alloc"])

    def msg_free(self) -> None:
        self.values["msgs_alloc"] = max(0, self.values["msgs_alloc"] - 1)

    def reset(self) -> None:
        """``lnetctl stats reset`` memsets everything, gauges included (spec §4.5)."""
        for key in self.values:
            self.values[key] = 0

    def show(self) -> dict[str, int]:
        return dict(self.values)


@dataclass(slots=True)
class TypeStats:
    """``sent_stats``/``received_stats``/``dropped_stats``: one count per message type."""

    put: int = 0
    get: int = 0
    reply: int = 0
    ack: int = 0
    hello: int = 0

    def bump(self, mtype: MsgType) -> None:
        # (the fields by name, not ``setattr`` of ``_TYPE_BY_MSG[mtype]``: the compiled
        # class's attribute then goes through the generic lookup, several times a message)
        if mtype == MsgType.PUT:
            self.put += 1
        elif mtype == MsgType.ACK:
            self.ack += 1
        elif mtype == MsgType.GET:
            self.get += 1
        elif mtype == MsgType.REPLY:
            self.reply += 1
        elif mtype == MsgType.HELLO:
            self.hello += 1
        else:
            raise KeyError(mtype)

    def total(self) -> int:
        return self.put + self.get + self.reply + self.ack + self.hello

    def show(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in _TYPE_KEYS}

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)


@dataclass(slots=True)
class Latency:
    """Running min/max/avg of one latency kind in nanoseconds (LU-20426 keys)."""

    samples: int = 0
    min_nsec: int = 0
    max_nsec: int = 0
    total_nsec: int = 0

    def add(self, nsec: int) -> None:  # (no min/max calls: several per message)
        if self.samples == 0 or nsec < self.min_nsec:
            self.min_nsec = nsec
        if nsec > self.max_nsec:
            self.max_nsec = nsec
        self.samples += 1
        self.total_nsec += nsec

    @property
    def avg_nsec(self) -> int:
        return self.total_nsec // self.samples if self.samples else 0


@dataclass(slots=True)
class IfaceStats:
    """Per-NI or per-peer-NI message statistics (spec §4.6)."""

    sent: TypeStats = field(default_factory=TypeStats)
    received: TypeStats = field(default_factory=TypeStats)
    dropped: TypeStats = field(default_factory=TypeStats)
    put_egress: Latency = field(default_factory=Latency)
    get_rtt: Latency = field(default_factory=Latency)
    put_ack: Latency = field(default_factory=Latency)
    send_time: Latency = field(default_factory=Latency)  # testbed: hlth-stt-avg-send-time
    transaction_time: Latency = field(default_factory=Latency)  # hlth-stt-avg-transaction-time

    def statistics(self) -> dict[str, int]:
        out = {
            "send_count": self.sent.total(),
            "recv_count": self.received.total(),
            "drop_count": self.dropped.total(),
        }
        for name in ("put_egress", "get_rtt", "put_ack"):
            lat: Latency = getattr(self, name)
            out[f"{name}_samples"] = lat.samples
            out[f"{name}_min_nsec"] = lat.min_nsec
            out[f"{name}_max_nsec"] = lat.max_nsec
            out[f"{name}_avg_nsec"] = lat.avg_nsec
        return out

    def reset(self) -> None:
        self.sent.reset()
        self.received.reset()
        self.dropped.reset()
        self.put_egress = Latency()
        self.get_rtt = Latency()
        self.put_ack = Latency()
        self.send_time = Latency()
        self.transaction_time = Latency()

    def testbed_stats(self, *, transaction: bool) -> dict[str, int]:
        """``send_time_*`` (and ``transaction_time_*``) keys of ``lctl testbed_stats``."""
        names = ("send_time", "transaction_time") if transaction else ("send_time",)
        out: dict[str, int] = {}
        for name in names:
            lat: Latency = getattr(self, name)
            out.update({f"{name}_samples": lat.samples, f"{name}_min_nsec": lat.min_nsec,
                        f"{name}_max_nsec": lat.max_nsec, f"{name}_avg_nsec": lat.avg_nsec})
        return out


@dataclass(slots=True)
class LinkEvents:
    """Link down/up events the LND reported for one local NI (hlth-stt-ni-down/up-events):
    carrier changes seen by the link watcher and the simulated ones (hlth-dbg-sim-ni-*)."""

    down: int = 0
    up: int = 0

    def show(self) -> dict[str, int]:
        return {"ni_down_events": self.down, "ni_up_events": self.up}

    def reset(self) -> None:
        self.down = self.up = 0
