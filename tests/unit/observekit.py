"""Shared scaffolding of the observation tests: sim runs with recorders, as the node driver
runs them on both backends (``Fabric.start_recording``, ``simfabric.Observers``: a recorder
per node driver, sampled after each batch of that node's actions and at ``next_sample()`` on
the fabric's virtual clock, payload bytes counted per Transmit and per receive). ``flap_run``
is the scenario several tests share: PUT bursts from c1 to s1 with c1's eth1 down in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodes.recorder import Recorder

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def record_sim(tb: Any, rundir: Path, period: float = 0.1) -> dict[str, Recorder]:
    """Every node of ``tb`` records into ``rundir/nodes/NODE.rec`` from now on."""
    tb.fabric.start_recording(rundir, period)
    return {n: drv.recorder for n, drv in tb.fabric.drivers.items()}


def flap_run(tb: Any, *, bursts: int = 20, down_at: int = 5, up_at: int = 12,
             settle: float = 20.0) -> None:
    """``bursts`` bursts of 20 PUTs c1 -> s1, 0.5 s apart; eth1 of c1 down between bursts
    ``down_at`` and ``up_at``; then ``settle`` seconds of recovery."""
    dst = tb.node("s1").nids[0]
    for i in range(bursts):
        tb.node("c1").put(dst, count=20, size=4096)
        if i == down_at:
            tb.link("c1", "eth1", "down")
        if i == up_at:
            tb.link("c1", "eth1", "up")
        tb.run(0.5)
    tb.run(settle)
