"""LNet Health basics on a real failed rail (seed 003; spec §3.7 health, §3.8 resend).

Each test breaks a link, so each gets its own testbed (the ``topology`` fixture).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, local_nis, peer_nis, stats
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

BURST = 100


def _health(view: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {nid: v["health stats"]["health value"] for nid, v in view.items()}


@pytest.mark.requirement("hlth-tst-lutf",
                         "hlth-lnt-peer-ni-health", "hlth-lnt-decrement",
                         "hlth-lnt-resend-reselect", "snd-050", "hlth-cfg-retry",
                         "hlth-lnt-local-ni-health")
def test_failed_rail_loses_health_and_puts_are_resent(topology: Any) -> None:
    """With c1's eth1 down, sends over the second rail fail; real LNet classifies the
    failure, decrements the health of the guilty peer NI (lnet_handle_remote_failure_locked)
    and resends on another pathway while retry_count (2) allows (lnet_resend_pending_msgs).
    So: resends happen and most of the burst completes, the failed rail's peer NI health
    falls below 1000 while the other rail stays at 1000, and a later burst completes
    entirely over the healthy rail, because selection prefers health (seed 003 select-order).
    """
    c1 = topology.node("c1")
    topology.link("c1", "eth1", "down")
    st0 = stats(c1)
    first = c1.put(S1_NIDS[0], count=BURST, size=4096)
    assert first["ok"] and first["completed"] >= 0.75 * BURST, first
    st = delta(stats(c1), st0)
    assert st["resend_count"] > 0 and st["successful_resends"] > 0, st
    health = _health(peer_nis(c1))
    assert health[S1_NIDS[1]] < 1000 and health[S1_NIDS[0]] == 1000, health
    before = {nid: ni["statistics"]["send_count"] for nid, ni in local_nis(c1).items()}
    second = c1.put(S1_NIDS[0], count=BURST, size=4096)
    assert second["completed"] == BURST, second
    sends = delta({nid: ni["statistics"]["send_count"] for nid, ni in local_nis(c1).items()},
                  before)
    assert sends[C1_NIDS[1]] == 0 and sends[C1_NIDS[0]] >= BURST, sends


@pytest.mark.requirement("hlth-tst-lutf",
                         "hlt-005", "hlt-010", "snd-080", "hlth-lnd-dev-fail-detect",
                         "hlth-lnd-dev-fail-report", "dbg-030")
def test_link_down_marks_the_local_ni_down(topology: Any) -> None:
    """The LND notices the device failure (socklnd: the interface lost its link) and tells
    LNet, which marks the local NI down (ni status, fatal_error in `health stats`; spec §3.7
    lnet_ni_fatal)."""
    c1 = topology.node("c1")
    topology.link("c1", "eth1", "down")
    ni = wait_for(lambda: (n := local_nis(c1)[C1_NIDS[1]]) and n["status"] == "down" and n,
                  10, message="NI 10.11.0.1@tcp status down")
    assert ni["health stats"]["fatal_error"] == 1
    assert local_nis(c1)[C1_NIDS[0]]["status"] == "up"


@pytest.mark.requirement("hlth-tst-lutf",
                         "hlth-cfg-sensitivity", "hlth-lnt-retry-zero")
def test_sensitivity_zero_turns_health_and_resends_off(topology: Any) -> None:
    """`set health_sensitivity 0` turns health off and, as api-ni.c does, retry_count to 0:
    failures no longer lower health values and nothing is resent (seed 003)."""
    c1 = topology.node("c1")
    assert c1.lnetctl("set health_sensitivity 0").rc == 0
    assert c1.yaml("global show")["global"]["retry_count"] == 0
    topology.link("c1", "eth1", "down")
    st0 = stats(c1)
    reply = c1.put(S1_NIDS[0], count=BURST, size=4096)
    assert reply["ok"], reply
    st = delta(stats(c1), st0)
    assert st["resend_count"] == 0, st
    assert set(_health(peer_nis(c1)).values()) == {1000}
