"""GET traffic and a simulated REPLY timeout on the real daemon (seed 003
hlth-dbg-sim-reply-timeout; spec §3.4, §4.2, §8.2).

One ``mr2`` testbed for the module (topologies/default.yaml: c1 and s1, two rails each,
transaction_timeout 10, health_sensitivity 100); each test starts from ``reset_nodes`` (no
LNet fault rules, peers discovered, full health, statistics zeroed). The GETs are
``node.get``: bursts of LNet GETs to the lnet_selftest bulk portal (SRPC_RDMA_PORTAL), which
every node serves from one match entry whose MD reads back as many bytes as asked for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from lutf.lnet_views import S1_NIDS, ok, peer_nis, reset_nodes, stats
from testbed.spawn import PROJECT_ROOT

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

KIB64 = 64 * 1024
SENSITIVITY = 100  # topologies/default.yaml health_sensitivity
#: ping REPLYs (discovery, recovery) that may cross the wire meanwhile are a few hundred bytes
SLACK = 4096


@pytest.fixture
def mr2(module_topology: Any) -> Any:
    return reset_nodes(module_topology)


def _clock(tb: Any) -> Callable[[], float]:
    """Seconds as the testbed's engines see them: virtual on the sim, wall clock on Mininet."""
    if tb.status().get("backend") == "sim":
        return lambda: float(tb.now)
    return time.monotonic


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``testbed`` command line, as a user runs it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT),
                                                      env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_get_burst_reads_the_bytes_back(mr2: Any) -> None:
    """A GET of N bytes is answered by the target's MD with a REPLY of N bytes (spec §4.2,
    ``lnet_parse_get``): 100 GETs of 64 KiB all end in their REPLY with status 0; the REPLY
    bytes are counted as ``recv_length`` on the getter and ``send_length`` on the server, the
    GETs themselves carry none (spec §4.5). ``testbed traffic --op get`` and bad arguments
    (an error dict, never a traceback) go through the same daemon verb."""
    c1, s1 = mr2.node("c1"), mr2.node("s1")
    reply = c1.get(S1_NIDS[0], count=100, size=KIB64)
    assert reply == {"ok": True, "sent": 100, "completed": 100, "failed": 0, "errors": {}}
    got, served = stats(c1), stats(s1)
    assert 0 <= got["recv_length"] - 100 * KIB64 < SLACK, got
    assert 0 <= served["send_length"] - 100 * KIB64 < SLACK, served
    assert got["send_length"] < SLACK and served["recv_length"] < SLACK, (got, served)
    assert served["recv_count"] >= 100 and got["recv_count"] >= 100
    if mr2.status().get("backend") != "sim":  # the CLI reaches Mininet testbeds only
        out = _cli("traffic", "-n", mr2.name, "c1", "--to", "s1", "--op", "get", "--count",
                   "5", "--size", "1024")
        assert out.returncode == 0 and "get sent 5 completed 5 failed 0" in out.stdout, out
    assert c1.get("10.10.0.2@nowhere") == {
        "ok": False, "error": "dst: Cannot parse NID '10.10.0.2@nowhere'"}
    assert c1.get(S1_NIDS[0], count=1, size=(1 << 20) + 1)["error"] == (
        "size must be an integer 0..1048576, not 1048577")


@pytest.mark.requirement("hlth-dbg-sim-reply-timeout", "hlth-tst-lutf", "hlth-tst-lutf-hooks",
                         "hlth-lnt-response-timeout")
def test_reply_drop_rule_times_the_get_out(mr2: Any) -> None:
    """Real LNet simulates a lost REPLY with an RX drop rule on the getter (``lctl
    net_drop_add -s * -d * -r 1 -m reply``, spec §8.1/§8.2: no ``-e``, so it applies in
    ``lnet_parse`` and silently discards every REPLY). s1 serves each GET, c1 never sees the
    REPLY, so c1's response tracker expires after ``transaction_timeout`` (3 s here):
    ``lnet_finalize_expired_responses`` unlinks the MD with -ETIMEDOUT (no resend), bumps
    ``response_timeout_count`` and gives the peer NI the GET went to a remote failure (its
    health falls by the sensitivity, spec §3.4)."""
    c1, s1 = mr2.node("c1"), mr2.node("s1")
    assert c1.get(S1_NIDS[0], count=2, size=KIB64)["completed"] == 2  # no rule: REPLYs come
    ok(c1, "lnetctl", "stats reset")
    ok(s1, "lnetctl", "stats reset")
    ok(c1, "lnetctl", "set transaction_timeout 3")
    try:
        out = ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m reply")
        assert "Added drop rule <?>-><?> (1/1)" in out, out
        clock = _clock(mr2)
        t0 = clock()
        reply = c1.get(S1_NIDS[0], count=2, size=KIB64, timeout=60.0)
        took = clock() - t0
        rule = c1.yaml("fault drop show")["fault"][0]
        st, served = stats(c1), stats(s1)
        lpni_health = {nid: p["health stats"]["health value"]
                       for nid, p in peer_nis(c1, S1_NIDS[0]).items()}
    finally:
        ok(c1, "lctl", "net_drop_del -a")
        ok(c1, "lnetctl", "set transaction_timeout 10")
    assert reply["errors"] == {"UNLINK:-110": 2} and reply["completed"] == 0, reply
    assert 2.5 <= took <= 8, took  # the 3 s transaction timeout, not the 60 s caller wait
    if mr2.status().get("backend") == "sim":  # the virtual clock is exact (issue 14 item 3)
        assert took == pytest.approx(3.0, abs=1e-3), took
    assert rule["fs_reply"] >= 2 and rule["ds_dropped"] >= 2, rule
    assert st["response_timeout_count"] >= 2 and st["resend_count"] == 0, st
    assert st["drop_count"] >= 2 and st["recv_length"] < SLACK, st  # REPLYs never delivered
    assert served["send_length"] >= 2 * KIB64, served  # s1 did answer both GETs
    assert sum(lpni_health.values()) <= 2000 - 2 * SENSITIVITY, lpni_health
