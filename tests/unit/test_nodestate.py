"""nodes/dlc/nodestate.py: the DLC verbs' per-node state lives as long as the node's runtime,
on the runtime itself where it cannot be referenced weakly (the daemon's, compiled)."""

from __future__ import annotations

import gc
from typing import Any

from nodes.dlc import debuglog, nodestate
from nodes.dlc.verbs import lctl_uuid


class _Compiled:
    """Like a compiled runtime: no ``__weakref__``, its own ``dlc_state``."""

    __slots__ = ("dlc_state",)

    def __init__(self) -> None:
        self.dlc_state: dict[str, Any] = {}


class _Sim:
    """Like the simulator's runtime: a plain object."""


def test_a_runtime_without_weak_references_keeps_its_state_itself() -> None:
    rt = _Compiled()
    state = nodestate.node_state(rt)
    assert state is rt.dlc_state and nodestate.node_state(rt) is state
    debuglog.add(rt, "a line of the front end")
    assert "a line of the front end" in debuglog.dump_and_clear(rt)
    assert "a line of the front end" not in debuglog.dump_and_clear(rt)
    assert lctl_uuid._table(rt) is lctl_uuid._table(rt) is rt.dlc_state["uuids"]


def test_another_runtime_gets_state_held_weakly_and_gone_with_it() -> None:
    rt = _Sim()
    nodestate.node_state(rt)["k"] = 1
    assert nodestate.node_state(rt) == {"k": 1} and nodestate.node_state(_Sim()) == {}
    n = len(nodestate._WEAK)
    del rt
    gc.collect()
    assert len(nodestate._WEAK) < n
