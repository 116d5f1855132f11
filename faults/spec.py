"""Fault specifications: one validated, frozen value per fault, from YAML, CLI or Python.

Theory of operation (STYLE rules 3 and 8): a fault is described by a plain mapping (a YAML
``faults:`` item, the CLI's ``key=value`` words, or ``tb.fault.<kind>(**kw)``) and turned here
into a :class:`FaultSpec`, refusing unknown keys, bad types and out-of-range values with a
one-line :class:`FaultError`. Nothing here touches the system; ``faults.netops`` realises a
spec, ``faults.sched`` decides when, ``faults.decide`` decides per packet.

Kinds and their parameters (``PARAMS``; every kind also takes the common keys ``COMMON``)::

    loss       rate | p, r, loss_good, loss_bad (Gilbert-Elliott)        interposer
    delay      delay (ms), jitter (ms), dist uniform|normal, reorder     interposer
    reorder    rate, gap, hold (ms at most)                              interposer
    duplicate  rate                                         (egress only) interposer
    corrupt    rate, bits, offset, span, csum fix|bad                    interposer
    stall      (match port/peer: hold every packet of the connection)    interposer
    rst        (forge TCP RSTs that kill the matching socklnd connection) interposer
    bandwidth  bw ("10mbit"), burst ("32kb"), latency (ms)               tc tbf
    blackhole  (drop all, carrier up)                                    iptables DROP
    carrier    (``ip link set down``)                                    ip link
    flap       down, up (s), count (0: until removed), jitter (s), style carrier|blackhole
    partition  a: [nodes], b: [nodes], oneway                            iptables DROP
    kill | stop | restart   (process faults on a node daemon)
    qp-error | rnr | rdma-error | port-down | cm-reject   (an o2ib NI's o2iblnd: ibspec.py)

Common keys: ``node``, ``iface``, ``direction`` (out|in|both), ``match`` (see
:data:`MATCH_KEYS`), ``start`` (seconds from now) or ``at`` (unix time), ``duration``
(seconds, then automatic revert), ``repeat`` (activations), ``every`` (seconds between
activations), ``seed`` (recorded; drawn when absent), ``name`` (a label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from faults.ibspec import IB_PARAMS
from nodes.echo import shown
from nodes.lnet.nid import NID

INTERPOSED = frozenset({"loss", "delay", "reorder", "duplicate", "corrupt", "stall", "rst"})
PROCESS = frozenset({"kill", "stop", "restart"})
#: kind -> {param: (type, default, (lo, hi) or choices or None)}
PARAMS: dict[str, dict[str, tuple[type, Any, Any]]] = {
    "loss": {"rate": (float, None, (0.0, 1.0)), "p": (float, None, (0.0, 1.0)),
             "r": (float, None, (0.0, 1.0)), "loss_good": (float, 0.0, (0.0, 1.0)),
             "loss_bad": (float, 1.0, (0.0, 1.0))},
    "delay": {"delay": (float, 0.0, (0.0, 60000.0)), "jitter": (float, 0.0, (0.0, 60000.0)),
              "dist": (str, "uniform", ("uniform", "normal")), "reorder": (bool, False, None),
              "rate": (float, 1.0, (0.0, 1.0))},
    "reorder": {"rate": (float, 0.25, (0.0, 1.0)), "gap": (int, 3, (1, 1000)),
                "hold": (float, 100.0, (1.0, 60000.0))},
    "duplicate": {"rate": (float, 1.0, (0.0, 1.0))},
    "corrupt": {"rate": (float, 1.0, (0.0, 1.0)), "bits": (int, 1, (1, 64)),
                "offset": (int, None, (0, 65535)), "span": (int, None, (1, 65535)),
                "csum": (str, "fix", ("fix", "bad"))},
    "stall": {},
    "rst": {"count": (int, 1, (1, 1_000_000))},
    "bandwidth": {"bw": (str, None, None), "burst": (str, "32kb", None),
                  "latency": (float, 50.0, (1.0, 10000.0))},
    "blackhole": {},
    "carrier": {},
    "flap": {"down": (float, 1.0, (0.01, 86400.0)), "up": (float, 1.0, (0.01, 86400.0)),
             "count": (int, 0, (0, 1_000_000)), "jitter": (float, 0.0, (0.0, 86400.0)),
             "style": (str, "carrier", ("carrier", "blackhole"))},
    "partition": {"a": (list, None, None), "b": (list, None, None),
                  "oneway": (bool, False, None)},
    "kill": {},
    "stop": {},
    "restart": {},
    **IB_PARAMS,  # qp-error, rnr, rdma-error, port-down, cm-reject (faults/ibspec.py)
}
COMMON = ("kind", "node", "iface", "direction", "match", "start", "at", "duration", "repeat",
          "every", "seed", "name")
MATCH_KEYS = ("proto", "type", "src_nid", "dst_nid", "portal", "forwarded", "port", "peer")
PROTOS = ("any", "tcp", "udp", "icmp", "lnet")
LNET_TYPES = ("ACK", "PUT", "GET", "REPLY", "HELLO")
_RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_SIZE_RE = re.compile(r"^\d+(k|kb|m|mb|b)?$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_IFACE_RE = re.compile(r"^(eth|ib)\d{1,3}$")


class FaultError(ValueError):
    """A fault description is invalid; the message is one line naming the key."""


@dataclass(frozen=True, slots=True)
class Match:
    """What packets an interposed rule touches (all given fields must hold)."""

    proto: str = "any"
    types: tuple[str, ...] = ()
    src_nid: NID | None = None  # parsed once, where the text entered (``parse_match``)
    dst_nid: NID | None = None
    portal: int | None = None
    forwarded: bool = False
    port: int | None = None
    peer: str | None = None

    @property
    def needs_lnet(self) -> bool:
        return bool(self.types or self.src_nid is not None or self.dst_nid is not None
                    or self.portal is not None or self.forwarded or self.proto == "lnet")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"proto": self.proto}
        if self.types:
            out["type"] = list(self.types)
        for key in ("src_nid", "dst_nid", "portal", "port", "peer"):
            value = getattr(self, key)
            if value is not None:  # (a NID as its text: this is for JSON, YAML, a process edge)
                out[key] = str(value) if isinstance(value, NID) else value
        if self.forwarded:
            out["forwarded"] = True
        return out


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault, validated. ``params`` holds the kind's parameters with defaults filled."""

    kind: str
    node: str | None = None
    iface: str | None = None
    direction: str = "out"
    match: Match = field(default_factory=Match)
    params: dict[str, Any] = field(default_factory=dict)
    start: float = 0.0
    at: float | None = None
    duration: float | None = None
    repeat: int = 1
    every: float | None = None
    seed: int | None = None
    name: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain data (state.json, events, replay: ``parse_fault`` reads it back)."""
        out: dict[str, Any] = {"kind": self.kind, **self.params}
        for key in ("node", "iface", "at", "duration", "seed", "name", "every"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.kind in INTERPOSED or self.kind in ("blackhole", "bandwidth"):
            out["direction"] = self.direction
        if self.start:
            out["start"] = self.start
        if self.repeat != 1:
            out["repeat"] = self.repeat
        if self.kind in INTERPOSED:
            out["match"] = self.match.as_dict()
        return {k: v for k, v in out.items() if v is not None}


def _num(key: str, value: Any, typ: type, rng: Any) -> Any:
    if typ is bool:
        if not isinstance(value, bool):
            raise FaultError(f"{key}: expected true or false, got {shown(value)}")
        return value
    if typ in (int, float):
        if isinstance(value, bool):
            raise FaultError(f"{key}: expected a number, got {shown(value)}")
        if isinstance(value, str):
            try:
                value = float(value) if typ is float else int(value, 0)
            except ValueError:
                raise FaultError(f"{key}: expected a number, got {shown(value)}") from None
        if not isinstance(value, int | float) or (typ is int and isinstance(value, float)
                                                  and not value.is_integer()):
            raise FaultError(f"{key}: expected {'an integer' if typ is int else 'a number'}, "
                             f"got {shown(value)}")
        value = typ(value)
        if rng is not None and not rng[0] <= value <= rng[1]:
            raise FaultError(f"{key}: {value} out of range [{rng[0]}, {rng[1]}]")
        return value
    if typ is str:
        if not isinstance(value, str):
            raise FaultError(f"{key}: expected a string, got {shown(value)}")
        if isinstance(rng, tuple) and value not in rng:
            raise FaultError(f"{key}: {shown(value)} is not one of {', '.join(rng)}")
        return value
    if typ is list:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list) or not value:
            raise FaultError(f"{key}: expected a non-empty list of node names, got {shown(value)}")
        for v in value:
            if not isinstance(v, str) or not _NAME_RE.match(v):
                raise FaultError(f"{key}: bad node name {shown(v)}")
        return list(value)
    raise FaultError(f"{key}: unsupported type")  # pragma: no cover


def _nid(key: str, value: Any) -> NID:
    try:
        return NID.parse(str(value))
    except Exception as exc:  # the NID parser's own error names the problem
        raise FaultError(f"match.{key}: bad NID {shown(value)}: {exc}") from None


def parse_match(raw: Any) -> Match:
    """``match:`` mapping -> :class:`Match`.

    Raises:
        FaultError: unknown key, unknown protocol or LNet type, bad NID or portal.
    """
    if raw is None:
        return Match()
    if not isinstance(raw, dict):
        raise FaultError(f"match: expected a mapping, got {shown(raw)}")
    unknown = sorted(set(raw) - set(MATCH_KEYS))
    if unknown:
        raise FaultError(f"match: unknown key {shown(unknown[0])} "
                         f"(allowed: {', '.join(MATCH_KEYS)})")
    proto = _num("match.proto", raw.get("proto", "any"), str, PROTOS)
    types_raw = raw.get("type", ())
    if isinstance(types_raw, str):
        types_raw = [t for t in types_raw.split(",") if t]
    types = []
    for t in types_raw:
        name = str(t).upper()
        if name not in LNET_TYPES:
            raise FaultError(f"match.type: {shown(t)} is not one of {', '.join(LNET_TYPES)}")
        types.append(name)
    portal = raw.get("portal")
    if portal is not None:
        portal = _num("match.portal", portal, int, (0, 63))
    port = raw.get("port")
    if port is not None:
        port = _num("match.port", port, int, (1, 65535))
    peer = raw.get("peer")
    if peer is not None and not re.match(r"^\d{1,3}(\.\d{1,3}){3}$", str(peer)):
        raise FaultError(f"match.peer: expected an IPv4 address, got {shown(peer)}")
    m = Match(proto=proto, types=tuple(types),
              src_nid=_nid("src_nid", raw["src_nid"]) if raw.get("src_nid") else None,
              dst_nid=_nid("dst_nid", raw["dst_nid"]) if raw.get("dst_nid") else None,
              portal=portal, forwarded=_num("match.forwarded", raw.get("forwarded", False),
                                            bool, None),
              port=port, peer=str(peer) if peer is not None else None)
    if m.needs_lnet and proto not in ("any", "lnet", "tcp"):
        raise FaultError(f"match: LNet fields need proto lnet, not {proto}")
    if m.needs_lnet:
        m = Match(**{**_fields(m), "proto": "lnet"})
    return m


def _fields(m: Match) -> dict[str, Any]:
    return {k: getattr(m, k) for k in Match.__slots__}


def parse_params(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A kind's parameters from ``raw`` with defaults filled, each checked (``PARAMS``).

    Raises:
        FaultError: a bad value, or a combination the kind refuses.
    """
    out = {}
    for key, (typ, default, rng) in PARAMS[kind].items():
        value = raw.get(key, default)
        out[key] = None if value is None else _num(key, value, typ, rng)
    if kind == "loss":
        if out["rate"] is None and (out["p"] is None or out["r"] is None):
            raise FaultError("loss: give rate, or p and r (Gilbert-Elliott)")
        if out["rate"] is not None and out["p"] is not None:
            raise FaultError("loss: give rate or p/r, not both")
    if kind == "bandwidth":
        if out["bw"] is None or not _RATE_RE.match(out["bw"]):
            raise FaultError(f"bw: expected a rate like 10mbit or 500kbit, got {shown(out['bw'])}")
        if not _SIZE_RE.match(out["burst"]):
            raise FaultError(f"burst: expected a size like 32kb, got {shown(out['burst'])}")
    if kind == "partition":
        for side in ("a", "b"):
            if out[side] is None:
                raise FaultError(f"partition: {side} (a list of nodes) is required")
        both = set(out["a"]) & set(out["b"])
        if both:
            raise FaultError(f"partition: node {sorted(both)[0]} is on both sides")
    return out


