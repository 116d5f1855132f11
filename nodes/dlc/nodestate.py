"""Per-node state of the DLC verbs that is not LNet's (obdclass's UUID table, ``lctl
set_param`` values, the debug log's own lines): kept as long as the node's runtime.

The daemon's runtime is compiled (``nodes/native.py``) and a compiled object takes no weak
reference, so it carries the dict itself (``dlc_state``); any other runtime (the simulator's,
a test's) gets one held for it weakly, gone with it.
"""

from __future__ import annotations

import weakref
from typing import Any

_WEAK: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def node_state(rt: Any) -> dict[str, Any]:
    """``rt``'s own ``dlc_state`` where it has one, else a dict held for ``rt`` weakly."""
    state: dict[str, Any] | None = getattr(rt, "dlc_state", None)
    if state is None:
        state = _WEAK.setdefault(rt, {})
    return state
