"""LNet fault rules through the real daemon: ``lctl net_drop_add -e`` health errors (spec §3.2,
§8.2) and an RX drop rule (spec §3.4 response tracking), seen in ``lnetctl net show -v 3``,
``peer show -v 3`` and ``stats show`` (issue 3 test list; seed 003 hlth-dbg-*).

One topology for the module (the default two-rail ``mr2``: c1 and s1 are Multi-Rail peers with
two NIs each, so both local and remote resends are allowed, spec §3.2 step 3). Each case resets
what the previous one changed: ``lctl net_drop_del -a``, ``lnetctl net set --all --health
1000``, ``peer set --all --health 1000`` and ``lnetctl stats reset``; per-NI health counters are
not reset by ``stats reset`` (spec §4.5), so they are compared as deltas.

The rule is ``net_drop_add -s * -d <s1 eth1 NID> -r 1 -m put -e CLASS`` on c1: every PUT
transmission whose header ``dest_nid`` is s1's rail-1 NID fails in c1's LND with that hstatus
(``lnet_send_error_simulation``, spec §8.2). ``-m put`` keeps recovery pings (GETs) and ACKs
out of the rule, so the class counters count exactly the simulated errors. Runs on
``--lnet-backend=sim`` too (same engine, same verbs).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import delta, local_nis, ok, peer_nis, reset_nodes, stats
from testbed.pytest.plugin import wait_for

C1_NIDS = ("10.10.0.1@tcp", "10.11.0.1@tcp")  # topologies/default.yaml
S1_NIDS = ("10.10.0.2@tcp", "10.11.0.2@tcp")
pytestmark = [pytest.mark.mininet, pytest.mark.slow, pytest.mark.topology("default")]

BURST = 20
SENSITIVITY = 100  # topologies/default.yaml health_sensitivity
#: spec §3.2 table: (local NI health falls, peer NI health falls, resent); the stats counter
#: and the NI / peer NI ``health stats`` counter each class increments (spec §4.5/§4.6)
CLASSES = {
    "local_interrupt": (True, False, True, "local_interrupt_count", "interrupts", None),
    "local_dropped": (True, False, True, "local_dropped_count", "dropped", None),
    "local_aborted": (True, False, True, "local_aborted_count", "aborted", None),
    "local_no_route": (True, False, True, "local_no_route_count", "no route", None),
    "local_timeout": (True, False, True, "local_timeout_count", "timeouts", None),
    "local_error": (True, False, False, "local_error_count", "error", None),
    "remote_error": (False, True, False, "remote_error_count", None, "error"),
    "remote_dropped": (False, True, True, "remote_dropped_count", None, "dropped"),
    "remote_timeout": (False, True, False, "remote_timeout_count", None, "timeout"),
    # lnet_incr_hstats counts NETWORK_TIMEOUT on the peer NI only (no NI counter)
    "network_timeout": (True, True, False, "network_timeout_count", None, "network timeout"),
}


@pytest.fixture
def mr2(module_topology: Any) -> Any:
    """The module's testbed, with rules, health and statistics back to their initial state."""
    return reset_nodes(module_topology)


def _ni_counters(node: Any, key: str) -> dict[str, int]:
    return {nid: ni["health stats"][key] for nid, ni in local_nis(node).items()}


def _lpni_counters(node: Any, key: str) -> dict[str, int]:
    return {nid: p["health stats"][key] for nid, p in peer_nis(node, S1_NIDS[0]).items()}


@pytest.mark.parametrize("hclass", list(CLASSES))
@pytest.mark.requirement("hlth-tst-lutf", "hlth-tst-lutf-hooks",
                         "hlth-dbg-sim-local-timeout", "hlth-dbg-sim-remote-timeout",
                         "hlth-dbg-sim-network-timeout", "hlth-lnt-local-ni-health",
                         "hlth-lnt-peer-ni-health", "hlth-lnt-decrement",
                         "hlth-lnt-no-resend-types", "hlth-lnt-resend-reselect")