def parse_fault(raw: Any, *, nodes: dict[str, list[str]] | None = None) -> FaultSpec:
    """A mapping -> :class:`FaultSpec`; ``nodes`` (node -> interface names) checks targets.

    Raises:
        FaultError: the first problem found, as one line naming the key.
    """
    if not isinstance(raw, dict):
        raise FaultError(f"a fault must be a mapping, got {shown(raw)}")
    kind = raw.get("kind")
    if kind not in PARAMS:
        raise FaultError(f"kind: {shown(kind)} is not one of {', '.join(PARAMS)}")
    allowed = set(COMMON) | set(PARAMS[kind])
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise FaultError(f"{kind}: unknown key {shown(unknown[0])} "
                         f"(allowed: {', '.join(sorted(allowed - {'kind'}))})")
    params = parse_params(kind, raw)
    node = raw.get("node")
    if kind != "partition":
        if node is None:
            raise FaultError(f"{kind}: node is required")
        if not isinstance(node, str) or not _NAME_RE.match(node):
            raise FaultError(f"node: bad node name {shown(node)}")
    elif node is not None:
        raise FaultError("partition: use a and b, not node")
    iface = raw.get("iface")
    if iface is not None and (not isinstance(iface, str) or not _IFACE_RE.match(iface)):
        raise FaultError(f"iface: bad interface name {shown(iface)} (eth0, ib0, ...)")
    if kind in ("carrier", "flap") and params.get("style", "carrier") == "carrier" \
            and iface is None:
        raise FaultError(f"{kind}: iface is required")
    default_dir = "both" if kind in ("blackhole", "flap") else "out"
    direction = _num("direction", raw.get("direction", default_dir), str, ("out", "in", "both"))
    if kind == "duplicate" and direction != "out":
        raise FaultError("duplicate: only direction out is supported (a copy is sent from "
                         "the node; duplicate on the peer for the other direction)")
    if kind == "bandwidth" and direction == "both":
        raise FaultError("bandwidth: give one direction per fault (out or in)")
    match = parse_match(raw.get("match"))
    if kind not in INTERPOSED and raw.get("match") is not None:
        raise FaultError(f"{kind}: match is only for interposed kinds "
                         f"({', '.join(sorted(INTERPOSED))})")
    if kind in ("stall", "rst") and match.port is None and match.peer is None \
            and not match.needs_lnet:
        match = Match(**{**_fields(match), "port": 988})
    sched = _schedule(raw)
    if nodes is not None:
        _check_targets(kind, node, iface, params, nodes)
    seed = raw.get("seed")
    if seed is not None:
        seed = _num("seed", seed, int, (0, 2**63 - 1))
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
        raise FaultError(f"name: bad fault name {shown(name)} (must match {_NAME_RE.pattern})")
    return FaultSpec(kind=kind, node=node, iface=iface, direction=direction, match=match,
                     params=params, seed=seed, name=name, **sched)


