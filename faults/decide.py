"""Per-packet decisions of an interposed fault: pure, seeded, replayable.

Theory of operation (STYLE rule 1 applied to faults): a :class:`Decider` is fed one matching
packet at a time with the time it arrived (``decide(now)``) and returns a :class:`Verdict`:
accept now, drop, hold until a time, hold until ``gap`` later packets passed (reorder), send an
extra copy, or corrupt. It owns a ``random.Random(seed)`` and nothing else, so the same seed
and the same packet sequence give the same verdicts (the replay guarantee: the seed is recorded
in the event log). The interposer (``faults.interposer``) carries the verdicts out.

Models:

* loss, random: each packet dropped with probability ``rate``.
* loss, Gilbert-Elliott: a two-state Markov chain; in state good a packet is lost with
  ``loss_good``, in bad with ``loss_bad``; after each packet good -> bad with ``p``, bad ->
  good with ``r``. The stationary bad fraction is p / (p + r), so the mean loss is
  (r * loss_good + p * loss_bad) / (p + r) (:func:`ge_mean_loss`).
* delay: ``delay`` ms plus jitter, uniform in [-jitter, +jitter] or normal with sigma
  ``jitter``, floored at 0; without ``reorder`` a packet never leaves before the one before it
  (release = max(own time, previous release)), as netem does with rate/jitter off.
* reorder: a packet is held (probability ``rate``) until ``gap`` later packets went by, or
  ``hold`` ms passed (so the last packets of a burst are not held for ever).
* duplicate / corrupt: with probability ``rate``; corrupt flips ``bits`` distinct bits of the
  L4 payload (or of the ``span`` bytes from ``offset``); the interposer then recomputes the
  TCP/UDP checksum (``csum: fix``, the receiver's application gets the bad bytes) or leaves it
  wrong (``csum: bad``, the receiver's kernel drops the segment and TCP retransmits).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

ACCEPT = "A"
DROP = "D"
HOLD = "H"  # until ``until`` (delay)
GAP = "G"  # until ``gap`` later packets passed (reorder)
DUP = "P"  # accept and send one copy
CORRUPT = "C"
STALL = "S"  # hold until the fault is reverted
RST = "R"  # forge RSTs for this packet's connection, then drop it


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str
    until: float = 0.0
    gap: int = 0
    bits: tuple[int, ...] = ()


_ACCEPT = Verdict(ACCEPT)
_DROP = Verdict(DROP)


def ge_mean_loss(p: float, r: float, loss_good: float, loss_bad: float) -> float:
    """Long-run loss rate of a Gilbert-Elliott channel (see the module docstring)."""
    if p + r == 0:
        return loss_good
    return (r * loss_good + p * loss_bad) / (p + r)


class Decider:
    """Verdicts for one fault's matching packets, in arrival order."""

    def __init__(self, kind: str, params: dict[str, Any], seed: int) -> None:
        self.kind = kind
        self.params = params
        self.rng = random.Random(seed)
        self.bad = False  # Gilbert-Elliott state
        self.last_release = 0.0
        self.rst_left = int(params.get("count", 1)) if kind == "rst" else 0

    def decide(self, now: float, payload_len: int = 0) -> Verdict:
        """The verdict for the next matching packet, arrived at ``now`` (seconds)."""
        return getattr(self, f"_{self.kind}")(now, payload_len)

    def _loss(self, now: float, _n: int) -> Verdict:
        p = self.params
        if p.get("rate") is not None:
            return _DROP if self.rng.random() < p["rate"] else _ACCEPT
        lose = self.rng.random() < (p["loss_bad"] if self.bad else p["loss_good"])
        flip = self.rng.random() < (p["r"] if self.bad else p["p"])
        if flip:
            self.bad = not self.bad
        return _DROP if lose else _ACCEPT

    def _delay(self, now: float, _n: int) -> Verdict:
        p = self.params
        if p["rate"] < 1.0 and self.rng.random() >= p["rate"]:
            return _ACCEPT if not self.last_release > now else Verdict(HOLD, self.last_release)
        ms = p["delay"]
        if p["jitter"]:
            if p["dist"] == "normal":
                ms += self.rng.gauss(0.0, p["jitter"])
            else:
                ms += self.rng.uniform(-p["jitter"], p["jitter"])
        until = now + max(0.0, ms) / 1000.0
        if not p["reorder"]:
            until = max(until, self.last_release)
            self.last_release = until
        return Verdict(HOLD, until)

    def _reorder(self, now: float, _n: int) -> Verdict:
        if self.rng.random() < self.params["rate"]:
            return Verdict(GAP, until=now + self.params["hold"] / 1000.0,
                           gap=self.params["gap"])
        return _ACCEPT

    def _duplicate(self, now: float, _n: int) -> Verdict:
        return Verdict(DUP) if self.rng.random() < self.params["rate"] else _ACCEPT

    def _corrupt(self, now: float, n: int) -> Verdict:
        if n <= 0 or self.rng.random() >= self.params["rate"]:
            return _ACCEPT
        off = self.params.get("offset")
        lo = min(off, n - 1) if off is not None else 0
        span = (n - lo) * 8
        if self.params.get("span"):
            span = min(span, self.params["span"] * 8)
        k = min(self.params["bits"], span)
        bits = tuple(sorted(lo * 8 + b for b in self.rng.sample(range(span), k)))
        return Verdict(CORRUPT, bits=bits)

    def _stall(self, now: float, _n: int) -> Verdict:
        return Verdict(STALL)

    def _rst(self, now: float, _n: int) -> Verdict:
        if self.rst_left <= 0:
            return _ACCEPT
        self.rst_left -= 1
        return Verdict(RST)


def flip_bits(data: bytes, bits: tuple[int, ...]) -> bytes:
    """``data`` with the given bit positions (0 = MSB of byte 0) inverted."""
    out = bytearray(data)
    for b in bits:
        if b // 8 < len(out):
            out[b // 8] ^= 0x80 >> (b % 8)
    return bytes(out)
