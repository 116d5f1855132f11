"""Health arithmetic and sensitivity (seed 003/004; spec §3.1, §3.2), with failures injected by
LNet's health-error simulation (``lctl net_drop_add -e``, spec §8.2), so values are exact.

One topology per module (default ``mr2``: health_sensitivity 100, retry_count 2); the ``mr2``
fixture resets rules, tunables, health and statistics.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import (
    C1_NIDS,
    S1_NIDS,
    advance_until,
    local_nis,
    ok,
    peer_nis,
    reset_nodes,
    stats,
)

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture
def mr2(module_topology: Any) -> Any:
    return reset_nodes(module_topology, "set health_sensitivity 100", "set retry_count 2")


def consistent_view(c1: Any) -> tuple[int, dict[str, int]]:
    """``remote_timeout_count`` and peer NI health from one instant.

    Recovery pings to the failing NI keep failing (and costing health) while we read, and
    the two views are two requests; health only falls here, so a count read between two
    equal health readings belongs to that health (or the health is 0, where it stays)."""
    def health() -> dict[str, int]:
        return {n: p["health stats"]["health value"] for n, p in peer_nis(c1).items()}

    before = health()
    for _ in range(50):
        k = stats(c1)["remote_timeout_count"]
        after = health()
        if after == before:
            return k, after
        before = after
    raise AssertionError(f"peer NI health never stood still: {before}")


@pytest.mark.requirement("hlth-tst-lutf",
                         "hlth-lnt-decrement", "hlth-lnt-health-range", "hlth-lnt-peer-ni-health",
                         "hlth-cfg-sensitivity")
@pytest.mark.parametrize("sensitivity", [100, 250])
def test_each_failure_costs_exactly_the_sensitivity(mr2: Any, sensitivity: int) -> None:
    """seed 004 / spec §3.1: a failure lowers the guilty interface's health by
    ``health_sensitivity`` (``h = max(h - s, 0)``), never below 0. A REMOTE_TIMEOUT (not
    resent) on every PUT to s1's rail-1 NID: after k such failures its health is
    max(1000 - k*s, 0), the other peer NI is untouched."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", f"set health_sensitivity {sensitivity}")
    # no -m: recovery pings (GETs) fail too, so no successful ping adds health back meanwhile
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -e remote_timeout")
    c1.put(S1_NIDS[0], count=12, size=0)
    k, health = consistent_view(c1)
    assert k >= 1
    assert health[S1_NIDS[1]] == max(1000 - k * sensitivity, 0), (k, health)
    assert health[S1_NIDS[0]] == 1000


@pytest.mark.requirement("hlth-tst-lutf",
                         "hlth-cfg-sensitivity", "hlth-lnt-retry-zero")
def test_sensitivity_zero_means_no_health_change_and_no_resend(mr2: Any) -> None:
    """spec §3.1: sensitivity 0 ⇒ health never changes, and (api-ni.c) retry_count becomes 0,
    so a resendable LOCAL_TIMEOUT is neither resent nor costs the NI any health."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", "set health_sensitivity 0")
    assert c1.yaml("global show")["global"]["retry_count"] == 0
    ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m put -e local_timeout")
    reply = c1.put(S1_NIDS[0], count=5, size=0)
    assert reply["failed"] == 5, reply
    st = stats(c1)
    assert st["local_timeout_count"] == 5 and st["resend_count"] == 0, st
    assert st["failed_resends"] == 0, st
    assert {n["health stats"]["health value"] for n in local_nis(c1).values()} == {1000}
    assert set(local_nis(c1)) == set(C1_NIDS)


def _lo_health(node: Any) -> int:
    view = node.yaml("net show -v 3")
    (lo,) = [ni for net in view["net"] if net["net type"] == "lo" for ni in net["local NI(s)"]]
    return int(lo["health stats"]["health value"])


@pytest.mark.requirement("hlth-tst-lutf", "hlth-cfg-reset-health")
def test_net_set_health_all_includes_loopback_lnet_ni_set_healthv(mr2: Any) -> None:
    """api-ni.c ``lnet_ni_set_healthv``: ``lnetctl net set --all --health V`` walks every net,
    the loopback one included, so ``0@lo`` takes V like the tcp NIs (sanity-lnet's health
    post-checks sum over it) and, below 1000, joins the local recovery queue: its recovery
    pings (the REPLY 0@lo receives is health-checked, plus the recovery reply's own
    increment) bring it back to 1000 within seconds."""
    c1 = mr2.node("c1")
    assert _lo_health(c1) == 1000  # the fixture's `net set --all --health 1000` (from 0, E17)
    ok(c1, "lnetctl", "net set --all --health 0")
    assert _lo_health(c1) < 1000  # a recovery ping adds 200: read before five more
    assert {n["health stats"]["health value"] for n in local_nis(c1).values()} != {1000}
    advance_until(mr2, lambda: _lo_health(c1) == 1000, 20.0, "0@lo back at health 1000")
