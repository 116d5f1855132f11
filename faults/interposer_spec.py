"""What one interposer process is told: a typed, validated spec (issue 12 item 3).

Theory of operation: an interposed fault activation (``faults.realise``) becomes an
:class:`InterposerSpec`; the ``interposer`` resource (``faults.resources``) writes it as JSON
next to the fault's counters and starts ``python -m faults.interposer SPEC.json``, which loads
it back with :meth:`InterposerSpec.from_dict` -- the same checks ``parse_fault`` made
(``parse_params``, ``parse_match``), so a spec file that was edited or truncated is refused
with one line instead of failing inside the packet loop. ``from_dict(s.to_dict()) == s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from faults.spec import INTERPOSED, FaultError, Match, parse_match, parse_params
from nodes.echo import shown

_KEYS = ("kind", "params", "seed", "match", "queue", "counters", "local_nids")


@dataclass(frozen=True, slots=True)
class InterposerSpec:
    """One interposer: the fault kind and its parameters, the per-activation seed, the packets
    it touches, its NFQUEUE number, its counters file and the node's own NIDs (``forwarded``
    matches messages neither end of which is local)."""

    kind: str
    params: Mapping[str, Any]
    seed: int
    match: Match
    queue: int
    counters: str
    local_nids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the spec file, and the ``interposer`` key of the resource record."""
        return {"kind": self.kind, "params": dict(self.params), "seed": self.seed,
                "match": self.match.as_dict(), "queue": self.queue, "counters": self.counters,
                "local_nids": list(self.local_nids)}

    @classmethod
    def from_dict(cls, raw: Any) -> InterposerSpec:
        """Load and check a spec (a file's JSON or a state record).

        Raises:
            FaultError: not a mapping, a missing or unknown key, or a value ``parse_fault``
                would refuse.
        """
        if not isinstance(raw, dict):
            raise FaultError(f"interposer spec: expected a mapping, got {type(raw).__name__}")
        missing = [k for k in _KEYS if k not in raw]
        unknown = sorted(set(raw) - set(_KEYS))
        if missing or unknown:
            what = (f"missing key {shown(missing[0])}" if missing
                    else f"unknown key {shown(unknown[0])}")
            raise FaultError(f"interposer spec: {what}")
        kind = raw["kind"]
        if kind not in INTERPOSED:
            raise FaultError(f"interposer spec: kind {shown(kind)} is not one of "
                             f"{', '.join(sorted(INTERPOSED))}")
        params = raw["params"]
        if not isinstance(params, dict):
            raise FaultError("interposer spec: params: expected a mapping")
        checked = parse_params(kind, params)
        if set(params) != set(checked):
            raise FaultError(f"interposer spec: params: expected keys {sorted(checked)}")
        for key in ("seed", "queue"):
            if isinstance(raw[key], bool) or not isinstance(raw[key], int) or raw[key] < 0:
                raise FaultError(f"interposer spec: {key}: expected a non-negative integer")
        if not 0 <= raw["queue"] <= 65535:
            raise FaultError(f"interposer spec: queue: {raw['queue']} not in 0..65535")
        nids = raw["local_nids"]
        if not isinstance(raw["counters"], str) or not isinstance(nids, list) \
                or not all(isinstance(n, str) for n in nids):
            raise FaultError("interposer spec: counters is a path, local_nids a list of NIDs")
        return cls(kind=kind, params=checked, seed=raw["seed"],
                   match=parse_match(raw["match"]), queue=raw["queue"],
                   counters=raw["counters"], local_nids=tuple(nids))
