"""``testbed ui``'s data feed (issue 31 item 2): following the run directory's files, the view
model built from events (docs/events.md §1) and recorder rows (§3), the layout, and the feed
and server against a real sim server. No root, no browser (tests/integration/
test_ui_browser.py drives the page)."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import uuid
from pathlib import Path
from typing import Any

import pytest

import testbed
from nodes.recorder import COLUMNS
from testbed import runstate
from testbed.ui.layout import CELL, place
from testbed.ui.model import RATE_HOLD, LiveModel, ni_colour
from testbed.ui.tail import JsonlTail, RecTail

ROOT = Path(__file__).resolve().parents[2]
STATUS = {"name": "t", "backend": "sim",
          "segments": {"lan0": {"lnet": "tcp", "subnet": "10.10.0.0/24"},
                       "lan1": {"lnet": "tcp", "subnet": "10.11.0.0/24"}},
          "nodes": {"c1": {"alive": True, "interfaces": {
                        "eth0": {"nid": "10.10.0.1@tcp", "segment": "lan0", "state": "up"},
                        "eth1": {"nid": "10.11.0.1@tcp", "segment": "lan1", "state": "up"}}},
                    "s1": {"alive": True, "interfaces": {
                        "eth0": {"nid": "10.10.0.2@tcp", "segment": "lan0", "state": "up"}}}}}


def _model() -> LiveModel:
    m = LiveModel(STATUS, t0=100.0)
    assert m.delta() is None  # nothing happened yet
    return m


def _row(t: float, kind: str, ident: str, **cols: Any) -> dict[str, object]:
    return {c: cols.get(c, {"t": t, "kind": kind, "id": ident}.get(c, "")) for c in COLUMNS}


# ---- tail.py -----------------------------------------------------------------------------


def test_jsonl_tail_parses_whole_lines_only_and_passes_over_per_message_kinds(
        tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == []  # no file yet
    path.write_bytes(b'{"t": 1, "kind": "up"}\n{"t": 2, "kind": "msg", "event": "send"}\n'
                     b'not json\n{"t": 3, "kind": "link_do')
    assert [e["kind"] for e in tail.read()] == ["up"]
    assert (tail.bulk, tail.skipped) == (1, 1)
    with open(path, "ab") as f:
        f.write(b'wn", "node": "c1"}\n')
    assert [e["kind"] for e in tail.read()] == ["link_down"]  # the half line, once whole
    assert tail.read() == []
    path.write_bytes(b'{"t": 4, "kind": "up"}\n')  # replaced (shorter): from the start again
    assert [e["t"] for e in tail.read()] == [4]


def _member(lines: list[list[object]]) -> bytes:
    text = "".join(",".join(str(c) for c in line) + "\n" for line in lines)
    return gzip.compress(text.encode())


def test_rec_tail_reads_each_gzip_member_once_it_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "c1.rec"
    first = _member([list(COLUMNS), [0, "meta", "period", "", "0.05", *[""] * 8],
                     [0.1, "ni", "10.10.0.1@tcp", "eth0", "up", 1000, 8, 8, 1, 0, 0, 0, 0]])
    second = _member([[0.2, "ni", "10.10.0.1@tcp", "eth0", "down", 900, 7, 6, 5, 0, 0, 0, 0]])
    path.write_bytes(first + second[:10])
    tail = RecTail(path)
    rows = tail.read()
    assert [(r["t"], r["state"], r["health"]) for r in rows] == [(0.1, "up", 1000)]
    assert tail.period == 0.05
    assert tail.read() == []  # the second member is not whole yet
    path.write_bytes(first + second)
    assert [(r["t"], r["state"], r["credits"]) for r in tail.read()] == [(0.2, "down", 7)]


# ---- model.py ----------------------------------------------------------------------------


def test_link_down_turns_the_ni_red_and_opens_a_window_that_link_up_closes() -> None:
    m = _model()
    m.apply_event({"t": 105.0, "kind": "link_down", "node": "c1", "iface": "eth1"})
    d = m.delta()
    assert d is not None and [(n["id"], n["colour"]) for n in d["nis"]] == [("c1:eth1", "red")]
    assert [(w["label"], w["start"], w["end"]) for w in d["windows"]] == [
        ("link c1:eth1 down", 5.0, None)]
    assert [(f["kind"], f["node"], f["state"]) for f in d["faults"]] == [
        ("link down", "c1", "active")]
    assert d["events"][0]["kind"] == "link_down" and d["seq"] == 1
    assert m.delta() is None  # handed out once
    m.apply_event({"t": 107.5, "kind": "link_up", "node": "c1", "iface": "eth1"})
    d = m.delta()
    assert d is not None and d["nis"][0]["colour"] == "green"
    assert [(w["start"], w["end"]) for w in d["windows"]] == [(5.0, 7.5)]
    assert d["faults"] == [] and d["seq"] == 2
    # a carrier fault's own link_down opens no second window (the fault's window covers it)
    m.apply_event({"t": 108, "kind": "link_down", "node": "c1", "nid": "10.11.0.1@tcp",
                   "by": "fault"})
    assert m.nis["c1:eth1"]["link"] == "down" and len(m.windows) == 1


def test_fault_windows_follow_applied_and_reverted_activations() -> None:
    m = _model()
    spec = {"kind": "flap", "node": "c1", "iface": "eth0"}
    for t, kind, act in [(101, "fault_added", None), (102, "fault_applied", 0),
                         (103, "fault_reverted", 0), (104, "fault_applied", 1)]:
        m.apply_event({"t": t, "kind": kind, "id": "f1", "spec": spec, "activation": act,
                       "fault_kind": "flap"})
    assert [(w["id"], w["start"], w["end"]) for w in m.windows.values()] == [
        ("f1#0", 2.0, 3.0), ("f1#1", 4.0, None)]
    assert m.faults["f1"]["state"] == "active"
    m.apply_event({"t": 105, "kind": "fault_deleted", "id": "f1"})
    assert m.faults == {} and m.delta()["faults"] == []  # type: ignore[index]


def test_health_status_and_fatal_events_colour_the_ni() -> None:
    m = _model()
    ni = m.nis["c1:eth0"]
    m.apply_event({"t": 101, "kind": "ni_health", "node": "c1", "nid": "10.10.0.1@tcp",
                   "old": 1000, "new": 900, "cause": "error"})
    assert (ni["health"], ni_colour(ni)) == (900, "orange")
    m.apply_event({"t": 102, "kind": "ni_link", "node": "c1", "nid": "10.10.0.1@tcp",
                   "link": "down", "cause": "carrier"})
    assert ni_colour(ni) == "red"
    m.apply_event({"t": 103, "kind": "ni_status", "node": "c1", "nid": "10.10.0.1@tcp",
                   "status": "up", "health": 1000, "healthy": True, "fatal_error": 0})
    assert ni_colour(ni) == "green"
    m.apply_event({"t": 104, "kind": "lpni_health", "node": "c1", "nid": "10.10.0.2@tcp",
                   "peer": "10.10.0.2@tcp", "old": 1000, "new": 800})
    assert m.peer_nis["c1|10.10.0.2@tcp"]["health"] == 800
    m.apply_event({"t": 105, "kind": "route_state", "node": "c1", "net": "tcp1",
                   "gateway": "10.10.0.2@tcp", "state": "down", "reason": "ping"})
    assert m.routes["c1|tcp1|10.10.0.2@tcp"] | {} == {
        "id": "c1|tcp1|10.10.0.2@tcp", "node": "c1", "net": "tcp1",
        "gateway": "10.10.0.2@tcp", "gw_node": "s1", "state": "down"}
    m.apply_event({"t": 106, "kind": "node_died", "node": "s1", "rc": -9})
    assert m.nodes["s1"]["alive"] is False


def test_recorder_rows_give_credits_and_message_rates_that_expire() -> None:
    m = _model()
    m.apply_row("c1", _row(100.0, "ni", "10.10.0.1@tcp", peer="eth0", state="up",
                           health=1000, credits=8, min_credits=8, sends=10, recvs=10))
    m.apply_row("c1", _row(102.0, "ni", "10.10.0.1@tcp", peer="eth0", state="up",
                           health=1000, credits=5, min_credits=3, sends=110, recvs=10))
    ni = m.nis["c1:eth0"]
    assert (ni["credits"], ni["min_credits"], ni["rate"]) == (5, 3, 50.0)
    m.apply_row("c1", _row(102.0, "node", "c1", state="enabled", sends=110, recvs=10))
    assert m.nodes["c1"]["router"] is True
    m.tick(102.0 + RATE_HOLD / 2)
    assert ni["rate"] == 50.0  # still held
    m.tick(102.0 + RATE_HOLD + 0.5)
    assert ni["rate"] == 0.0  # no row since: no messages
    assert m.points[-1][0] == pytest.approx(2.0 + RATE_HOLD + 0.5)
    m.apply_row("c1", _row(103.0, "lpni", "10.10.0.2@tcp", peer="10.10.0.2@tcp",
                           state="up", health=700, credits=4))
    assert m.peer_nis["c1|10.10.0.2@tcp"]["health"] == 700
    m.apply_row("c1", _row(104.0, "lpni", "10.10.0.2@tcp", state="gone"))
    assert "c1|10.10.0.2@tcp" not in m.peer_nis
    m.apply_row("c1", _row(104.0, "route", "tcp1 via 10.10.0.2@tcp", state="up"))
    assert m.routes["c1|tcp1|10.10.0.2@tcp"]["state"] == "up"


def test_snapshot_places_every_node_ni_and_segment() -> None:
    snap = _model().snapshot()
    assert [n["id"] for n in snap["nodes"]] == ["c1", "s1"]
    assert all({"x", "y"} <= set(o) for k in ("nodes", "nis", "segments") for o in snap[k])
    assert {n["id"]: n["colour"] for n in snap["nis"]} == {
        "c1:eth0": "green", "c1:eth1": "green", "s1:eth0": "green"}


def test_layout_of_a_thousand_nodes_keeps_every_two_nodes_apart() -> None:
    """benchmarks/ui.py's shape: 4 routers on 4 segments, clients on two, servers on two."""
    segs = {f"lan{i}": {} for i in range(4)}
    attach = {f"r{i}": [0, 1, 2, 3] for i in range(4)} | {f"c{i}": [0, 1] for i in range(747)} \
        | {f"s{i}": [2, 3] for i in range(249)}
    nis = {f"{n}:eth{k}": {"id": f"{n}:eth{k}", "node": n, "segment": f"lan{seg}"}
           for n, lans in attach.items() for k, seg in enumerate(lans)}
    pos = place(attach, segs, nis)
    xy = sorted((pos[n]["x"], pos[n]["y"]) for n in attach)
    closest = min(math.dist(a, b) for i, a in enumerate(xy) for b in xy[i + 1:i + 40]
                  if b[0] - a[0] < CELL)
    assert closest >= CELL * 0.99  # no two blocks overlap
    assert all(f"ni:{k}" in pos for k in nis) and all(f"seg:{s}" in pos for s in segs)


