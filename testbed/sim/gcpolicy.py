"""The garbage collector's settings for a long simulator run (a sim server, explore workers).

Theory of operation: a simulated message allocates a few dozen short-lived objects (the
engine's message, header and actions, the fabric's heap entry and event record), and with
CPython's default young-generation threshold (700 allocations) a burst triggers a young
collection every few messages, and full collections that walk every message in flight: the
collector was 20-30 % of the CPU time of ``benchmarks/sim_scale.py``'s burst at 1,280 nodes
(``gc.callbacks`` timing, issue 10). Almost nothing the engines allocate is cyclic
garbage (freed by reference counting), so collecting far less often costs a little memory
and changes no behaviour: the event log is the same byte for byte (the collector runs no
code of ours: no ``__del__`` and no weak references on the hot path).

``settle()``: after bring-up, what bring-up made lives as long as the run (``gc.freeze``: out
of the collector's scans) and the young generation is collected every ``YOUNG`` allocations.
``relax()``: only the thresholds (a process that brings up many short testbeds, one after
the other: freezing each would keep its cycles for ever).
"""

from __future__ import annotations

import gc

#: allocations between young collections, and the older generations' multipliers
#: (CPython's defaults: 700, 10, 10); measured best of 700/10,000/50,000 at 1,280 nodes,
#: then of 50,000/150,000/200,000/400,000/1,000,000 at 10,000 nodes, where a burst keeps
#: hundreds of thousands of messages in flight: every young collection scans the ones
#: allocated since the last, and each middle one all that survived since (`gc.callbacks`
#: timing of sim_scale's burst: 55 young + 2 middle collections 1.7-1.9 s of 17-22 CPU s at
#: 50,000; 18 young, no middle, 1.0 s at 150,000; 0.9 s at 400,000; peak RSS unchanged)
YOUNG, MIDDLE, OLD = 200_000, 20, 10


def relax() -> None:
    """Collect less often (see the module docstring); idempotent."""
    gc.set_threshold(YOUNG, MIDDLE, OLD)


def settle() -> None:
    """Bring-up is over: freeze its objects out of the collector's scans and ``relax``."""
    gc.freeze()
    relax()
