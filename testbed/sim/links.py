"""Cached path decisions of the fabric.

Theory of operation: deciding a (NI, peer NI) send (reachable? who receives it? latency? the
NIDs as text) costs a dozen NID hashes; the answer only changes when the fabric's wiring
does. ``_Link`` holds the answer with the fabric's ``version`` it was made at; every wiring
change (a link up/down, an owner change, a latency, a fault) bumps the version, including a
change to a ``_Watched`` set (``watched.py``) made directly by a caller.
"""

from __future__ import annotations


class _Link:
    """What a (NI, peer NI) pair costs to decide, cached until the fabric's wiring changes:
    the path verdict (``path_error``), the receiving node, the base latency, both NIDs as
    text. NID hashing and formatting were a fifth of the time per message."""

    __slots__ = ("dst", "latency", "lpni_text", "ni_text", "rc", "version")

    def __init__(self, version: int, rc: int, dst: str | None, latency: float,
                 ni_text: str, lpni_text: str) -> None:
        self.version, self.rc, self.dst, self.latency = version, rc, dst, latency
        self.ni_text, self.lpni_text = ni_text, lpni_text
