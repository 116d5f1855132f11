"""Hostile wire frames at a real socklnd listener (issue 11 items 6-7; hostile-input suite part
d; the frame-size and connection limits), on Mininet.

A broken peer (``wirepeer.py``) runs in x1's namespace and attacks c1's acceptor before and
after a real V3 handshake, with a fixed corpus (seeded). Each case whose bytes are wrong must
end with c1 closing the connection -- at once for a bad magic, version, type or length, within
the LND timeout (3 s here) for a handshake or a frame that stalls. Afterwards c1 answers an
LNet ping from s1, its RSS grew by at most 20 MB and it created nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hostilekit import HERE, PAIR, Baseline

from nodes.lnd.conntable import MAX_CONNS_FACTOR

pytestmark = [pytest.mark.mininet, pytest.mark.slow, pytest.mark.topology(str(PAIR))]
LND_TIMEOUT = 3


@pytest.fixture(scope="module")
def attacked(module_topology: Any) -> Iterator[tuple[Any, Baseline]]:
    tb = module_topology
    res = tb.node("c1").lnetctl("net", "set", "--net", "tcp", "--lnd-timeout", str(LND_TIMEOUT))
    assert res.rc == 0, res
    base = Baseline.take(tb)
    yield tb, base
    base.verify()


def run_peer(tb: Any, *args: str) -> list[dict[str, Any]]:
    res = tb.node("x1").exec([sys.executable, str(HERE / "wirepeer.py"), *args], timeout=300)
    assert res.rc == 0, res.err[-2000:]
    return [json.loads(line) for line in res.out.splitlines() if line.strip()]


@pytest.mark.parametrize("mode, seed", [("pre", "1"), ("pre", "2"), ("post", "1")])
def test_bad_frames_close_the_connection(attacked: tuple[Any, Baseline], mode: str,
                                         seed: str) -> None:
    tb, base = attacked
    c1, x1 = tb.node("c1"), tb.node("x1")
    results = run_peer(tb, mode, c1.nids[0], x1.nids[0], seed)
    assert len(results) >= 10
    wrong = [r for r in results if r["expect"] is True and not r["closed"]]
    assert not wrong, f"connections c1 kept open: {wrong}"
    slow = [r for r in results if r["closed"] and r["after"] > LND_TIMEOUT + 4]
    assert not slow, f"closed later than the LND timeout ({LND_TIMEOUT} s): {slow}"
    if mode == "post":
        refused = [r for r in results if r.get("note") == "handshake refused"]
        assert len(refused) < len(results) // 2, f"the real handshakes failed: {refused}"
    base.verify()
    assert "Traceback" not in c1.log()


def test_connection_limits_per_peer(attacked: tuple[Any, Baseline]) -> None:
    """At most MAX_CONNS_FACTOR x conns_per_peer (1) connections per peer, and as many
    handshakes in progress per address; the rest are refused (closed) at once."""
    tb, base = attacked
    c1, x1 = tb.node("c1"), tb.node("x1")
    [res] = run_peer(tb, "conns", c1.nids[0], x1.nids[0], "0", "12")
    assert 1 <= res["established_kept"] <= MAX_CONNS_FACTOR, res
    assert res["silent_kept"] <= MAX_CONNS_FACTOR, res
    base.verify()


def test_refusals_are_logged_at_a_bounded_rate(attacked: tuple[Any, Baseline]) -> None:
    """60 connections with the same bad connreq from x1 (issue 11 item 10: 5,629 ERROR lines
    in one probe): at most 5 lines of one kind per 10 s, then "Skipped N previous similar
    messages"; every refusal closed."""
    tb, _base = attacked
    c1, x1 = tb.node("c1"), tb.node("x1")
    ip = x1.nids[0].split("@")[0]
    before = len([ln for ln in c1.log().splitlines() if ip in ln])
    results = run_peer(tb, "flood", c1.nids[0], x1.nids[0], "0", "60")
    assert len(results) == 60 and all(r["closed"] for r in results), results[:3]
    lines = [ln for ln in c1.log().splitlines() if ip in ln][before:]
    assert 1 <= len(lines) <= 12, "\n".join(lines[-20:])
