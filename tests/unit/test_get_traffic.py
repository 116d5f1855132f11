"""GET traffic (task G): ``node.get`` bursts of LNet GETs to the lnet_selftest bulk portal,
served by the match entry every node posts at start with a shared LNET_MTU source buffer, so
a GET of N bytes reads N bytes back in its REPLY (spec §4.1/§4.2). Runs the sim backend's
``SimNodeHandle.get`` and the daemon's own ``get`` verb (``ControlServer._burst``) on the
sim runtime. The Mininet side: tests/lutf/suite_health/test_reply_timeout.py.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
import yaml
from enginekit import settle_sim

import testbed
from nodes.daemon.control import ControlServer
from nodes.daemon.runtime import SRPC_BULK_DATA
from testbed.pytest.plugin import Traffic, wait_for
from testbed.sim import SimTestbed
from testbed.sim.script import run_script

S1_NIDS = ("10.10.0.2@tcp", "10.11.0.2@tcp")
KIB64 = 64 * 1024


@pytest.fixture
def tb() -> SimTestbed:
    tb = testbed.up(backend="sim", seed=1)  # the default topology (mr2)
    assert isinstance(tb, SimTestbed)
    return settle_sim(tb)  # peers discovered, statistics zeroed: the test counts its own


def _stats(tb: SimTestbed, node: str) -> dict[str, int]:
    return tb.node(node).lnetctl_yaml("stats show")["statistics"]


def test_get_burst_reads_size_bytes_back(tb: SimTestbed) -> None:
    """100 GETs of 64 KiB: each ends in a REPLY with status 0 carrying exactly 64 KiB; the
    getter counts the REPLY bytes as recv_length, the server as send_length (spec §4.5), and
    the GETs themselves carry no payload (c1 send_length, s1 recv_length stay 0)."""
    reply = tb.node("c1").get(S1_NIDS[0], count=100, size=KIB64)
    assert reply == {"ok": True, "sent": 100, "completed": 100, "failed": 0, "errors": {}}
    c1, s1 = _stats(tb, "c1"), _stats(tb, "s1")
    assert (c1["recv_length"], c1["send_length"]) == (100 * KIB64, 0), c1
    assert (s1["send_length"], s1["recv_length"]) == (100 * KIB64, 0), s1
    assert (c1["send_count"], s1["recv_count"]) == (100, 100)
    replies = [e for e in tb.fabric.events["c1"] if e.kind == "REPLY"]
    assert len(replies) == 100 and {len(e.payload) for e in replies} == {KIB64}


def test_get_sizes_zero_and_mtu_and_one_shared_source(tb: SimTestbed) -> None:
    """A 0-byte GET gets an empty REPLY, an LNET_MTU one the whole buffer; every node's bulk
    ME reads the same module-level bytes object (no per-node copy of 1 MiB)."""
    c1 = tb.node("c1")
    assert c1.get(S1_NIDS[1], count=3, size=0)["completed"] == 3
    assert c1.get(S1_NIDS[1], count=1, size=1 << 20)["completed"] == 1
    assert _stats(tb, "c1")["recv_length"] == 1 << 20
    sources = {id(md.data) for rt in tb.runtimes.values() for me in rt.engine._mes
               for md in [me.md] if me.portal == 52}
    assert sources == {id(SRPC_BULK_DATA)}


@pytest.mark.parametrize(("kw", "error"), [
    ({"dst": "nonsense"}, "dst: Cannot parse NID 'nonsense'"),
    ({"count": 0}, "count must be an integer 1..1000000, not 0"),
    ({"size": (1 << 20) + 1}, "size must be an integer 0..1048576, not 1048577"),
    ({"size": "64k"}, "size must be an integer 0..1048576, not '64k'"),
    ({"numa": -1}, "numa must be a NUMA node number >= 0, not -1"),
    ({"src": "bogus@"}, "src: Cannot parse NID 'bogus@'"),
])
def test_bad_arguments_give_an_error_dict(tb: SimTestbed, kw: dict[str, Any],
                                          error: str) -> None:
    """Bad arguments never raise: ``{"ok": False, "error": ...}`` naming the argument."""
    args: dict[str, Any] = {"dst": S1_NIDS[0], "count": 1, "size": 8, **kw}
    for op in ("get", "put"):
        assert getattr(tb.node("c1"), op)(**args) == {"ok": False, "error": error}
        assert asyncio.run(_verb(tb, op, args)) == {"ok": False, "error": error}


class _Events:
    """The daemon's event log, kept in memory (``nodes/daemon/eventlog.py EventLog``)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        self.lines.append((kind, fields))


