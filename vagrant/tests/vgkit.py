"""Helpers of the Vagrant suites (node NI state and counters from lnetctl YAML)."""

from __future__ import annotations

import time
from typing import Any


def ni_down(node: Any, nid: str, timeout: float = 10.0) -> None:
    """Wait until the node's linkwatch has marked NI ``nid`` down (it polls every 0.5 s):
    messages already in the cut socket may fail, as on real LNet (test_failover.py)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for net in node.yaml("net show")["net"]:
            for ni in net["local NI(s)"]:
                if ni["nid"] == nid and ni["status"] == "down":
                    return
        time.sleep(0.2)
    raise AssertionError(f"{node.name}: NI {nid} not down within {timeout:g}s")


def sends(node: Any, nid: str) -> int:
    """``send_count`` of local NI ``nid``."""
    for net in node.yaml("net show -v")["net"]:
        for ni in net["local NI(s)"]:
            if ni["nid"] == nid:
                return int(ni["statistics"]["send_count"])
    raise AssertionError(f"{node.name}: no NI {nid}")


def multirail_then_rail_cut(tb: Any, client: str, server: str, count: int = 200,
                            size: int = 65536) -> None:
    """PUTs from ``client`` spread over both rails; then rail 1 of ``client`` is cut from
    outside (carrier loss), and once its NI is down every PUT completes on rail 0 alone."""
    c1, s1 = tb.node(client), tb.node(server)
    first = [sends(c1, n) for n in c1.nids]
    burst = c1.put(s1.nids[0], count=count, size=size)
    assert burst["failed"] == 0 and burst["completed"] == count, burst
    both = [sends(c1, n) for n in c1.nids]
    assert all(b - a >= count // 8 for a, b in zip(first, both, strict=True)), (first, both)
    tb.link(client, "eth1", "down")
    assert "NO-CARRIER" in c1.exec(["ip", "link", "show", "eth1"]).out
    ni_down(c1, c1.nids[1])
    for _ in range(2):  # the first burst may still resend what the cut socket held
        cut = [sends(c1, n) for n in c1.nids]
        burst = c1.put(s1.nids[0], count=count, size=size)
        assert burst["completed"] == count, burst
    after = [sends(c1, n) for n in c1.nids]
    assert after[0] - cut[0] >= count and after[1] == cut[1], (cut, after)
