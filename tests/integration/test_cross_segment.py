"""The cross-segment send after a carrier loss, on Mininet: what the simulator's fabric
follows (``testbed/sim/paths.py`` ``close_routed``; issue 30 item 2).

c1's lan0 NI reaches s1's lan1 NID out of c1's eth1 (weak host model, docs/differences.md).
Linux would keep that established connection and hold its writes when eth1 goes down (its
connected route gone), but the daemon's link watcher closes, with the NI's carrier, the
conns to peers on the lost interface's subnet (``SockLND.link_down``), so the next send
connects afresh and the kernel answers ENETUNREACH at once. The same steps on the simulator:
``tests/unit/test_sim.py::test_cross_segment_send_is_routed_by_the_host``.
"""

from __future__ import annotations

import time
from typing import Any

from itkit import S1_NIDS, pytestmark  # noqa: F401  (the marks)

from testbed.observe.eventlog import flush_writers, read_rundir


def test_cross_segment_send_after_the_carrier_loss_meets_no_route_at_once(
        testbed_factory: Any) -> None:
    tb = testbed_factory(trace_messages=True)
    c1 = tb.node("c1")
    assert c1.ping(S1_NIDS[1], source="10.10.0.1@tcp").rc == 0  # the connection is up
    tb.link("c1", "eth1", "down")
    assert c1.ping(S1_NIDS[1], source="10.10.0.1@tcp", timeout=2).rc != 0
    flush_writers(tb.rundir)
    time.sleep(0.5)
    evs = read_rundir(tb.rundir).events
    down = max(e["t"] for e in evs if e.get("kind") == "link_down" and e["node"] == "c1")
    msgs = [e for e in evs if e.get("kind") == "msg" and e["node"] == "c1" and e["t"] > down
            and e.get("ni", e.get("src")) == "10.10.0.1@tcp" and e["dst"] == S1_NIDS[1]]
    sends = [e for e in msgs if e["event"] == "send"]
    done = [e for e in msgs if e["event"] == "complete"]
    assert len(sends) == 3 and done  # retry_count 2: every attempt failed
    assert (done[0]["status"], done[0]["hstatus"]) == (-101, "REMOTE_DROPPED")
    assert done[0]["t"] - sends[0]["t"] < 0.5  # at once: no connection held the writes