# ---- feed.py and server.py on a real sim server ------------------------------------------


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(tmp_path / "run"))
    tb = testbed.up(ROOT / "topologies" / "mr-routers.yaml", backend="sim", detach=True,
                    name=f"ui{uuid.uuid4().hex[:8]}", speed=0, record_period=0.05)
    yield tb
    tb.down()


def test_feed_follows_a_sim_testbed_link_down(sim: Any) -> None:
    from testbed.ui.feed import Feed

    feed = Feed(sim, sim.rundir)
    snap = feed.snapshot()
    assert snap["virtual"] is True and {n["id"] for n in snap["nodes"]} == {"c1", "r1", "r2",
                                                                            "s1"}
    assert {(r["node"], r["gw_node"], r["state"]) for r in snap["routes"]} >= {
        ("c1", "r1", "up"), ("c1", "r2", "up")}  # from bring-up's history
    sim.node("c1").put("s1", count=20)
    sim.link("c1", "eth1", "down")
    d = feed.poll()
    assert d is not None
    assert ("c1:eth1", "red") in {(n["id"], n["colour"]) for n in d["nis"]}
    assert any(w["label"] == "link c1:eth1 down" and w["end"] is None for w in d["windows"])
    assert feed.model.nis["c1:eth0"]["credits"] is not None  # the recorder's rows arrived
    detail = feed.detail("c1")
    assert {p["nid"] for p in detail["peer_nis"]} >= {"10.10.0.2@tcp", "10.10.0.3@tcp"}
    assert {r["gw_node"] for r in detail["routes"]} == {"r1", "r2"}
    assert "peer_nis" not in feed.snapshot()  # per node only: they grow with nodes x peers
    out = feed.node_yaml("c1")
    assert "10.11.0.1@tcp" in out["net"] and "primary nid" in out["peer"]


