"""Shared scaffolding of the observation tests: sim runs with recorders, the way the node
driver will run them (until the seam's driver calls ``Recorder.maybe_sample`` itself).

``record_sim(tb, rundir)`` gives every node of a ``SimTestbed`` a recorder sampled after each
batch of that node's engine actions and at ``next_sample()`` on the fabric's virtual clock;
payload bytes are counted from the ``Transmit`` actions (tx on the sender, rx on the NID's
owner when it is sent: the harness's stand-in for the LND's receive). ``flap_run`` is the
scenario several tests share: PUT bursts from c1 to s1 with c1's eth1 down in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodes.lnet.actions import Transmit
from nodes.recorder import Recorder, rec_path

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def record_sim(tb: Any, rundir: Path, period: float = 0.1) -> dict[str, Recorder]:
    recs = {n: Recorder(rt.engine, rec_path(rundir, n), node=n, period=period,
                        clock="virtual") for n, rt in tb.runtimes.items()}
    fab = tb.fabric
    apply = fab.apply
    armed: set[tuple[str, float]] = set()

    def wake(name: str, at: float) -> None:
        armed.discard((name, at))
        recs[name].maybe_sample(fab.now)

    def sampled(name: str, actions: list[Any]) -> None:
        for act in actions:
            if isinstance(act, Transmit):
                recs[name].tx(act.ni, act.lpni, len(act.payload))
                owner = fab.owner.get(act.lpni)
                if owner in recs:
                    recs[owner].rx(act.lpni, act.ni, len(act.payload))
        apply(name, actions)
        rec = recs[name]
        rec.maybe_sample(fab.now)
        at = rec.next_sample()
        if at is not None and (name, at) not in armed:
            armed.add((name, at))
            fab._at(at, lambda: wake(name, at))

    fab.apply = sampled
    return recs


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
