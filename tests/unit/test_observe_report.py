"""``testbed report`` on a sim run recorded the way the node driver will record it: the summary
names the fault window and the health dip and recovery the events show, the series plotted
are the recorder file's, and every PNG is a real picture."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")  # the `report` extra (make venv installs it)

from matplotlib import image
from observekit import TOPOLOGIES, flap_run, record_sim

import testbed.observe
from testbed import cli, runstate
from testbed.observe import recfile, window
from testbed.observe.report import INDEX, SUMMARY, figure_names, make_report

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


def test_time_axis_zooms_to_the_interesting_span(run: tuple[Path, list[dict[str, Any]]],
                                                 tmp_path: Path) -> None:
    """Issue 31 item 4: by default the figures show from the first to the last change (the
    bursts, the link down and up, health notices), padded, not the 30 s quiet tail; every
    figure's axis is that span, its series still whole; ``--window all`` the whole run,
    ``START:END`` that span."""
    rundir, events = run
    recs = recfile.read_dir(rundir)
    rep = make_report(tmp_path / "auto", events=events, recs=recs)
    t0 = rep.t0
    t_end = max(float(r.rows[-1]["t"]) for r in recs.values())  # type: ignore[arg-type]
    changes = [float(e["t"]) - t0 for e in events if e["kind"] in window.INTERESTING]
    lo, hi = rep.shown
    pad = max(window.PAD, (max(changes) - min(changes)) / 10)
    assert lo == pytest.approx(max(0.0, min(changes) - pad))
    # (this run's health recovery goes on to its end: nothing to cut there)
    assert hi == pytest.approx(min(max(changes) + pad, t_end - t0))
    # the same run with 60 s of nothing after it: the quiet tail is cut
    quiet = [*events, {"t": t_end + 60.0, "kind": "peer_notify", "node": "c1"}]
    tail = make_report(tmp_path / "tail", events=quiet, recs=recs)
    assert tail.shown == pytest.approx((lo, max(changes) + pad))
    assert tail.shown[1] < t_end - t0 + 60.0 - 50.0
    assert all(f.shown == pytest.approx(tail.shown) for f in tail.figures)
    down = next(float(e["t"]) - t0 for e in events if e["kind"] == "link_down")
    assert lo < down < hi
    assert all(f.shown == pytest.approx(rep.shown) for f in rep.figures)
    assert "the interesting span" in tail.summary and "figures show" not in rep.summary
    whole = make_report(tmp_path / "all", events=events, recs=recs, span="all")
    assert whole.shown == pytest.approx((0.0, t_end - t0))
    assert all(f.shown == pytest.approx(whole.shown) for f in whole.figures)
    assert whole.series == rep.series  # zoomed, not cut
    chosen = make_report(tmp_path / "chosen", events=events, recs=recs, span=(2.0, 7.5))
    assert all(f.shown == pytest.approx((2.0, 7.5)) for f in chosen.figures)


def test_window_option_parsing() -> None:
    assert window.parse("all") == "all" and window.parse("auto") == "auto"
    assert window.parse("10:25") == (10.0, 25.0)
    assert window.parse("10:") == (10.0, None) and window.parse(":2.5") == (None, 2.5)
    for bad in ("10", "a:b", "5:1", "5:5"):
        with pytest.raises(window.WindowError, match="--window"):
            window.parse(bad)


def test_overlapping_series_stay_distinguishable(run: tuple[Path, list[dict[str, Any]]],
                                                 tmp_path: Path) -> None:
    """Series on top of each other (every NI at health 1000, credits that did not move) differ
    in colour and dash pattern, and each one drawn later is no wider than the one before, so
    the one below shows at its edges."""
    rundir, events = run
    rep = make_report(tmp_path, events=events, recs=recfile.read_dir(rundir))
    health = next(f for f in rep.figures if f.path.name == "c1-health.png")
    assert len(health.styles) >= 4  # 2 NIs + 2 peer NIs, all at 1000 most of the run
    for f in rep.figures:
        looks = [(colour, str(dash)) for colour, dash, _w in f.styles.values()]
        assert len(set(looks)) == len(looks), f.path.name
        widths = [w for _c, _d, w in f.styles.values()]
        assert widths == sorted(widths, reverse=True), f.path.name


def test_report_without_matplotlib_writes_the_summary_and_names_what_it_skipped(
        run: tuple[Path, list[dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rundir, events = run
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    monkeypatch.setitem(sys.modules, "testbed.observe.plots", None)
    monkeypatch.delattr(testbed.observe, "plots", raising=False)
    rep = make_report(tmp_path / "r", events=events, recs=recfile.read_dir(rundir))
    names = {f"{n}-{t}.png" for n in ("c1", "s1") for t in ("health", "throughput", "credits")}
    assert not rep.pngs and set(rep.skipped) == names
    assert "matplotlib" in rep.why_skipped and "[report]" in rep.why_skipped
    assert (tmp_path / "r" / SUMMARY).read_text() == rep.summary
    assert "fault windows: 1" in rep.summary
    assert "c1-health.png" in (tmp_path / "r" / INDEX).read_text()
    assert not list((tmp_path / "r").glob("*.png"))
    # the CLI: exit 0, the summary, one line naming the skipped figures
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(tmp_path / "root"))
    kept = runstate.create_rundir("nompl")
    (kept / runstate.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
    for rec in (rundir / "nodes").glob("*.rec"):
        (kept / "nodes" / rec.name).write_bytes(rec.read_bytes())
    assert cli.main(["report", "-n", "nompl", "-o", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "fault windows: 1" in out
    skipped = [ln for ln in out.splitlines() if ln.startswith("report: skipped 6 figures")]
    assert len(skipped) == 1 and "s1-credits.png" in skipped[0] and "matplotlib" in skipped[0]
    assert cli.main(["report", "-n", "nompl", "--window", "x"]) == 1
    assert capsys.readouterr().err.startswith("testbed: error: --window 'x'")


def test_figure_names_are_the_figures_drawn(run: tuple[Path, list[dict[str, Any]]],
                                            tmp_path: Path) -> None:
    rundir, events = run
    recs = recfile.read_dir(rundir)
    rep = make_report(tmp_path, events=events, recs=recs)
    assert sorted(p.name for p in rep.pngs) == sorted(n for r in recs.values()
                                                      for n in figure_names(r))
