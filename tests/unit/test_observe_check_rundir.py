"""``testbed check RUNDIR`` (issue 30 item 5): a run directory copied elsewhere is checked
over its events.jsonl merged with its nodes' message traces, read as a stream; its
events.jsonl given alone says that the traces beside it were not read."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from testbed import cli
from testbed.observe import eventlog
from testbed.observe.check import check_rundir
from testbed.observe.synthlog import generate


def _write(path: Path, events: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def _rundir(root: Path, events: list[dict[str, Any]]) -> Path:
    """A run directory as Mininet leaves it: the message traces (kind msg) in
    nodes/NODE.trace.jsonl, everything else in events.jsonl."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    rest = []
    for e in events:
        if e["kind"] == "msg":
            by_node.setdefault(str(e["node"]), []).append(e)
        else:
            rest.append(e)
    _write(root / "events.jsonl", rest)
    for node, evs in by_node.items():
        _write(root / "nodes" / f"{node}.trace.jsonl", evs)
    return root


def _msg(t: float, event: str, msg: int, **kw: Any) -> dict[str, Any]:
    base = {"t": t, "kind": "msg", "node": "c1", "event": event, "msg": msg, "type": "PUT",
            "src": "10.10.0.1@tcp", "dst": "10.10.0.2@tcp"}
    if event == "send":
        base.update(ni="10.10.0.1@tcp", lpni="10.10.0.2@tcp", attempt=0, fixed_ni=False,
                    forwarded=False, deadline=t + 10.0, retry_count=2)
    else:
        base.update(hstatus="OK", status=0, forwarded=False)
    base.update(kw)
    return base


def test_check_of_a_copied_run_directory_merges_the_node_traces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Message 2 never completes (its deadline long past by the last event): only the
    merged log shows it; events.jsonl alone cannot check the message invariants."""
    events = [{"t": 0.0, "kind": "ni_link", "node": "c1", "nid": "10.10.0.1@tcp",
               "state": "up"},
              _msg(1.0, "send", 1), _msg(1.1, "complete", 1), _msg(2.0, "send", 2),
              {"t": 60.0, "kind": "ni_link", "node": "c1", "nid": "10.10.0.1@tcp",
               "state": "up"}]
    src = _rundir(tmp_path / "run", events)
    copy = tmp_path / "elsewhere" / "copy-of-run"
    shutil.copytree(src, copy)

    assert cli.main(["check", str(copy)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("checked 5 events")
    assert "NOT CHECKED completion" not in out and "completion" in out
    assert "VIOLATION" in out

    assert cli.main(["check", "--events", str(copy / "events.jsonl")]) == 0
    cap = capsys.readouterr()
    assert "NOT CHECKED completion" in cap.out
    assert (f"check: 1 node message trace(s) in {copy / 'nodes'} not read: "
            f"`testbed check {copy}` merges them") in cap.err


def test_check_rundir_streams_the_merged_log(tmp_path: Path) -> None:
    """Memory is the checkers' state, not the log: checking 60,000 events of a run
    directory peaks far below holding its merged events (what ``read_rundir`` does)."""
    rdir = _rundir(tmp_path / "big", list(generate(60_000, seed=3)))
    tracemalloc.start()
    try:
        held = eventlog.read_rundir(rdir)
        _cur, whole = tracemalloc.get_traced_memory()
        n = len(held.events)
        del held
        tracemalloc.reset_peak()
        result = check_rundir(rdir)
        _cur, streamed = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.events == n >= 60_000 and result.ok, result.render()
    assert streamed < whole / 4, (streamed, whole)


def test_check_rundir_counts_unreadable_lines_of_every_file(tmp_path: Path) -> None:
    rdir = _rundir(tmp_path / "run", [_msg(1.0, "send", 1), _msg(1.1, "complete", 1)])
    with open(rdir / "nodes" / "c1.trace.jsonl", "a") as fh:
        fh.write("{half a line\n")
    with open(rdir / "events.jsonl", "a") as fh:
        fh.write("not json\n")
    result = check_rundir(rdir)
    assert result.events == 2 and result.skipped == 2 and result.ok


def test_check_of_a_path_that_is_neither_says_so(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert "no run directory or event log" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["check", str(tmp_path), "--events", "x"]) == 1
    assert "not both" in capsys.readouterr().err
