"""The sim backend: every node's engine in one process, on an in-memory fabric, virtual clock.

``fabric`` (engines wired by NID, links that fail; composed of ``sched``, the deadline heap,
``links``, ``paths``, ``conns``), ``simfabric`` (``sim_fabric``: plus what the node daemon's
drivers add: health notices in the event log, trace, recorders),
``runtime`` (one simulated node, ``SimRuntime``), ``inproc`` (``SimTestbed``: the testbed in
this process), ``script`` (``testbed sim --script``).

The per-message modules (``nodes/native.py``'s ``COMPILED_ONLY``: the fabric, its scheduler,
paths and faults) run compiled with the engine when built for these sources; ``NATIVE`` says.
"""

from nodes.native import use_native

#: True when the per-message modules import compiled (picked before any is imported)
NATIVE = use_native(__path__, __name__)

from testbed.sim.inproc import SimNodeHandle, SimTestbed  # noqa: E402
from testbed.sim.runtime import SimRuntime  # noqa: E402

__all__ = ["NATIVE", "SimNodeHandle", "SimRuntime", "SimTestbed"]
