"""``testbed events``: filters, times relative to bring-up, raw JSON, kept run directories,
merged message traces (docs/events.md §1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testbed import cli, runstate
from testbed.observe import eventlog, events_cmd

T0 = 1_700_000_000.0
LOG = [
    {"t": T0 + 1.0, "kind": "node_started", "node": "c1", "pid": 10},
    {"t": T0 + 1.1, "kind": "node_started", "node": "s1", "pid": 11},
    {"t": T0 + 3.0, "kind": "up", "testbed": "evt", "seconds": 2.5},
    {"t": T0 + 4.0, "kind": "link_down", "node": "c1", "iface": "eth1"},
    {"t": T0 + 4.0, "kind": "ni_link", "node": "c1", "nid": "10.11.0.1@tcp", "link": "down",
     "cause": "carrier"},
    {"t": T0 + 9.25, "kind": "lpni_error", "node": "s1", "nid": "10.11.0.1@tcp",
     "peer": "10.10.0.1@tcp", "hstatus": "REMOTE_DROPPED", "health": 900},
]


@pytest.fixture
def rundir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(tmp_path))
    rdir = runstate.create_rundir("evt")
    (rdir / runstate.EVENTS_FILE).write_text(
        "".join(json.dumps(e, sort_keys=True) + "\n" for e in LOG) + "garbage\n")
    return rdir


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = cli.main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out.splitlines(), cap.err


def test_times_are_relative_to_bring_up(rundir: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines, _ = run(capsys, "events", "-n", "evt")
    assert rc == 0 and len(lines) == len(LOG)
    # bring-up started at up.t - up.seconds = T0 + 0.5
    assert lines[0].split()[0] == "+0.500000s"
    assert lines[-1].split()[:3] == ["+8.750000s", "s1", "lpni_error"]
    assert "hstatus=REMOTE_DROPPED" in lines[-1] and "health=900" in lines[-1]


def test_filters(rundir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, lines, _ = run(capsys, "events", "--node", "c1")
    assert [ln.split()[2] for ln in lines] == ["node_started", "link_down", "ni_link"]
    _, lines, _ = run(capsys, "events", "--kind", "ni_link,lpni_error")
    assert [ln.split()[2] for ln in lines] == ["ni_link", "lpni_error"]
    _, lines, _ = run(capsys, "events", "--since", "3.5", "--node", "c1,s1")
    assert [ln.split()[2] for ln in lines] == ["link_down", "ni_link", "lpni_error"]


def test_json_prints_the_raw_lines(rundir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, lines, _ = run(capsys, "events", "--json", "--kind", "up")
    assert lines == [json.dumps(LOG[2], sort_keys=True)]


def test_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(tmp_path))
    rc, _, err = run(capsys, "events", "-n", "nosuch")
    assert rc == 1 and err.startswith("testbed: error: no testbed named nosuch")
    rc, _, err = run(capsys, "events", "--rundir", str(tmp_path / "x"))
    assert rc == 1 and len(err.splitlines()) == 1


def test_msg_kind_names_and_trace_merge(rundir: Path) -> None:
    trace = [{"t": T0 + 4.0, "kind": "msg", "node": "c1", "event": "send", "msg": 1},
             {"t": T0 + 5.0, "kind": "msg", "node": "c1", "event": "complete", "msg": 1}]
    (rundir / "nodes" / "c1.trace.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in trace))
    loaded = eventlog.read_rundir(rundir)
    assert loaded.skipped == 1 and len(loaded.sources) == 2
    kinds = [eventlog.kind_name(e) for e in loaded.events]
    assert kinds == ["node_started", "node_started", "up", "link_down", "ni_link", "msg.send",
                     "msg.complete", "lpni_error"]
    sel = list(eventlog.select(loaded.events, kinds={"msg.send"}))
    assert len(sel) == 1
    assert all(e["t"] <= f["t"] for e, f in zip(loaded.events, loaded.events[1:],
                                                 strict=False))


def test_sim_origin_is_zero() -> None:
    evs: list[dict[str, Any]] = [{"t": 0.004, "kind": "send", "node": "c1"}]
    assert eventlog.origin(evs) == 0.0
    line = events_cmd.human(evs[0], 0.0)
    assert line.split()[:3] == ["+0.004000s", "c1", "send"]
