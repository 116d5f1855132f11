"""Resends bounded by retry_count and by the message deadline (seed 003; spec §3.2, §3.3, §3.4).

Failures are injected with LNet's own health-error simulation, ``lctl net_drop_add -e CLASS``
(spec §8.2): the LND fails the matching transmission with that hstatus right before it would
transmit, deterministically, so the counts below are exact. One topology per module (the
default two-rail ``mr2``: c1 and s1 are Multi-Rail peers with two NIs each, retry_count 2,
transaction_timeout 10); the ``mr2`` fixture resets rules, tunables, health and statistics.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from lutf.lnet_views import C1_NIDS, S1_NIDS, local_nis, ok, peer_nis, reset_nodes, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

RETRY_COUNT = 2  # topologies/default.yaml


@pytest.fixture
def mr2(module_topology: Any) -> Any:
    return reset_nodes(module_topology, f"set retry_count {RETRY_COUNT}",
                       "set transaction_timeout 10")


def _dropped(node: Any) -> int:
    """``ds_dropped`` of the newest drop rule: how many transmissions it failed."""
    return int(yaml.safe_load(ok(node, "lnetctl", "fault drop show"))["fault"][0]["ds_dropped"])


@pytest.mark.requirement("hlth-lnt-retry-limit", "hlth-cfg-retry", "hlth-lnt-retry-zero",
                         "hlth-lnt-fail-event", "snd-055")
@pytest.mark.parametrize("retry_count", [2, 1, 0])
def test_retry_count_bounds_the_transmissions(mr2: Any, retry_count: int) -> None:
    """A message is transmitted at most 1 + retry_count times (spec §3.3, seed 003 "no more
    than retry count"): with every PUT attempt failing with a resendable LOCAL_DROPPED, one PUT
    makes exactly 1 + retry_count transmissions, ``resend_count`` == retry_count, and the ULP
    gets one failure event. At the limit ``failed_resends`` grows by one, except with
    retry_count 0, which disables resending altogether and is not a failed resend."""
    c1 = mr2.node("c1")
    ok(c1, "lnetctl", f"set retry_count {retry_count}")
    ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m put -e local_dropped")
    reply = c1.put(S1_NIDS[0], count=1, size=0)
    assert reply["failed"] == 1 and reply["completed"] == 0, reply
    assert _dropped(c1) == 1 + retry_count
    st = stats(c1)
    assert st["local_dropped_count"] == 1 + retry_count, st
    assert st["resend_count"] == retry_count, st
    assert st["failed_resends"] == (1 if retry_count else 0), st
    assert st["successful_resends"] == 0, st


@pytest.mark.requirement("hlth-lnt-no-resend-types", "hlth-lnt-fail-event")
@pytest.mark.parametrize("hclass", ["local_error", "remote_error", "remote_timeout",
                                    "network_timeout"])
def test_no_resend_classes_fail_at_once(mr2: Any, hclass: str) -> None:
    """LOCAL_ERROR, REMOTE_ERROR, REMOTE_TIMEOUT and NETWORK_TIMEOUT are never resent (spec
    §3.2 table; seed 003 Local/No-Resend, Remote/No-Resend: the message may have reached the
    peer): one transmission per PUT, no resend counted, not even as a failed resend."""
    c1 = mr2.node("c1")
    ok(c1, "lctl", f"net_drop_add -s * -d * -r 1 -m put -e {hclass}")
    reply = c1.put(S1_NIDS[0], count=3, size=0)
    assert reply["failed"] == 3, reply
    assert _dropped(c1) == 3
    st = stats(c1)
    assert st[f"{hclass}_count"] == 3, st
    assert (st["resend_count"], st["failed_resends"], st["successful_resends"]) == (0, 0, 0)


@pytest.mark.requirement("hlth-lnt-resend-reselect", "hlth-lnt-local-ni-health",
                         "hlth-lnt-select-order", "hlth-stt-local-timeout-resends")
def test_local_timeout_is_resent_from_the_other_local_ni(mr2: Any) -> None:
    """On a multi-NI node a LOCAL_TIMEOUT lowers the local NI's health and the message is
    resent through full reselection (spec §3.3), which now prefers the healthier NI (spec
    §2.4 criterion 2): a rule failing everything *sent from* c1's rail-1 NI (``-s`` matches
    the header source NID) costs no PUT; every failure is a successful resend from rail 0."""
    c1 = mr2.node("c1")
    timeouts0 = local_nis(c1)[C1_NIDS[1]]["health stats"]["timeouts"]
    ok(c1, "lctl", f"net_drop_add -s {C1_NIDS[1]} -d * -r 1 -m put -e local_timeout")
    reply = c1.put(S1_NIDS[0], count=20, size=0)
    assert reply["completed"] == 20, reply
    errors = _dropped(c1)
    assert errors >= 1  # round robin tried rail 1 before its health fell
    st = stats(c1)
    assert st["local_timeout_count"] == errors, st
    assert st["resend_count"] == st["successful_resends"] == errors, st
    assert st["failed_resends"] == 0, st
    nis = local_nis(c1)  # (its health may already be climbing back: recovery pings succeed)
    assert nis[C1_NIDS[1]]["health stats"]["timeouts"] - timeouts0 == errors
    assert nis[C1_NIDS[0]]["health stats"]["health value"] == 1000
    assert set(p["health stats"]["health value"] for p in peer_nis(c1).values()) == {1000}


@pytest.mark.requirement("hlth-lnt-resend-reselect", "hlth-lnt-peer-ni-health",
                         "hlth-stt-remote-timeout-resends")
def test_remote_dropped_is_resent_to_the_other_peer_ni(mr2: Any) -> None:
    """REMOTE_DROPPED (the message surely never reached the peer) lowers the peer NI's health
    and is resent (spec §3.2): the resend goes to s1's healthier NI, so no PUT fails."""
    c1 = mr2.node("c1")
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -m put -e remote_dropped")
    reply = c1.put(S1_NIDS[0], count=20, size=0)
    assert reply["completed"] == 20, reply
    errors = _dropped(c1)
    st = stats(c1)
    assert errors >= 1 and st["remote_dropped_count"] == errors, st
    assert st["successful_resends"] == errors and st["failed_resends"] == 0, st
    health = {n: p["health stats"]["health value"] for n, p in peer_nis(c1).items()}
    assert health[S1_NIDS[1]] <= 1000 - 100 and health[S1_NIDS[0]] == 1000, health


