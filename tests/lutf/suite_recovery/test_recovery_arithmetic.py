"""How much one successful recovery ping gives back (seed 003/004; spec §3.5, §3.6;
docs/differences.md "local NI recovery ping").

A NI or peer NI set to health 0 is queued for recovery; each ping that succeeds adds health in
steps of ``health_sensitivity`` (100 in the default topology). The steps are read the way a
user reads them: ``net show -v 3`` / ``peer show -v 3`` ``health value``, polled while time
passes (``tb.advance``: wall clock on Mininet, virtual time on the sim), so every value the
health goes through is seen (pings are at least 1 s apart).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, local_nis, ok, peer_nis, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture
def mr2(module_topology: Any) -> Any:
    tb = reset_nodes(module_topology, "set recovery_limit 0",
                      "set testbed_seed_recovery_interval 0")
    c1 = tb.node("c1")
    for src, nid in zip(C1_NIDS, S1_NIDS, strict=True):  # lpni_last_alive != 0 (spec §3.5)
        ok(c1, "lnetctl", f"ping --source {src} {nid}")
    return tb


def _walk(tb: Any, read: Callable[[], int], stop: int, seconds: float) -> list[int]:
    """Every distinct value ``read`` goes through until it reaches ``stop`` (or ``seconds``
    pass), polled every 0.25 s."""
    seen = [read()]
    waited = 0.0
    while seen[-1] < stop and waited < seconds:
        tb.advance(0.25)
        waited += 0.25
        if (value := read()) != seen[-1]:
            seen.append(value)
    return seen


def _steps_of(steps: list[int], step: int, reach: int) -> None:
    """The walk went up by exactly ``step`` each time, from 0 (or, on a wall clock, from a
    first ping that came before the first read) to at least ``reach``."""
    assert steps[0] in (0, step) and steps[-1] >= reach, steps
    assert all(b - a == step for a, b in itertools.pairwise(steps)), steps


def _ni_health(node: Any, nid: str) -> Callable[[], int]:
    return lambda: int(local_nis(node)[nid]["health stats"]["health value"])


def _lpni_health(node: Any, nid: str) -> Callable[[], int]:
    return lambda: int(peer_nis(node)[nid]["health stats"]["health value"])


@pytest.mark.requirement("hlth-lnt-recovery-queue", "hlth-cfg-reset-health")
def test_local_ni_recovery_ping_adds_twice_the_sensitivity(mr2: Any) -> None:
    """Today's LNet (lib-move.c ``lnet_handle_recovery_reply`` adds ``lnet_inc_ni_healthv``
    for the REPLY, and lib-msg.c ``lnet_health_check`` adds it again for the GET received and
    the REPLY sent on the same NI): a local NI pinged from its healthy sibling climbs back
    0 -> 200 -> 400 ... -> 1000, +2 x health_sensitivity a ping, never +100 or +0."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", f"net set --nid {C1_NIDS[1]} --health 0")
    steps = _walk(mr2, _ni_health(c1, C1_NIDS[1]), 400, 10.0)
    _steps_of(steps, 200, 400)
    ok(c1, "lnetctl", "net set --all --health 1000")


@pytest.mark.requirement("hlth-lnt-recovery-queue", "hlth-cfg-reset-health")
def test_seed_recovery_interval_adds_the_sensitivity_once_a_ping(mr2: Any) -> None:
    """Seed 004 behind its testbed-only knob ``testbed_seed_recovery_interval`` above 1
    (today's ``recovery_interval`` is a deprecated no-op, api-ni.c; docs/differences.md):
    one recovery ping every N seconds, each success exactly +health_sensitivity:
    0 -> 100 -> 200, each step 2 s apart."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", "set testbed_seed_recovery_interval 2")
    try:
        ok(c1, "lnetctl", f"net set --nid {C1_NIDS[1]} --health 0")
        steps = _walk(mr2, _ni_health(c1, C1_NIDS[1]), 200, 8.0)
    finally:
        ok(c1, "lnetctl", "set testbed_seed_recovery_interval 0")
        ok(c1, "lnetctl", "net set --all --health 1000")
    _steps_of(steps, 100, 200)


@pytest.mark.requirement("hlth-lnt-recovery-queue", "hlth-lnt-peer-ni-health")
def test_peer_ni_recovery_ping_adds_the_sensitivity(mr2: Any) -> None:
    """Real LNet: a peer NI's recovery ping is a GET to that NID; its REPLY, received from the
    peer NI, is health-checked OK and ``lnet_inc_lpni_healthv_locked`` adds
    health_sensitivity (lib-msg.c ``lnet_health_check``; s1 is not a router, so not straight
    to 1000): 0 -> 100 -> 200, one step a ping."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", f"peer set --nid {S1_NIDS[1]} --health 0")
    steps = _walk(mr2, _lpni_health(c1, S1_NIDS[1]), 200, 10.0)
    ok(c1, "lnetctl", "peer set --all --health 1000")
    _steps_of(steps, 100, 200)