def test_health_error_class(mr2: Any, hclass: str) -> None:
    """spec §3.2: LOCAL_* lower the local NI's health (all but LOCAL_ERROR are resent),
    REMOTE_* lower the peer NI's (only REMOTE_DROPPED is resent), NETWORK_TIMEOUT lowers both
    and is not resent. Each simulated error bumps the class's global counter (``stats show``)
    and, as ``lnet_incr_hstats`` does, the NI's (LOCAL_*) or the peer NI's (REMOTE_*,
    NETWORK_TIMEOUT) ``health stats`` counter; the other side's health stays 1000. A
    non-resent error fails its PUT (spec §3.3: one failure event to the ULP). A resend goes
    through full reselection (spec §3.3): after a remote class the lowered peer NI loses and
    the resend succeeds; after a local class the other local NI wins but the failing peer NI
    still has the most credits (criterion before round robin, spec §2.5: PUTs in flight hold
    the other one's), so resends may run out: errors == resend_count + failed_resends."""
    local_falls, peer_falls, resent, counter, ni_key, lpni_key = CLASSES[hclass]
    c1 = mr2.node("c1")
    ni0 = _ni_counters(c1, ni_key) if ni_key else {}
    lpni0 = _lpni_counters(c1, lpni_key) if lpni_key else {}
    n_events = len(mr2.events())
    out = ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -m put -e {hclass}")
    assert f"Added drop rule <?>->{S1_NIDS[1]} (1/1)" in out  # LNET_NID_ANY prints <?>
    reply = c1.put(S1_NIDS[0], count=BURST, size=1024)
    st = stats(c1)
    errors = st[counter]
    assert errors >= 1, st  # round robin over s1's two NIs reaches rail 1
    assert sum(st[c] for _, _, _, c, _, _ in CLASSES.values()) == errors, st
    if resent:  # each error is resent, or counted a failed resend at the limit (spec §3.3)
        assert st["resend_count"] >= 1 and errors == st["resend_count"] + st["failed_resends"]
        assert reply["failed"] == st["failed_resends"], (reply, st)
        if not local_falls:  # the lowered peer NI loses reselection: every resend succeeds
            assert st["failed_resends"] == 0 and st["successful_resends"] == errors, st
    else:
        assert st["resend_count"] == 0 and st["failed_resends"] == 0, st
        assert reply["failed"] == errors and reply["completed"] == BURST - errors, reply
    ni_health = {nid: ni["health stats"]["health value"] for nid, ni in local_nis(c1).items()}
    lpni_health = {nid: p["health stats"]["health value"]
                   for nid, p in peer_nis(c1, S1_NIDS[0]).items()}
    assert lpni_health[S1_NIDS[0]] == 1000, lpni_health  # never the target of the rule
    def falls(kind: str) -> list[dict[str, Any]]:
        """The ``kind`` notices (hlth-lnt-udev) since the burst: each carries the value its
        failure left, which recovery pings (spec §3.5) may have raised again since."""
        return [e for e in mr2.events()[n_events:] if e["kind"] == kind and e.get("node") == "c1"]

    if local_falls:
        wait_for(lambda: len(falls("ni_error")) >= errors, timeout=5)
        assert all(e["health"] < 1000 and e["hstatus"] == hclass.upper()
                   for e in falls("ni_error")), falls("ni_error")
    else:
        assert set(ni_health.values()) == {1000}, ni_health
    if ni_key:
        assert sum(delta(_ni_counters(c1, ni_key), ni0).values()) == errors
    if peer_falls:
        wait_for(lambda: len(falls("lpni_error")) >= errors, timeout=5)
        assert all(e["nid"] == S1_NIDS[1] and e["health"] <= 1000 - SENSITIVITY
                   and e["hstatus"] == hclass.upper() for e in falls("lpni_error")), \
            falls("lpni_error")
    else:
        assert lpni_health[S1_NIDS[1]] == 1000, lpni_health
    if lpni_key:
        assert sum(delta(_lpni_counters(c1, lpni_key), lpni0).values()) == errors
    rule = c1.yaml("fault drop show")["fault"][0]
    assert rule["ds_dropped"] == errors


@pytest.mark.requirement("hlth-tst-lutf",
                         "hlth-lnt-response-timeout", "hlth-dbg-sim-ack-timeout",
                         "hlth-lnt-fail-event")
def test_rx_drop_rule_fires_the_response_tracker(mr2: Any) -> None:
    """An RX rule (no -e) on s1 silently discards c1's PUTs in ``lnet_parse`` (spec §8.2):
    c1's send completes fine, but no ACK comes, so c1's response tracker expires after
    ``transaction_timeout``: the MD is unlinked with -ETIMEDOUT, ``response_timeout_count``
    grows and the peer NI the PUT went to takes a remote failure (spec §3.4)."""
    c1, s1 = mr2.node("c1"), mr2.node("s1")
    ok(c1, "lnetctl", "set transaction_timeout 3")
    try:
        ok(s1, "lctl", "net_drop_add -s * -d * -r 1 -m put")
        reply = c1.put(S1_NIDS[0], count=2, size=0, timeout=60.0)
    finally:
        ok(c1, "lnetctl", "set transaction_timeout 10")
    assert reply["failed"] == 2 and set(reply["errors"]) == {"UNLINK:-110"}, reply
    st = stats(c1)
    assert st["response_timeout_count"] == 2 and st["resend_count"] == 0, st
    lpni_health = {nid: p["health stats"]["health value"]
                   for nid, p in peer_nis(c1, S1_NIDS[0]).items()}
    assert sum(lpni_health.values()) <= 2000 - 2 * SENSITIVITY, lpni_health
    s1_stats = stats(s1)
    assert s1_stats["drop_count"] == 2 and s1_stats["recv_count"] == 0, s1_stats
