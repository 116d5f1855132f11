"""The recorder (``nodes/recorder.py``) and its reader (``testbed/observe/recfile.py``): rows of
what changed at the period, readable with plain gzip + csv, robust to a killed writer, and the
sampler driven over sim engines on virtual time."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
from observekit import TOPOLOGIES, flap_run, record_sim

from nodes.lnet.engine import LNetEngine
from nodes.lnet.hdr import MsgType
from nodes.lnet.nid import NID, Net
from nodes.recorder import COLUMNS, Recorder, rec_path
from testbed.observe import recfile

TCP = Net.parse("tcp")
NI0, NI1 = NID.parse("10.10.0.1@tcp"), NID.parse("10.11.0.1@tcp")
P0, P1 = NID.parse("10.10.0.2@tcp"), NID.parse("10.11.0.2@tcp")


def engine() -> LNetEngine:
    eng = LNetEngine(incarnation=1)
    eng.configure()
    eng.net_add(TCP, "eth0", NI0)
    eng.net_add(TCP, "eth1", NI1)
    eng.peer_add(P0, [P0, P1])
    return eng


def test_rows_only_for_what_changed_and_plain_gzip_csv(tmp_path: Path) -> None:
    eng = engine()
    rec = Recorder(eng, rec_path(tmp_path, "c1"), node="c1", period=0.1, flush_period=0.25)
    assert rec.maybe_sample(0.0)
    assert not rec.maybe_sample(0.05)  # inside the period
    assert rec.maybe_sample(0.1)       # nothing moved: a scan, no row
    eng.ni_by_nid(NI1).healthv = 900
    eng.ni_by_nid(NI1).stats.sent.bump(MsgType.PUT)
    rec.tx(NI1, P1, 4096)
    assert rec.maybe_sample(0.31)
    rec.close()
    # no code of ours: gzip + csv
    with gzip.open(rec_path(tmp_path, "c1"), "rt") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == COLUMNS
    meta = {r[2]: r[4] for r in rows[1:] if r[1] == "meta"}
    assert meta == {"format": "lnet-rec/1", "node": "c1", "period": "0.1", "clock": "unix"}
    data = [r for r in rows[1:] if r[1] != "meta"]
    at0 = [(r[1], r[2]) for r in data if r[0] == "0.0"]
    assert at0 == [("node", "c1"), ("ni", str(NI0)), ("ni", str(NI1)), ("lpni", str(P0)),
                   ("lpni", str(P1))]
    assert not [r for r in data if r[0] == "0.1"]
    later = [r for r in data if r[0] == "0.31"]
    assert [(r[1], r[2]) for r in later] == [("ni", str(NI1)), ("lpni", str(P1))]
    ni1 = dict(zip(COLUMNS, later[0], strict=True))
    assert (ni1["health"], ni1["sends"], ni1["tx_bytes"]) == ("900", "1", "4096")


def test_reader_series_gone_and_truncated_member(tmp_path: Path) -> None:
    eng = engine()
    path = tmp_path / "c1.rec"
    rec = Recorder(eng, path, node="c1", clock_offset=1000.0, flush_period=0.0)
    rec.sample(0.0)
    eng.ni_by_nid(NI0).healthv = 500
    rec.sample(1.0)
    eng.net_del(TCP, "eth1")
    rec.sample(2.0)
    rec.close()
    r = recfile.read(path)
    assert r.node == "c1" and not r.truncated
    assert r.series("ni", str(NI0), "health") == ([1000.0, 1001.0], [1000, 500])
    assert r.series("ni", str(NI1), "health") == ([1000.0, 1002.0], [1000, None])
    assert r.peer_of(str(P1)) == str(P0)
    assert r.objects("lpni") == [str(P0), str(P1)]
    whole = path.read_bytes()
    path.write_bytes(whole + gzip.compress(b"1,ni,x,,up,1,2,3,4,5,6,7,8\n")[:-9])  # cut short
    cut = recfile.read(path)
    assert cut.truncated and len(cut.rows) == len(r.rows)


def test_reader_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.rec"
    bad.write_text("hello")
    with pytest.raises(recfile.RecError, match="not a recorder file"):
        recfile.read(bad)
    with pytest.raises(recfile.RecError, match="cannot read"):
        recfile.read(tmp_path / "none.rec")
    with pytest.raises(ValueError, match="period"):
        Recorder(engine(), bad, node="c1", period=0)


def test_sim_engines_on_virtual_time(tmp_path: Path) -> None:
    from testbed.sim import SimTestbed

    tb = SimTestbed.up(TOPOLOGIES / "default.yaml", name="obsrec", seed=2)
    try:
        recs = record_sim(tb, tmp_path)
        flap_run(tb, bursts=8, down_at=2, up_at=5, settle=5.0)
        for r in recs.values():
            r.close()
    finally:
        tb.down()
    c1 = recfile.read(tmp_path / "nodes" / "c1.rec")
    assert c1.meta["clock"] == "virtual"
    ts, states = c1.series("ni", "10.11.0.1@tcp", "state")
    assert "fatal" in states and states[-1] == "up"
    t_down = ts[states.index("fatal")]
    link = next(e for e in tb.events() if e["kind"] == "link_down")
    assert link["t"] <= t_down <= link["t"] + 0.1  # sampled within one period
    ts, sends = c1.series("node", "c1", "sends")
    assert sends[-1] >= 8 * 20 and ts == sorted(ts)
    _t, tx = c1.series("ni", "10.10.0.1@tcp", "tx_bytes")
    assert tx[-1] >= 4096
    samples = [float(r["t"]) for r in c1.rows]
    assert all(abs(round(x / 0.1) * 0.1 - x) < 0.1 for x in samples)
    assert recfile.read_dir(tmp_path).keys() == {"c1", "s1"}