@pytest.mark.topology("routed")
@pytest.mark.requirement("hlth-lnt-recovery-queue", "hlth-cfg-reset-health")
def test_local_ni_alone_on_its_net_recovers_four_times_the_sensitivity(topology: Any) -> None:
    """Today's LNet, a NI with no sibling on its net (topologies/routed.yaml: c1's one tcp NI):
    the recovery GET to its own NID leaves from that NI and comes back to it, so besides
    ``lnet_handle_recovery_reply`` the health checks of the GET sent, the GET received and
    the REPLY sent all add ``lnet_inc_ni_healthv`` (lib-msg.c ``lnet_health_check``):
    +4 x health_sensitivity a ping, 0 -> 400 -> 800 (docs/differences.md)."""
    c1 = topology.node("c1")
    nid = "10.10.0.1@tcp"
    ok(c1, "lnetctl", "set recovery_limit 0")
    ok(c1, "lnetctl", f"net set --nid {nid} --health 0")
    steps = _walk(topology, _ni_health(c1, nid), 800, 10.0)
    assert steps[-1] >= 800 and all(b > a for a, b in itertools.pairwise(steps)), steps
    # A poll can fall inside a ping (its four increments land as the GET and REPLY pass) and
    # another message that succeeds on the NI (the router checker's) adds its own +100, so
    # the ping count is read from the NI's ``ni_health`` notices: two pings reach 800.
    assert _recovery_pings_to(topology, nid, 800) == 2, steps


def _recovery_pings_to(tb: Any, nid: str, reach: int) -> int:
    """How many recovery pings (``ni_health`` notices of cause ``recovery``, one a ping) took
    ``nid`` from its last ``net set --health 0`` to ``reach``; polls while the event log
    catches up."""
    for _ in range(12):
        mine = [e for e in tb.events() if e["kind"] == "ni_health" and e.get("nid") == nid]
        start = max((i for i, e in enumerate(mine) if e["cause"] == "manual" and e["new"] == 0),
                    default=-1)
        walk = mine[start + 1:]
        end = next((i for i, e in enumerate(walk) if e["new"] >= reach), None)
        if start >= 0 and end is not None:
            return sum(e["cause"] == "recovery" for e in walk[:end + 1])
        tb.advance(0.25)
    raise AssertionError(f"no walk of {nid} from 0 to {reach} in the event log")


def _seed_view(node: Any, nid: str) -> tuple[int, int, int]:
    """(ping_count, next_ping, health value) of a local NI, ``net show -v 3``."""
    hs = local_nis(node)[nid]["health stats"]
    return int(hs["ping_count"]), int(hs["next_ping"]), int(hs["health value"])


@pytest.mark.requirement("hlth-lnt-recovery-queue")
def test_seed_recovery_pings_of_a_down_ni_fail_and_count_until_it_is_up(mr2: Any) -> None:
    """Seed 004's recovery ping (``testbed_seed_recovery_interval`` 2) of c1's eth1 NI while
    its link is down (the NI fatal): each ping fails, so the health stays 0 and
    ``net show -v 3`` counts them (``ping_count`` 1, 2, 3: one more a ping) with
    ``next_ping`` 2 s on each time. With the link up the next ping succeeds: the health
    climbs and ``ping_count`` is back to 0."""
    tb, nid = mr2, C1_NIDS[1]
    c1 = tb.node("c1")
    ok(c1, "lnetctl", "set testbed_seed_recovery_interval 2")
    down = []
    try:
        tb.link("c1", "eth1", "down")
        tb.advance(0.5)  # the link watcher marks the NI down (fatal) first
        ok(c1, "lnetctl", f"net set --nid {nid} --health 0")
        waited = 0.0
        while len({v[0] for v in down if v[0]}) < 3 and waited < 12.0:
            tb.advance(0.25)
            waited += 0.25
            if (view := _seed_view(c1, nid)) not in down:
                down.append(view)
        tb.link("c1", "eth1", "up")
        up = _walk(tb, _ni_health(c1, nid), 100, 6.0)
        after = _seed_view(c1, nid)
    finally:
        ok(c1, "lnetctl", "set testbed_seed_recovery_interval 0")
        tb.link("c1", "eth1", "up")
        ok(c1, "lnetctl", "net set --all --health 1000")
    failed = [v for v in down if v[0]]
    assert all(h == 0 for _, _, h in down), down
    counts = [c for c, _, _ in failed]
    assert len(counts) >= 3 and all(b - a == 1 for a, b in itertools.pairwise(counts)), down
    assert all(b[1] - a[1] == 2 for a, b in itertools.pairwise(failed)), down
    assert up[-1] >= 100 and after[0] == 0 and after[2] >= 100, (up, after)