def test_server_streams_a_snapshot_then_deltas_and_guards_its_door(sim: Any) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from testbed.ui.feed import Feed
    from testbed.ui.server import make_app

    async def go() -> None:
        feed = Feed(sim, sim.rundir)
        async with TestClient(TestServer(make_app(feed, period=0.05))) as client:
            resp = await client.get("/api/stream")
            first = await _sse_event(resp)
            assert first[0] == "snapshot" and len(first[1]["nodes"]) == 4
            r = await client.post("/api/clock", json={"op": "advance", "seconds": 2})
            assert r.status == 200 and (await r.json())["now"] >= 2.0
            await asyncio.get_running_loop().run_in_executor(None, sim.link, "c1", "eth0",
                                                             "down")
            for _ in range(50):
                kind, data = await _sse_event(resp)
                if any(n["id"] == "c1:eth0" for n in data.get("nis", [])):
                    break
            else:
                raise AssertionError("no delta with c1:eth0")
            assert kind == "delta" and data["seq"] > first[1]["seq"]
            resp.close()
            assert (await client.get("/", headers={"Host": "evil.example"})).status == 403
            bad = await client.post("/api/clock", json={"op": "advance", "seconds": -1})
            assert bad.status == 400
            cross = await client.post("/api/clock", json={"op": "show"},
                                      headers={"Origin": "http://evil.example"})
            assert cross.status == 403
            assert (await client.get("/api/node/nosuch")).status == 404
            assert (await client.get("/api/detail/nosuch")).status == 404
            assert (await client.get("/api/detail/c1")).status == 200
        async with TestClient(TestServer(make_app(feed, token="s" * 24, loopback=False))) \
                as client:
            assert (await client.get("/api/snapshot")).status == 401
            ok = await client.get("/", params={"token": "s" * 24})
            assert ok.status == 200 and "testbed_ui_token" in ok.cookies
            assert (await client.get("/api/snapshot")).status == 200  # the cookie now
            assert (await client.get("/static/vendor/cytoscape.min.js")).status == 200

    asyncio.run(go())


