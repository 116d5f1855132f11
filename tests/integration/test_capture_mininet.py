"""``testbed capture`` on Mininet (issue 16 item 3): a routed PUT burst captured in the nodes'
namespaces with dumpcap decodes as LNet with our layers, and Wireshark's own LNet dissector
finds 0 malformed frames once the portals no Wireshark dissector claims (0: discovery pushes;
52: selftest bulk) are mapped to its ``data`` dissector (in stock tshark every PUT payload to
them is "Malformed" because packet-lnet.c leaves it unconsumed: the test shows that too, so the
cause stays proven)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from itkit import TOPOLOGIES, pytestmark  # noqa: F401  (the marks)

from testbed.observe import capture
from testbed.observe.pcapsum import summarize

COUNT = 200
SIZE = 4096
ROUTE_BOUND = 20.0  # 3 router-check intervals of topologies/routed.yaml + slack


def _wait_routed(c1: Any, dst: str) -> None:
    end = time.monotonic() + ROUTE_BOUND
    while c1.ping(dst, timeout=2).rc != 0:
        assert time.monotonic() < end, f"c1 cannot reach {dst} within {ROUTE_BOUND}s"
        time.sleep(0.5)


def test_routed_put_burst_capture_decodes_clean(testbed_factory: Any, tmp_path: Path) -> None:
    tb = testbed_factory(TOPOLOGIES / "routed.yaml")
    c1, r1, s1 = tb.node("c1"), tb.node("r1"), tb.node("s1")
    dst = s1.nids[0]
    _wait_routed(c1, dst)
    files = {n.name: tmp_path / f"{n.name}.pcapng" for n in (c1, r1)}
    procs = {n.name: capture.start(n.host_pid, "any", files[n.name], bpf="tcp port 988")
             for n in (c1, r1)}
    try:
        for name, proc in procs.items():
            capture.wait_ready(files[name], proc)
        reply = c1.put(dst, count=COUNT, size=SIZE)
        time.sleep(0.5)  # the last ACKs reach the wire
    finally:
        for proc in procs.values():
            capture.stop(proc)
    assert reply["completed"] == COUNT, reply

    mine = summarize(files["c1"])
    msgs = {(m["type"], m["src"], m["dst"]): m["count"] for m in mine.as_dict()["messages"]}
    portals = {(p["type"], p["portal"]): p["count"] for p in mine.as_dict()["portals"]}
    assert portals[("PUT", 52)] == COUNT  # lnet_selftest's bulk portal (SRPC_RDMA_PORTAL)
    # plus, maybe, discovery's push to s1 (portal 0) after the first ping
    assert COUNT <= msgs[("PUT", c1.nids[0], dst)] <= COUNT + portals.get(("PUT", 0), 0)
    assert msgs[("ACK", dst, c1.nids[0])] >= COUNT
    assert mine.bytes >= COUNT * SIZE
    assert mine.resends == [] and mine.resets == [] and mine.undecoded == []

    forwarded = summarize(files["r1"])
    via_r1 = forwarded.as_dict()["messages"]
    assert any(m["type"] == "PUT" and m["dst"] == dst for m in via_r1)
    assert forwarded.resends == []  # a forwarded copy is no resend

    for name, path in files.items():
        view = capture.tshark_check(path)
        assert view.lnet_frames > 0, name
        assert view.malformed == [], (name, view.malformed[:5])
        stock = capture.tshark_check(path, data_portals=False)
        assert stock.malformed, name  # stock tshark: selftest bulk PUTs flagged
        assert all(m["portal"].split(",")[0] in ("0", "52") and "offset:96" in m["message"]
                   for m in stock.malformed), (name, stock.malformed[:5])
