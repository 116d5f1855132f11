"""``testbed report`` and ``testbed check`` over a blackhole and a flap (issue 16 acceptance),
on Mininet and on the sim (``--lnet-backend=sim``): the same test, the same assertions.

c1 PUTs to s1 while its eth0 is blackholed for 2 s, then while its eth1 flaps twice. The
report's summary must name each fault window (applied -> reverted) and each health dip and
its recovery at the times the event log shows; every series it plotted must be the recorder
file's; every PNG must be a real picture; and the whole log must pass ``testbed check`` with
the message invariants checked (the plugin's teardown check runs it again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lutf.lnet_views import advance_until, discover_peers
from testbed.observe import recfile
from testbed.observe.check import check_events
from testbed.observe.eventlog import origin
from testbed.observe.pytest_check import events_of
from testbed.pytest import observing

pytest.importorskip("matplotlib")  # the `report` extra (make venv installs it)
from matplotlib import image

pytestmark = [pytest.mark.mininet, pytest.mark.slow, pytest.mark.topology("faults2.yaml")]
S1_TCP, S1_TCP1 = "10.10.0.2@tcp", "10.11.0.2@tcp1"


def _reverted(tb: Any, count: int) -> None:
    advance_until(tb, lambda: sum(e["kind"] == "fault_reverted" for e in tb.events())
                  >= count, 30.0, f"{count} fault window(s) closed", step=0.2)


def _moved(rec: recfile.Rec, ni: str, until: float) -> list[int]:
    """An NI's bytes (sent + received; messages if it counted no bytes) at each of its rows up
    to ``until``: what its throughput plot integrates to."""
    ts, tx = rec.series("ni", ni, "tx_bytes")
    rx = rec.series("ni", ni, "rx_bytes")[1]
    totals = [(a or 0) + (b or 0) for a, b in zip(tx, rx, strict=True)]  # type: ignore[operator]
    if not any(totals):
        sends, recvs = rec.series("ni", ni, "sends")[1], rec.series("ni", ni, "recvs")[1]
        totals = [(a or 0) + (b or 0) for a, b in zip(sends, recvs, strict=True)]  # type: ignore[operator]
    return [v for t, v in zip(ts, totals, strict=True) if t <= until]


def _recs(tb: Any) -> dict[str, recfile.Rec]:
    rdir = getattr(tb, "record_dir", None) or tb.rundir
    return recfile.read_dir(rdir)


@pytest.mark.requirement("hlth-lnt-udev")
def test_blackhole_and_flap_report(topology: Any, tmp_path: Path) -> None:
    tb = topology
    discover_peers(tb)
    c1 = tb.node("c1")
    tb.fault.blackhole(node="c1", iface="eth0", duration=2.0)
    c1.put(S1_TCP, count=20, size=1000)
    _reverted(tb, 1)
    tb.fault.flap(node="c1", iface="eth1", down=0.6, up=0.6, count=2)
    for _ in range(4):
        c1.put(S1_TCP1, count=10, size=1000)
        tb.advance(0.3)
    _reverted(tb, 3)
    tb.advance(1.0)
    rep = observing.report_of(tb, tmp_path / "report")
    events = events_of(tb)
    t0 = origin(events)

    # every fault window, as applied -> reverted in the log
    applied = [e for e in events if e["kind"] == "fault_applied"]
    reverted = {(e["id"], e["activation"]): e for e in events if e["kind"] == "fault_reverted"}
    assert [e["fault_kind"] for e in applied] == ["blackhole", "flap", "flap"]
    assert f"fault windows: {len(applied)}" in rep.summary
    for a in applied:
        r = reverted[(a["id"], a["activation"])]
        line = (f"{a['id']} {a['fault_kind']} c1/{a['spec']['iface']}: +{a['t'] - t0:.3f}s "
                f"-> +{r['t'] - t0:.3f}s ({r['t'] - a['t']:.3f}s)")
        assert line in rep.summary, (line, rep.summary)

    # every health dip: when it fell, how low, when it was back, as the notices say
    errors = [e for e in events if e["kind"] in ("ni_error", "lpni_error")]
    assert errors, "the blackhole must cost health"
    for e in errors:
        side = e["kind"].split("_")[0]
        dip = next(d for d in rep.facts.dips if d.node == e["node"]
                   and d.what == f"{side} {e['nid']}" and d.fell <= e["t"]
                   and (d.back is None or e["t"] <= d.back))
        assert dip.low <= e["health"]
        back = [s["t"] for s in events if s.get("nid") == e["nid"] and s.get("node") == e["node"]
                and s["t"] >= dip.fell and s["kind"] in (f"{side}_status", f"{side}_health")
                and s.get("new", s.get("health")) == 1000]
        assert dip.back == (back[0] if back else None)
        assert f"{e['node']} {side} {e['nid']}: fell at +{dip.fell - t0:.3f}s to {dip.low}" \
            in rep.summary

    # the plotted series are the recorder files' own (read after the report: the recorder
    # goes on sampling, so what was plotted is a prefix of what the file holds now)
    recs = _recs(tb)
    compared = 0
    for (png, label), (ts, vs) in rep.series.items():
        node, topic = png.removesuffix(".png").split("-", 1)
        kind, ident = label.split(" ", 1)
        if topic in ("health", "credits"):
            if topic == "credits":
                kind, (ident, col) = "ni", ident.split(" ")
            fts, fvs = recs[node].series(kind, ident, "health" if topic == "health" else col)
            assert ts and (fts[:len(ts)], fvs[:len(vs)]) == (ts, vs), (png, label)
        elif ts:  # throughput: the rates integrate to what the recorder counted meanwhile
            totals = _moved(recs[node], ident, ts[-1])
            area = sum(v * (ts[i + 1] - ts[i]) for i, v in enumerate(vs[:-1]) if v)
            assert area == pytest.approx(totals[-1] - totals[0], rel=1e-6), (png, label)
        compared += 1
    assert compared >= 10
    assert ("c1-health.png", f"lpni {S1_TCP}") in rep.series

    # every figure is a real picture
    assert {p.name for p in rep.pngs} == {f"{n}-{t}.png" for n in ("c1", "s1")
                                          for t in ("health", "throughput", "credits")}
    for png in rep.pngs:
        assert png.stat().st_size > 10_000, png
        pixels = image.imread(png)[..., :3]
        assert pixels.std() > 0.05, f"{png} is blank"

    # LNet kept its promises, and the message invariants were among those checked
    result = check_events(events)
    assert result.ok, result.render()
    assert {"completion", "resend", "health", "fatal_ni", "routing"} <= set(result.checked)
    # the workload, from the traffic_end events of the five bursts
    ends = [e for e in events if e["kind"] == "traffic_end"]
    assert len(ends) == 5 and [e["node"] for e in ends] == ["c1"] * 5
    sent, done, failed = (sum(e[k] for e in ends) for k in ("sent", "completed", "failed"))
    assert sent == 60 and done + failed == 60
    assert f"c1 put: 5 burst(s), {sent} sent, {done} completed, {failed} failed" in rep.summary
