"""``testbed report`` on a sim run recorded the way the node driver will record it: the summary
names the fault window and the health dip and recovery the events show, the series plotted
are the recorder file's, and every PNG is a real picture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")  # the `report` extra (make venv installs it)

from matplotlib import image
from observekit import TOPOLOGIES, flap_run, record_sim

from testbed import cli, runstate
from testbed.observe import recfile
from testbed.observe.report import INDEX, SUMMARY, make_report

PERIOD = 0.1
LPNI = "10.11.0.2@tcp"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A sim run: c1's eth1 down between PUT bursts, then 30 s of recovery; recorders on."""
    from testbed.sim import SimTestbed

    rundir = tmp_path_factory.mktemp("obsreport")
    tb = SimTestbed.up(TOPOLOGIES / "default.yaml", name="obsrep", seed=5)
    try:
        recs = record_sim(tb, rundir, PERIOD)
        flap_run(tb, settle=30.0)
        for r in recs.values():
            r.close()
        events = tb.events()
    finally:
        tb.down()
    return rundir, events


def test_summary_names_window_dip_and_recovery(run: tuple[Path, list[dict[str, Any]]],
                                               tmp_path: Path) -> None:
    rundir, events = run
    rep = make_report(tmp_path, events=events, recs=recfile.read_dir(rundir))
    down = next(e for e in events if e["kind"] == "link_down")
    up = next(e for e in events if e["kind"] == "link_up")
    assert (f"link down c1 eth1: +{down['t']:.3f}s -> +{up['t']:.3f}s "
            f"({up['t'] - down['t']:.3f}s)") in rep.summary
    first_err = next(e for e in events if e["kind"] == "lpni_error" and e["nid"] == LPNI)
    healthy = [e for e in events if e["kind"] == "lpni_status" and e["nid"] == LPNI
               and e["healthy"]]
    assert healthy, "the peer NI must recover within the run"
    dip = next(d for d in rep.facts.dips if d.what == f"lpni {LPNI}")
    assert first_err["t"] <= dip.fell <= first_err["t"] + PERIOD
    assert dip.back is not None and healthy[-1]["t"] <= dip.back <= healthy[-1]["t"] + PERIOD
    assert dip.low == min(e["health"] for e in events
                          if e["kind"] == "lpni_error" and e["nid"] == LPNI)
    assert f"c1 lpni {LPNI}: fell at +{dip.fell:.3f}s to {dip.low}, back to 1000 at " \
           f"+{dip.back:.3f}s" in rep.summary
    assert "traffic moved to the other rail(s) within" in rep.summary
    assert "REMOTE_DROPPED" in rep.summary
    assert (tmp_path / SUMMARY).read_text() == rep.summary


def test_plotted_series_are_the_recorder_file(run: tuple[Path, list[dict[str, Any]]],
                                              tmp_path: Path) -> None:
    rundir, events = run
    recs = recfile.read_dir(rundir)
    rep = make_report(tmp_path, events=events, recs=recs)
    compared = 0
    for (png, label), series in rep.series.items():
        node, topic = png.removesuffix(".png").split("-", 1)
        kind, ident = label.split(" ", 1)
        if topic == "health":
            assert series == recs[node].series(kind, ident, "health")
            compared += 1
        elif topic == "credits":
            nid, col = ident.split(" ")
            assert series == recs[node].series("ni", nid, col)
            compared += 1
        elif topic == "throughput":
            ts, vs = series
            tx = recs[node].series("ni", ident, "tx_bytes")[1]
            rx = recs[node].series("ni", ident, "rx_bytes")[1]
            total = (tx[-1] or 0) + (rx[-1] or 0) - (tx[0] or 0) - (rx[0] or 0)
            area = sum(v * (ts[i + 1] - ts[i]) for i, v in enumerate(vs[:-1]) if v)
            assert area == pytest.approx(total, rel=1e-6)  # the rates add up to the bytes
            compared += 1
    assert compared >= 10
    assert all(rep.series[("c1-throughput.png", f"ni {ni}")][0] for ni in
               ("10.10.0.1@tcp", "10.11.0.1@tcp")), "both rails carried traffic"
    assert ("c1-health.png", f"lpni {LPNI}") in rep.series


def test_every_png_is_a_real_picture(run: tuple[Path, list[dict[str, Any]]],
                                     tmp_path: Path) -> None:
    rundir, events = run
    rep = make_report(tmp_path, events=events, recs=recfile.read_dir(rundir))
    assert {p.name for p in rep.pngs} == {f"{n}-{t}.png" for n in ("c1", "s1")
                                          for t in ("health", "throughput", "credits")}
    page = (tmp_path / INDEX).read_text()
    for png in rep.pngs:
        assert png.stat().st_size > 10_000, png
        pixels = image.imread(png)[..., :3]
        assert pixels.std() > 0.05, f"{png} is blank"
        assert (pixels.min(axis=2) < 0.9).mean() > 0.01, f"{png} is nearly all white"
        assert f"src='{png.name}'" in page


def test_cli_report_from_a_kept_run_directory(run: tuple[Path, list[dict[str, Any]]],
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rundir, events = run
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(tmp_path / "root"))
    kept = runstate.create_rundir("kept")
    (kept / runstate.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
    for rec in (rundir / "nodes").glob("*.rec"):
        (kept / "nodes" / rec.name).write_bytes(rec.read_bytes())
    out = tmp_path / "out"
    assert cli.main(["report", "-n", "kept", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fault windows: 1" in text and f"report: {out / INDEX}" in text
    assert len(list(out.glob("*.png"))) == 6
    assert cli.main(["report", "-n", "gone"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("testbed: error: no testbed named gone") and len(err.splitlines()) == 1
