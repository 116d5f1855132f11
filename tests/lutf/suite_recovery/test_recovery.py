"""Recovery queues, recovery pings and their backoff, manual health (seed 003/004; spec §3.5,
§3.6, ``lnetctl debug recovery`` spec §9).

Failures come from LNet's health-error simulation (``lctl net_drop_add -e``, spec §8.2), so they
are exact; waiting uses ``tb.advance`` (wall clock on Mininet, virtual time on the sim). One
topology per module (default ``mr2``); the ``mr2`` fixture resets rules, health, tunables.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml

from lutf.lnet_views import C1_NIDS, S1_NIDS, local_nis, ok, peer_nis, reset_nodes

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture
def mr2(module_topology: Any) -> Any:
    reset_nodes(module_topology, "set recovery_limit 0")
    c1 = module_topology.node("c1")
    for src, nid in zip(C1_NIDS, S1_NIDS, strict=True):
        # lpni_last_alive != 0: peer NIs may be queued (spec §3.5). The source pins the
        # exact path: an MR ping without one may be answered by the peer's other NID.
        ok(c1, "lnetctl", f"ping --source {src} {nid}")
    # entries back at 1000 leave the queues at the monitor's next tick (spec §3.5): a test
    # starts with both empty (a NI marked down earlier also left c1's self peer NIs queued:
    # its own push told it so, peer.c handle_disc_lpni_health)
    _until(module_topology, lambda: _queue(c1, local=True) == _queue(c1, local=False) == [],
           3.0)
    return module_topology


def _queue(node: Any, local: bool) -> list[str]:
    """NIDs ``lnetctl debug recovery --local|--peer`` lists (empty output: empty queue)."""
    doc = yaml.safe_load(ok(node, "lnetctl", f"debug recovery {'--local' if local else '--peer'}"))
    if not doc:
        return []
    (entries,) = doc.values()
    return list(entries.values())


def _until(tb: Any, check: Any, seconds: float, step: float = 0.5) -> Any:
    waited = 0.0
    while not (value := check()) and waited < seconds:
        tb.advance(step)
        waited += step
    return value


@pytest.mark.requirement("hlth-cfg-reset-health", "hlth-lnt-recovery-queue", "dbg-030")
def test_net_set_health_takes_a_local_ni_out_of_and_back_into_service(mr2: Any) -> None:
    """`lnetctl net set --nid N --health 0` marks the NI down and queues it for recovery
    (next_ping untouched: its first recovery ping is due at the monitor's next tick, and each
    successful one adds the sensitivity back twice, lnet_handle_recovery_reply and the NI's
    own GET/REPLY health check, spec §3.5/§3.6); `--health 1000` marks it up again (seed 003 "put an
    interface back in service") and the monitor takes it off the queue at its next tick."""
    c1 = mr2.node("c1")
    # seed 004's +sensitivity a ping is behind the testbed-only knob
    # (docs/differences.md); today's LNet adds +200 a ping from the healthy sibling NI
    ok(c1, "lnetctl", "set testbed_seed_recovery_interval 2")
    try:
        ok(c1, "lnetctl", f"net set --nid {C1_NIDS[1]} --health 0")
        ni = local_nis(c1)[C1_NIDS[1]]
    finally:
        ok(c1, "lnetctl", "set testbed_seed_recovery_interval 0")
    assert ni["status"] == "down" and ni["health stats"]["health value"] <= 100, ni
    assert _queue(c1, local=True) == [C1_NIDS[1]]
    assert local_nis(c1)[C1_NIDS[0]]["status"] == "up"
    ok(c1, "lnetctl", "net set --all --health 1000")
    ni = local_nis(c1)[C1_NIDS[1]]
    assert ni["status"] == "up" and ni["health stats"]["health value"] == 1000
    assert _until(mr2, lambda: _queue(c1, local=True) == [], 3.0)


@pytest.mark.requirement("hlth-cfg-reset-health", "hlth-lnt-recovery-queue",
                         "hlth-lnt-peer-ni-health")
def test_peer_set_health_queues_and_restores_a_peer_ni(mr2: Any) -> None:
    """`lnetctl peer set --nid N --health V` sets the peer NI's health and queues it for
    recovery when below 1000 (spec §3.6); `--health 1000` takes it off the queue."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", f"peer set --nid {S1_NIDS[1]} --health 300")
    assert peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"] == 300
    assert _queue(c1, local=False) == [S1_NIDS[1]]
    ok(c1, "lnetctl", f"peer set --nid {S1_NIDS[1]} --health 1000")
    assert peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"] == 1000
    assert _until(mr2, lambda: _queue(c1, local=False) == [], 3.0)  # next monitor tick


@pytest.mark.requirement("hlth-lnt-recovery-queue", "hlth-lnt-increment", "rtr-mr-recover-ping")
def test_remote_failure_queues_the_peer_ni_and_recovery_pings_heal_it(mr2: Any) -> None:
    """A REMOTE_DROPPED lowers the peer NI's health and puts it on the peer recovery queue
    (spec §3.5); once the rule is gone, recovery pings (GETs to that exact NID) succeed, each
    reply raises its health by the sensitivity until 1000, and it leaves the queue."""
    c1 = mr2.node("c1")
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -m put -e remote_dropped")
    assert c1.put(S1_NIDS[0], count=10)["completed"] == 10
    assert _queue(c1, local=False) == [S1_NIDS[1]]
    assert peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"] < 1000
    ok(c1, "lctl", "net_drop_del -a")
    healed = _until(mr2, lambda: peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"]
                    == 1000, 40.0)
    assert healed
    assert _until(mr2, lambda: _queue(c1, local=False) == [], 3.0)  # next monitor tick


@pytest.mark.slow
@pytest.mark.requirement("hlth-lnt-recovery-queue", "rtr-mr-recover-ping")
def test_failed_recovery_pings_back_off(mr2: Any) -> None:
    """Each failed recovery ping increments ``ping_count`` and the next one is due
    ``2^ping_count`` seconds later at most (spec §3.5 ``lnet_get_next_recovery_ping``; the
    interval doubles up to ``max_recovery_ping_interval``), visible as ``ping_count`` /
    ``next_ping`` in the peer NI's health stats. Recovery pings are GETs: a rule failing every
    GET to the peer NI keeps them failing."""
    c1 = mr2.node("c1")
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -e remote_dropped")
    ok(c1, "lnetctl", f"peer set --nid {S1_NIDS[1]} --health 900")
    seen: dict[int, int] = {}

    def hstats() -> dict[str, int]:
        return dict(peer_nis(c1)[S1_NIDS[1]]["health stats"])

    def progressed() -> bool:
        h = hstats()
        seen.setdefault(h["ping_count"], h["next_ping"])
        return h["ping_count"] >= 3

    assert _until(mr2, progressed, 30.0, step=0.25), seen
    counts = sorted(c for c in seen if c >= 1)
    assert counts == list(range(1, counts[-1] + 1)), seen  # one more per failed ping
    gaps = [seen[b] - seen[a] for a, b in itertools.pairwise(counts)]
    assert all(0 < g <= 2 ** b + 1 for g, b in zip(gaps, counts[1:], strict=False)), seen
    assert gaps == sorted(gaps) and gaps[-1] >= 2, seen  # backing off, never speeding up
    assert _queue(c1, local=False) == [S1_NIDS[1]]


@pytest.mark.requirement("hlth-lnt-recovery-queue")
def test_recovery_limit_ages_peer_nis_out(mr2: Any) -> None:
    """With ``recovery_limit`` > 0 a peer NI not heard from for longer than that is not
    queued for recovery on failure ("aged out", spec §3.5); with 0 (no limit) it is."""
    c1 = mr2.node("c1")
    # start from an empty peer recovery queue (a previous test may have left an entry that
    # leaves at the next monitor tick; its recovery ping would refresh last_alive)
    assert _until(mr2, lambda: _queue(c1, local=False) == [], 5) is True
    ok(c1, "lnetctl", "set recovery_limit 1")
    mr2.advance(2.5)  # past last_alive + recovery_limit for both of s1's NIs
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -m put -e remote_dropped")
    assert c1.put(S1_NIDS[0], count=10)["completed"] == 10
    assert peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"] < 1000
    assert _queue(c1, local=False) == []
    ok(c1, "lnetctl", "set recovery_limit 0")  # 0: no limit, however long ago
    # health is relative (spec §11.1): put the peer NI back level so selection uses it again
    ok(c1, "lnetctl", f"peer set --nid {S1_NIDS[1]} --health 1000")
    assert c1.put(S1_NIDS[0], count=10)["completed"] == 10
    assert _queue(c1, local=False) == [S1_NIDS[1]]


@pytest.mark.requirement("hlth-lnt-recovery-queue", "hlth-lnt-increment")
def test_recovery_interval_is_a_deprecated_noop_lu13569(mr2: Any) -> None:
    """api-ni.c ``recovery_interval_set`` (LU-13569): real lnetctl's ``set recovery_interval
    30`` prints nothing and exits 0, the kernel only warns that it is deprecated, and
    ``global show`` keeps printing 1. Recovery is unchanged: a NI at 600 is back at 1000
    after two of today's pings (+200 each, the first at once, the next 1-2 s later), not
    after seed 004's four pings 30 s apart."""
    c1 = mr2.node("c1")
    res = c1.lnetctl("set recovery_interval 30")
    assert (res.rc, res.out, res.err) == (0, "", "")
    try:
        assert c1.yaml("global show")["global"]["recovery_interval"] == 1
        ok(c1, "lnetctl", f"net set --nid {C1_NIDS[1]} --health 600")
        assert _until(mr2, lambda: local_nis(c1)[C1_NIDS[1]]["health stats"]["health value"]
                      == 1000, 8.0)
    finally:
        ok(c1, "lnetctl", "set recovery_interval 1")
