"""``tb.fault`` of an in-process sim testbed: the ``FaultAPI`` (``testbed/base.py``) on the
simulator's own faults, with no control request in between.

Theory of operation: a process backend's ``FaultHandle`` (``testbed/ctlclient.py``) turns each
call into a ``fault_*`` request for the process that owns the faults (a process edge: JSON).
In-process nothing crosses such an edge, so the caller's keywords go to ``SimFaults`` as they
are, are parsed there once into the typed ``FaultSpec`` (``faults.spec.parse_fault``), and
the spec is carried typed to the fabric's rules and their matcher (``faults.prefilter.
Matcher``); a refusal is the same one line (``TestbedError``) as on every backend. The sim
server, a process edge, still serves ``fault_*`` requests (``SimFaults.request``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from faults.spec import PARAMS
from nodes.echo import clip
from testbed.base import TestbedError

if TYPE_CHECKING:
    from testbed.sim.netfaults import SimFaults

Described = list[dict[str, Any]]  # (``list`` is a method's name in the class below)
Lines = list[str]

#: the kinds' other names a test may call (``tb.fault.drop(...)``)
ALIASES = {"drop": "loss", "dup": "duplicate", "partition_": "partition"}


class SimFaultAPI:
    """The faults of one in-process ``SimTestbed`` (``tb.fault``): add, list, delete, clear,
    and one method per kind."""

    def __init__(self, faults: SimFaults) -> None:
        self._faults = faults

    def _ok(self, reply: dict[str, Any], what: str) -> dict[str, Any]:
        if not reply.get("ok"):
            raise TestbedError(f"testbed {self._faults.tb.name}: {what}{reply.get('error')}")
        return reply

    def add(self, kind: str, **spec: Any) -> dict[str, Any]:
        """Add a fault of ``kind`` (keys of ``faults.spec``; ``match`` as a dict).

        Raises:
            TestbedError: the spec is invalid or not modelled by the sim (one line).
        """
        with self._faults.tb.lock:
            reply = self._faults.add({"kind": kind, **spec})
        return dict(self._ok(reply, f"fault {clip(str(kind))}: ")["fault"])

    def list(self) -> Described:
        """Every fault with its state, seed, activations and live counters."""
        with self._faults.tb.lock:
            return list(self._faults.list()["faults"])

    def residue(self) -> Lines:
        """Nothing outside this process is left behind: always []."""
        return []

    def delete(self, fid: str) -> dict[str, Any]:
        """Revert and remove fault ``fid`` (id or name); returns its final counters."""
        with self._faults.tb.lock:
            reply = self._faults.delete(fid)
        return dict(self._ok(reply, "")["fault"])

    def clear(self) -> Described:
        with self._faults.tb.lock:
            return list(self._faults.clear()["faults"])

    def __getattr__(self, kind: str) -> Callable[..., dict[str, Any]]:
        name = ALIASES.get(kind, kind)
        if name not in PARAMS:
            raise AttributeError(kind)
        return functools.partial(self.add, name)