async def _sse_event(resp: Any) -> tuple[str, dict[str, Any]]:
    kind, data = "", ""
    while True:
        line = (await asyncio.wait_for(resp.content.readline(), 10)).decode()
        if line.startswith("event: "):
            kind = line[7:].strip()
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "\n" and kind:
            return kind, json.loads(data)


def test_ui_command_refuses_a_short_token_and_knows_loopback(capsys: Any) -> None:
    from testbed.cli import main
    from testbed.commands.ui import is_loopback

    assert main(["ui", "--token", "short"]) == 1
    assert capsys.readouterr().err.strip() == \
        "testbed: error: --token: give at least 16 characters"
    assert [is_loopback(a) for a in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost",
                                     "0.0.0.0", "10.0.0.1", "::", "example.com")] == \
        [True] * 5 + [False] * 4


def test_hub_sends_deltas_in_seq_order_whichever_poll_finished_first() -> None:
    from testbed.ui.server import Hub

    class Fake:
        model = LiveModel(STATUS)

    async def go() -> list[Any]:
        hub = Hub(Fake(), 0.25)  # type: ignore[arg-type]
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        hub.queues.add(q)
        for seq in (2, 1, 3):
            hub.push({"seq": seq})
        hub.pool.shutdown()
        return [q.get_nowait()["seq"] for _ in range(q.qsize())]

    assert asyncio.run(go()) == [1, 2, 3]