async def _verb(tb: SimTestbed, op: str, args: dict[str, Any],
                events: _Events | None = None) -> dict[str, Any]:
    """The daemon's ``put``/``get`` control verb, run on c1's sim runtime (its waits are
    virtual, so the coroutine never blocks)."""
    server = ControlServer.__new__(ControlServer)  # no socket: only the verb runs
    server.rt, server.events = tb.runtimes["c1"], events  # type: ignore[assignment]
    return await server._burst(op, {"cmd": op, **args})


def test_daemon_get_verb_counts_replies(tb: SimTestbed) -> None:
    """The daemon's burst function (one for PUT and GET): 70 GETs (more than the 64 in
    flight) all complete on their REPLY; a GET to a NID nobody has fails with its final
    event's kind and status, and is counted, not raised."""
    args = {"dst": S1_NIDS[0], "count": 70, "size": 4096}
    events = _Events()
    reply = asyncio.run(_verb(tb, "get", args, events))
    assert reply == {"ok": True, "sent": 70, "completed": 70, "failed": 0, "errors": {}}
    assert events.lines == [  # workload events around the burst (docs/events.md §1.6)
        ("traffic_start", {"op": "get", "dst": S1_NIDS[0], "count": 70, "size": 4096}),
        ("traffic_end", {"op": "get", "dst": S1_NIDS[0], "sent": 70, "completed": 70,
                         "failed": 0, "errors": {}})]
    assert _stats(tb, "s1")["send_length"] == 70 * 4096
    bad = asyncio.run(_verb(tb, "get", {"dst": "10.10.0.77@tcp", "count": 2, "size": 1}))
    assert bad["failed"] == 2 and bad["completed"] == 0, bad
    assert all(k.startswith(("SEND:", "UNLINK:", "REPLY:-")) for k in bad["errors"]), bad


def test_reply_drop_rule_times_the_get_out(tb: SimTestbed) -> None:
    """hlth-dbg-sim-reply-timeout on the sim: an RX drop rule for REPLYs on the getter (spec
    §8.2) leaves the GET to its response tracker: UNLINK -ETIMEDOUT after transaction_timeout
    (10 s in the default topology), response_timeout_count grows (spec §3.4)."""
    c1 = tb.node("c1")
    assert c1.lctl("net_drop_add -s * -d * -r 1 -m reply").rc == 0
    t0 = tb.now
    reply = c1.get(S1_NIDS[0], count=2, size=KIB64)
    assert reply["errors"] == {"UNLINK:-110": 2}, reply
    assert 9.5 <= tb.now - t0 <= 11.5
    assert _stats(tb, "c1")["response_timeout_count"] >= 2
    assert _stats(tb, "s1")["send_length"] == 2 * KIB64  # served; lost on the way back


def test_traffic_generator_and_script_take_get(tb: SimTestbed) -> None:
    """``Traffic(op="get")`` runs GET bursts in the background; ``NODE get DST`` in a sim
    script; an unknown op is refused up front."""
    with Traffic(tb.node("c1"), S1_NIDS[1], burst=5, size=512, op="get") as t:
        wait_for(lambda: t.completed >= 10, timeout=30)
    totals = t.totals()
    assert totals["failed"] == 0 and totals["problems"] == [], totals
    assert _stats(tb, "s1")["send_length"] == 512 * totals["completed"]
    with pytest.raises(ValueError, match="op must be 'put' or 'get'"):
        Traffic(tb.node("c1"), S1_NIDS[1], op="delete")
    out, err = io.StringIO(), io.StringIO()
    assert run_script(tb, ["c1 get s1 4 2048"], out, err) == 0, err.getvalue()
    assert yaml.safe_load(out.getvalue())["completed"] == 4
