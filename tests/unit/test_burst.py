"""The one PUT/GET burst (``nodes/burst.py``, issue 29 item 3): at most 64 in flight, a
message counted by its final event only, ACK/REPLY with status 0 a success and anything else
a failure by kind and status (spec §4.4), the totals of the reply and ``traffic_end``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodes.burst import BULK_PORTAL, MAX_INFLIGHT, Burst
from nodes.lnet.nid import NID

DST = NID.parse("10.10.0.2@tcp")


@dataclass
class Ev:
    kind: str
    status: int
    unlinked: bool = True


class Engine:
    """Records each start: (op, now, keywords)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, dict[str, Any]]] = []

    def put(self, now: float, dst: NID, **kw: Any) -> tuple[int, list[Any]]:
        self.calls.append(("put", now, kw))
        return len(self.calls), []

    def get(self, now: float, dst: NID, **kw: Any) -> tuple[int, list[Any]]:
        self.calls.append(("get", now, kw))
        return len(self.calls), []


def test_at_most_64_in_flight_and_refilled_by_final_events() -> None:
    eng = Engine()
    b = Burst(eng, "put", DST, count=100, size=8)
    while b.room():
        b.start(1.0)
    assert b.started == b.inflight == MAX_INFLIGHT == 64
    assert not b.final(Ev("SEND", 0, unlinked=False))  # not final: nothing counted
    assert b.inflight == 64 and not b.room()
    assert b.final(Ev("ACK", 0))
    assert b.room() and b.inflight == 63
    b.start(2.0)
    assert b.started == 65 and not b.room()
    op, now, kw = eng.calls[-1]
    assert (op, now, kw["portal"], kw["payload"]) == ("put", 2.0, BULK_PORTAL, bytes(8))


def test_totals_count_failures_by_kind_and_status() -> None:
    eng = Engine()
    b = Burst(eng, "get", DST, count=3, size=4096)
    for _ in range(3):
        b.start(0.0)
    assert eng.calls[0][2]["length"] == 4096 and "payload" not in eng.calls[0][2]
    b.final(Ev("REPLY", 0))
    b.final(Ev("ACK", 0))  # a GET succeeds on its REPLY only
    assert not b.finished
    b.final(Ev("REPLY", -110))
    assert b.finished
    assert b.reply() == {"ok": True, "sent": 3, "completed": 1, "failed": 2,
                         "errors": {"ACK:0": 1, "REPLY:-110": 1}}
    assert b.end(sent=2) == {"op": "get", "dst": "10.10.0.2@tcp", "sent": 2, "completed": 1,
                             "failed": 2, "errors": {"ACK:0": 1, "REPLY:-110": 1}}


def test_the_sim_node_bursts_through_it() -> None:
    """A sim node's ``put``: the reply is the Burst's (every PUT ACKed on a healthy fabric)."""
    from testbed.sim import SimTestbed

    tb = SimTestbed.up(None, name="s29backendburst", seed=1)
    try:
        reply = tb.node("c1").put("10.10.0.2@tcp", count=150, size=64)
        assert reply == {"ok": True, "sent": 150, "completed": 150, "failed": 0,
                         "errors": {}}
        ends = [e for e in tb.fabric.event_log if e.get("kind") == "traffic_end"]
        assert ends and ends[-1]["completed"] == 150 and ends[-1]["sent"] == 150
    finally:
        tb.down()
