"""Sets whose every change tells the fabric its cached path decisions are stale.

Theory of operation: the fabric's ``down``, ``dead`` and ``lnd_down`` NID sets are changed by
the fabric itself and directly by callers (tests, faults); each change must bump the fabric's
wiring ``version`` (``links.py``). This module stays Python (``nodes/native.py``): mypyc
compiles no subclass of a built-in type, and compiled code that knew a ``set`` would add to it
without the override; the fabric types these sets as ``Watched`` so its calls go through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Watched(set[Any]):
    """A set of NIDs whose every change tells the fabric its cached paths are stale."""

    def __init__(self, changed: Callable[[], None]) -> None:
        super().__init__()
        self._changed = changed

    def add(self, item: Any) -> None:
        super().add(item)
        self._changed()

    def discard(self, item: Any) -> None:
        super().discard(item)
        self._changed()

    def remove(self, item: Any) -> None:
        super().remove(item)
        self._changed()

    def clear(self) -> None:
        super().clear()
        self._changed()