def _schedule(raw: dict[str, Any]) -> dict[str, Any]:
    start = _num("start", raw.get("start", 0.0), float, (0.0, 86400.0 * 365))
    at = raw.get("at")
    if at is not None:
        at = _num("at", at, float, (0.0, 1e12))
        if start:
            raise FaultError("give start or at, not both")
    duration = raw.get("duration")
    if duration is not None:
        duration = _num("duration", duration, float, (0.001, 86400.0 * 365))
    repeat = _num("repeat", raw.get("repeat", 1), int, (0, 1_000_000))
    every = raw.get("every")
    if every is not None:
        every = _num("every", every, float, (0.001, 86400.0 * 365))
    if repeat != 1 and every is None:
        raise FaultError("repeat: needs every (seconds between activations)")
    if every is not None and duration is None:
        raise FaultError("every: needs duration (each activation reverts before the next)")
    if every is not None and duration is not None and duration >= every:
        raise FaultError(f"duration {duration:g} must be shorter than every {every:g}")
    return {"start": start, "at": at, "duration": duration, "repeat": repeat, "every": every}


def _check_targets(kind: str, node: str | None, iface: str | None, params: dict[str, Any],
                   nodes: dict[str, list[str]]) -> None:
    targets = [node] if node else [*(params.get("a") or ()), *(params.get("b") or ())]
    for n in targets:
        if n not in nodes:
            raise FaultError(f"{kind}: no node {shown(n)} (nodes: {', '.join(nodes)})")
    if node and iface and iface not in nodes[node]:
        raise FaultError(f"{kind}: node {node} has no interface {iface} "
                         f"(has {', '.join(nodes[node])})")


def parse_words(words: list[str]) -> dict[str, Any]:
    """CLI ``key=value`` words -> a raw mapping (``match.type=PUT`` nests under match).

    Raises:
        FaultError: a word without ``=``; a key given twice (issue 27 item 10: the last one
            was kept silently, where a topology file refuses a duplicate key).
    """
    raw: dict[str, Any] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise FaultError(f"expected key=value, got {shown(word)}")
        target = raw
        if key.startswith("match."):
            target = raw.setdefault("match", {})
            key = key[len("match."):]
            if not isinstance(target, dict):
                raise FaultError("match: give match.KEY=VALUE words, not match=")
        if key in target:
            raise FaultError(f"duplicate key {shown(word.partition('=')[0])}: given twice "
                             "(each key once, as in a topology file)")
        v: Any = value
        if value.lower() in ("true", "false"):
            v = value.lower() == "true"
        target[key] = v
    return raw
