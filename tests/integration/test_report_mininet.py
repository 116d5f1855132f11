"""``testbed report`` and ``testbed check`` on Mininet (issue 16 items 2, 4): a blackhole and a
flap on c1's rails under PUT traffic; the report's summary names every fault window and every
health dip and recovery exactly as the event log shows them, and the log passes the checker.
(No recorder files yet on Mininet: the node driver that writes them is not wired in, so the
report has the summary and no figures, and says so.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from itkit import pytestmark, settle_peers  # noqa: F401  (the marks)

from testbed.observe import eventlog
from testbed.observe.check import check_rundir
from testbed.observe.report import INDEX, report_rundir

TOPO = """
name: obr
global: {health_sensitivity: 100, retry_count: 1, transaction_timeout: 2}
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp1, subnet: 10.11.0.0/24}
nodes:
  c1: {interfaces: [lan0, lan1], peers: [s1]}
  s1: {interfaces: [lan0, lan1], peers: [c1]}
"""


def _wait_reverted(tb: Any, count: int, bound: float = 30.0) -> None:
    end = time.monotonic() + bound
    while sum(e["kind"] == "fault_reverted" for e in tb.events()) < count:
        assert time.monotonic() < end, "fault windows did not close"
        time.sleep(0.2)


def test_blackhole_and_flap_report(testbed_factory: Any, tmp_path: Path) -> None:
    path = tmp_path / "obr.yaml"
    path.write_text(TOPO)
    tb = testbed_factory(path)
    settle_peers(tb)
    c1 = tb.node("c1")
    tb.fault.blackhole(node="c1", iface="eth0", duration=2.0)
    c1.put("10.10.0.2@tcp", count=20, size=1000)
    _wait_reverted(tb, 1)
    tb.fault.flap(node="c1", iface="eth1", down=0.6, up=0.6, count=2)
    for _ in range(4):
        c1.put("10.11.0.2@tcp1", count=10, size=1000)
        time.sleep(0.3)
    _wait_reverted(tb, 3)
    time.sleep(1.0)
    events = eventlog.read_rundir(tb.rundir).events
    rep = report_rundir(tb.rundir, tmp_path / "report")
    t0 = eventlog.origin(events)

    applied = [e for e in events if e["kind"] == "fault_applied"]
    reverted = {(e["id"], e["activation"]): e for e in events if e["kind"] == "fault_reverted"}
    assert [e["fault_kind"] for e in applied] == ["blackhole", "flap", "flap"]
    for a in applied:
        r = reverted[(a["id"], a["activation"])]
        iface = a["spec"]["iface"]
        line = (f"{a['id']} {a['fault_kind']} c1/{iface}: +{a['t'] - t0:.3f}s -> "
                f"+{r['t'] - t0:.3f}s ({r['t'] - a['t']:.3f}s)")
        assert line in rep.summary, (line, rep.summary)
    assert f"fault windows: {len(applied)}" in rep.summary

    errors = [e for e in events if e["kind"] in ("ni_error", "lpni_error")]
    assert errors, "the blackhole must cost health"
    for e in errors:
        side = e["kind"].split("_")[0]
        dip = next(d for d in rep.facts.dips if d.node == e["node"]
                   and d.what == f"{side} {e['nid']}")
        assert dip.fell <= e["t"] and dip.low <= e["health"]
        healthy = [s["t"] for s in events if s.get("nid") == e["nid"] and s["t"] >= dip.fell
                   and (s["kind"] == f"{side}_status" and s.get("healthy")
                        or s["kind"] == f"{side}_health" and s.get("new", 0) >= 1000)]
        assert dip.back == (healthy[0] if healthy else None)
        assert f"{e['node']} {side} {e['nid']}: fell at +{dip.fell - t0:.3f}s" in rep.summary
    assert rep.pngs == [] and "No recorder files" in (tmp_path / "report" / INDEX).read_text()

    result = check_rundir(tb.rundir)
    assert result.ok, result.render()
    assert "health" in result.checked
