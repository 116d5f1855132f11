"""An exploration schedule as plain data: faults, LNet rules, workload streams, tunables.

Theory of operation (issue 17): a seed expands (``swarm.py``) into one ``Schedule``; the runner
(``runner.py``) plays it on the simulator, the shrinker (``shrink.py``) cuts it down, the
emitter (``emit.py``) writes it out as explicit test steps. Everything here is frozen and
JSON-ready (``as_dict``/``from_dict``), so a schedule prints, compares and travels between
worker processes as it is.

* ``Fault``: at ``at`` seconds into the safety phase, for ``duration`` seconds. Network and
  process faults (``NET_KINDS``) go through the testbed's fault API with ``spec`` as its keys
  (``tb.fault.add``: the fault reverts itself after ``duration``); LNet's own rules
  (``RULE_KINDS``) are ``lctl`` commands on ``node``: ``add`` at ``at``, ``delete`` at
  ``at + duration`` (spec §8.1).
* ``Stream``: from ``at``, ``node`` starts one ``op`` (PUT or GET of ``size`` bytes on the
  lnet_selftest bulk portal) to ``dst`` every ``every`` seconds, ``count`` times, whatever the
  outcome of the previous ones (a workload step).
* ``Schedule``: the seed, the safety phase length ``time``, the tunables it sets (the
  topology's ``global:`` block overridden), its faults and streams.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

NET_KINDS = ("loss", "delay", "blackhole", "partition", "flap", "carrier", "kill")
RULE_KINDS = ("lnet_drop", "lnet_delay")


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    duration: float
    spec: dict[str, Any] = field(default_factory=dict)   # NET_KINDS: tb.fault.add keys
    node: str = ""                                       # RULE_KINDS: the node of the rule
    add: tuple[str, ...] = ()                            # RULE_KINDS: lctl argv adding it
    delete: tuple[str, ...] = ()                         # RULE_KINDS: lctl argv removing it

    @property
    def end(self) -> float:
        return self.at + self.duration

    def describe(self) -> str:
        if self.kind in RULE_KINDS:
            return (f"t={self.at:g}..{self.end:g} {self.node}: lctl {' '.join(self.add)}")
        keys = " ".join(f"{k}={_word(v)}" for k, v in self.spec.items()
                        if k not in ("kind", "seed"))
        return f"t={self.at:g}..{self.end:g} {self.kind} {keys}"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["add"], out["delete"] = list(self.add), list(self.delete)
        return out


@dataclass(frozen=True)
class Stream:
    at: float
    node: str
    op: str
    dst: str
    every: float
    count: int
    size: int

    @property
    def end(self) -> float:
        return self.at + self.every * max(self.count - 1, 0)

    def describe(self) -> str:
        return (f"t={self.at:g}..{self.end:g} {self.node} {self.op.upper()} {self.size} B "
                f"to {self.dst} every {self.every:g} s x{self.count}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Schedule:
    seed: int
    time: float
    tunables: dict[str, int] = field(default_factory=dict)
    faults: tuple[Fault, ...] = ()
    streams: tuple[Stream, ...] = ()

    def with_(self, **kw: Any) -> Schedule:
        return replace(self, **kw)

    def actions(self) -> list[tuple[float, str, Any]]:
        """The timeline: ``(t, what, item)`` in the order the steps run; ``what`` is
        ``fault`` (NET_KINDS), ``rule_add``, ``rule_del`` or ``stream``. Equal times keep
        schedule order, removals before additions (a rule ending as another starts)."""
        out: list[tuple[float, int, int, str, Any]] = []
        for i, f in enumerate(self.faults):
            if f.kind in RULE_KINDS:
                out.append((f.at, 1, i, "rule_add", f))
                out.append((f.end, 0, i, "rule_del", f))
            else:
                out.append((f.at, 1, i, "fault", f))
        for i, s in enumerate(self.streams):
            out.append((s.at, 2, i, "stream", s))
        out.sort(key=lambda a: (a[0], a[1], a[2]))
        return [(t, what, item) for t, _o, _i, what, item in out]

    def end(self) -> float:
        """When the last fault or stream step is over."""
        ends = [f.end for f in self.faults] + [s.end for s in self.streams]
        return max(ends, default=0.0)

    def describe(self) -> list[str]:
        lines = [f"tunables: {_tunables(self.tunables)}"]
        lines += [f"fault  {f.describe()}" for f in self.faults]
        lines += [f"stream {s.describe()}" for s in self.streams]
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "time": self.time, "tunables": dict(self.tunables),
                "faults": [f.as_dict() for f in self.faults],
                "streams": [s.as_dict() for s in self.streams]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schedule:
        faults = tuple(Fault(at=float(f["at"]), kind=str(f["kind"]),
                             duration=float(f["duration"]), spec=dict(f.get("spec") or {}),
                             node=str(f.get("node", "")), add=tuple(f.get("add") or ()),
                             delete=tuple(f.get("delete") or ())) for f in d["faults"])
        streams = tuple(Stream(**s) for s in d["streams"])
        return cls(int(d["seed"]), float(d["time"]), dict(d.get("tunables") or {}), faults,
                   streams)


def _tunables(t: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(t.items())) or "(the topology's)"


def _word(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
