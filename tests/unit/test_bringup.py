"""Bring-up order and the wait for routes (testbed/bringup.py, issue 10 point 5), checked on
the verb sequence and on the sim (virtual time)."""

from __future__ import annotations

from pathlib import Path

import testbed
from testbed.base import Completed
from testbed.bringup import configure
from testbed.plan import Step, load_topology, parse_topology

ROOT = Path(__file__).resolve().parents[2]

NO_FAR_SIDE = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp1, subnet: 10.20.0.0/24}
nodes:
  c1: {interfaces: [lan0], routes: [{net: tcp1, gateway: r1, hop: 1},
                                     {net: tcp1, gateway: r2, hop: 1}]}
  r1: {interfaces: [lan0, lan1], routing: true}
  r2: {interfaces: [lan0], routing: true}
  s1: {interfaces: [lan1]}
"""


def test_every_nis_before_any_route_or_peer(tmp_path: Path) -> None:
    """Phase 1 (lnet configure, net add, set) on every node before phase 2 on any."""
    plan = load_topology(ROOT / "topologies" / "routed.yaml")
    seen: list[tuple[str, str]] = []

    def send(node: str, step: Step) -> Completed:
        seen.append((node, " ".join(step.argv()[:2])))
        return Completed(0, "", "")

    configure(plan, send, tmp_path)
    first_remote = next(i for i, (_, v) in enumerate(seen) if v in ("route add", "peer add"))
    assert {n for n, _ in seen[:first_remote]} == {n.name for n in plan.nodes}
    assert all(v not in ("net add", "lnet configure") for _, v in seen[first_remote:])
    assert ("r1", "set forwarding") in seen[:first_remote]


def test_sim_up_returns_with_routes_up(tmp_path: Path) -> None:
    tb = testbed.up(ROOT / "tests" / "integration" / "routed-defaults.yaml", backend="sim")
    try:
        assert tb.warnings == []
        states = [r["state"] for r in tb.node("c1").yaml("route show -v")["route"]]
        assert states == ["up", "up"]
        assert 0 < tb.now <= 2.0  # the router checker's first round, on virtual time
        assert tb.node("c1").ping("10.20.0.3@tcp1").rc == 0
    finally:
        tb.down()


def test_a_route_that_cannot_come_up_is_reported_with_why(tmp_path: Path) -> None:
    """r2 forwards but has no NI on tcp1: its ping reply shows no far-side NI, so a
    single-hop route through it stays down (avoid_asym_router_failure); ``up`` returns and
    says so, naming node, route, gateway and what c1 knows of it."""
    path = tmp_path / "nofar.yaml"
    path.write_text(NO_FAR_SIDE)
    assert parse_topology(NO_FAR_SIDE).node("r2").routes == ()
    tb = testbed.up(path, backend="sim")
    try:
        assert len(tb.warnings) == 1, tb.warnings
        line = tb.warnings[0]
        assert line.startswith("node c1: route to tcp1 via 10.10.0.3@tcp (r2) is down after 10s"
                               ": gateway peer NI state up, health 1000"), line
        assert any(e["kind"] == "route_not_up" for e in tb.events())
    finally:
        tb.down()
