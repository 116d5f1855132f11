"""The sim backend: every node's engine in one process, on an in-memory fabric, virtual clock.

``fabric`` (engines wired by NID, a deadline heap, links that fail), ``simfabric`` (plus what
the node daemon's drivers add: health notices in the event log, simulated LND link-down),
``runtime`` (one simulated node, ``SimRuntime``), ``inproc`` (``SimTestbed``: the testbed in
this process), ``script`` (``testbed sim --script``).
"""

from testbed.sim.inproc import SimNodeHandle, SimTestbed
from testbed.sim.runtime import SimRuntime

__all__ = ["SimNodeHandle", "SimRuntime", "SimTestbed"]