@pytest.mark.requirement("hlth-lnt-resend-stop", "hlth-cfg-transaction-timeout",
                         "hlth-lnt-response-timeout", "hlth-lnt-fail-event")
def test_transaction_timeout_ends_the_transaction(mr2: Any) -> None:
    """The response tracker's deadline is set once per MD (send + transaction_timeout, not
    reset on resend; spec §3.4): when s1 silently drops c1's PUTs (RX rule, no ACK) the PUT is
    not retransmitted at all (its send succeeded) and the ULP gets UNLINK/-ETIMEDOUT at the
    transaction timeout, with ``response_timeout_count`` counted once per PUT."""
    c1, s1 = mr2.node("c1"), mr2.node("s1")
    ok(c1, "lnetctl", "set transaction_timeout 3")
    ok(s1, "lctl", "net_drop_add -s * -d * -r 1 -m put")
    sim = mr2.status().get("backend") == "sim"
    clock = (lambda: float(mr2.now)) if sim else time.monotonic
    t0 = clock()
    reply = c1.put(S1_NIDS[0], count=3, size=0, timeout=60.0)
    took = clock() - t0
    assert reply["failed"] == 3 and reply["errors"] == {"UNLINK:-110": 3}, reply
    # at the 3 s transaction timeout, not the 60 s caller wait; exactly, on the virtual clock
    assert (took == pytest.approx(3.0, abs=1e-3)) if sim else (2.5 <= took <= 8), took
    st = stats(c1)
    assert st["response_timeout_count"] == 3 and st["resend_count"] == 0, st
    assert _dropped(s1) == 3
