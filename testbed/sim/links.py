"""Cached path decisions of the fabric.

Theory of operation: deciding a (NI, peer NI) send (reachable? who receives it? latency? the
NIDs as text) costs a dozen NID hashes; the answer only changes when the fabric's wiring
does. ``Link`` holds the answer with the fabric's ``version`` it was made at; every wiring
change (a link up/down, an owner change, a latency, a fault) bumps the version, including a
change to a ``Watched`` set (``watched.py``) made directly by a caller. ``Links`` is that
cache, a part of the fabric (``Fabric.links``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodes.lnet.nid import NID


class Link:
    """What a (NI, peer NI) pair costs to decide, cached until the fabric's wiring changes:
    the path verdict (``path_error``), the receiving node, the base latency, both NIDs as
    text. NID hashing and formatting were a fifth of the time per message."""

    __slots__ = ("dst", "latency", "lpni_text", "ni_text", "rc", "version")

    def __init__(self, version: int, rc: int, dst: str | None, latency: float,
                 ni_text: str, lpni_text: str) -> None:
        self.version, self.rc, self.dst, self.latency = version, rc, dst, latency
        self.ni_text, self.lpni_text = ni_text, lpni_text


class Links:
    """The fabric's path cache (``Fabric.links``): one ``Link`` per (NI, peer NI), made by
    ``verdict`` (``Paths.path_error``) and the latencies, valid while ``version`` stands."""

    def __init__(self, owner: dict[NID, str], latency: float) -> None:
        self.version = 0  # bumped by every wiring change: cached _Links are then stale
        self.owner = owner
        self.latency = latency  # of a NID without its own (``nid_latency``)
        self.nid_latency: dict[NID, float] = {}
        self.cache: dict[tuple[NID, NID], Link] = {}
        self.verdict: Callable[[NID, NID], int] = lambda a, b: 0  # (set by the fabric)
        self._nid_text: dict[NID, str] = {}

    def changed(self) -> None:
        """The wiring changed (links, owners, latencies, faults): re-decide every path."""
        self.version += 1

    def set_latency(self, nid: NID, latency: float) -> None:
        """NID ``nid``'s own one-way latency."""
        self.nid_latency[nid] = latency
        self.changed()

    def link(self, ni: NID, lpni: NID) -> Link:
        """The cached decision for sends from ``ni`` to ``lpni`` (made again once stale)."""
        key = (ni, lpni)
        link = self.cache.get(key)
        if link is None or link.version != self.version:
            rc = self.verdict(ni, lpni)
            base = max(self.nid_latency.get(ni, self.latency),
                       self.nid_latency.get(lpni, self.latency))
            link = self.cache[key] = Link(self.version, rc, self.owner.get(lpni), base,
                                           self.nid_str(ni), self.nid_str(lpni))
        return link

    def nid_str(self, nid: NID) -> str:
        """``str(nid)``, cached: formatting NIDs was a seventh of the time per message."""
        text = self._nid_text.get(nid)
        if text is None:
            text = self._nid_text[nid] = str(nid)
        return text
