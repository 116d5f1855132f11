"""The router checker keeps its gateways' earliest ping between changes of what it depends on
(``RouterChecker.gateway_pings``, rtrcheck.py): the kept value must always be the one a fresh
computation gives. A routed Multi-Rail cluster on the simulator under traffic, link flaps, a
gateway restart (its peer NIs rediscovered and merged) and a changed check interval, checked on
every engine at every step."""

from __future__ import annotations

from pathlib import Path

from testbed.explore.replay import Replay
from testbed.sim import SimTestbed

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "mr-routers.yaml"


def _check_all(tb: SimTestbed) -> int:
    """Every routed engine asked its deadline as a driver does: the gateways' part it used
    (kept or just computed) is what a fresh computation gives; returns how many were kept."""
    kept = 0
    for name, eng in tb.fabric.engines.items():
        checker = eng.router.checker
        interval = eng.tunables.alive_router_check_interval
        if not eng.router.active or name in tb.dead or checker.in_discovery or interval <= 0:
            continue
        kept += not checker.gw_dirty
        checker.deadline()
        assert checker.gw_due == checker.gateway_pings(interval), (name, tb.now)
    return kept


def test_kept_gateway_deadline_matches_a_fresh_one() -> None:
    tb = SimTestbed.up(TOPOLOGY)
    try:
        r = Replay(tb)
        s1 = tb.plan.node("s1").nids[0]
        c1 = tb.plan.node("c1").nids[1]
        r.stream("c1", "put", s1, every=0.05, count=400, size=4096)
        r.stream("s1", "put", c1, every=0.07, count=300, size=1024)
        kept = 0
        steps = [(2.0, lambda: tb.link("r1", "eth2", "down")),
                 (6.0, lambda: tb.link("r1", "eth2", "up")),
                 (8.0, lambda: tb.restart("r2")),
                 (12.0, lambda: tb.node("c1").lnetctl("set", "alive_router_check_interval",
                                                      "2")),
                 (14.0, lambda: tb.link("c1", "eth0", "down")),
                 (17.0, lambda: tb.link("c1", "eth0", "up"))]
        t, fab = 0.0, tb.fabric
        while t < 24.0:
            t = round(t + 0.1, 1)
            while fab.step(t):  # every event: each one may change what the value depends on
                kept += _check_all(tb)
            fab.now = max(fab.now, t)
            while steps and steps[0][0] <= t:
                steps.pop(0)[1]()
                kept += _check_all(tb)
        assert kept > 1000  # the kept value was used (and checked) many times
    finally:
        tb.down()
