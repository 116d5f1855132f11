"""Fault specs, per-packet decisions, timelines and the fault manager, without root.

The manager is driven with a fake clock against a fake supervisor whose resource creation is
recorded instead of performed (STYLE rule 13: orchestrator logic against mock nodes)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from faults import decide, netops
from faults.sched import Timeline
from faults.spec import FaultError, parse_fault, parse_words
from testbed import runstate
from testbed.mininet import faultctl
from testbed.plan import parse_topology

NODES = {"c1": ["eth0", "eth1"], "s1": ["eth0", "eth1"]}


# -- spec -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "message"), [
    ({"kind": "loss", "node": "c1"}, "give rate, or p and r"),
    ({"kind": "loss", "node": "c1", "rate": 1.5}, "rate: 1.5 out of range"),
    ({"kind": "delay", "node": "c1", "delay": 5, "jiter": 1}, "unknown key 'jiter'"),
    ({"kind": "nope", "node": "c1"}, "kind: 'nope' is not one of"),
    ({"kind": "loss", "node": "c9", "rate": 0.1}, "no node 'c9'"),
    ({"kind": "loss", "node": "c1", "iface": "eth7", "rate": 0.1}, "has no interface eth7"),
    ({"kind": "loss", "node": "c1", "rate": 0.1, "match": {"type": "PUSH"}},
     "match.type: 'PUSH' is not one of"),
    ({"kind": "duplicate", "node": "c1", "direction": "in"}, "only direction out"),
    ({"kind": "partition", "a": ["c1"], "b": ["c1"]}, "node c1 is on both sides"),
    ({"kind": "bandwidth", "node": "c1", "bw": "fast"}, "bw: expected a rate"),
    ({"kind": "loss", "node": "c1", "rate": 0.1, "repeat": 3}, "repeat: needs every"),
    ({"kind": "flap", "node": "c1"}, "flap: iface is required"),
])
def test_bad_specs_give_one_line_errors(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message) as err:
        parse_fault(raw, nodes=NODES)
    assert "\n" not in str(err.value)


def test_spec_round_trips_and_lnet_match_implies_proto() -> None:
    spec = parse_fault({"kind": "loss", "node": "c1", "rate": 0.2,
                        "match": {"type": "put,get", "dst_nid": "10.10.0.2@tcp"}}, nodes=NODES)
    assert spec.match.proto == "lnet" and spec.match.types == ("PUT", "GET")
    assert parse_fault(spec.as_dict(), nodes=NODES) == spec
    words = parse_words(["rate=0.5", "match.type=PUT", "match.forwarded=true"])
    assert words == {"rate": "0.5", "match": {"type": "PUT", "forwarded": True}}
    with pytest.raises(FaultError, match="expected key=value"):
        parse_words(["rate"])


@pytest.mark.parametrize(("words", "message"), [
    (["rate=0.1", "rate=0.9"], "duplicate key 'rate': given twice"),
    (["match.type=PUT", "rate=1", "match.type=GET"], "duplicate key 'match.type': given twice"),
    (["match=x", "match.type=PUT"], "give match.KEY=VALUE words"),
    (["match.type=PUT", "match=x"], "duplicate key 'match'"),
])
def test_fault_words_refuse_a_key_given_twice(words: list[str], message: str) -> None:
    """Issue 27 item 10: ``fault add loss rate=0.1 rate=0.9`` kept the last silently (and
    ``match=x match.type=PUT`` was a TypeError); a topology file's faults refuse a duplicate
    key (``yamlload.find_duplicate``), the CLI's words now too."""
    with pytest.raises(FaultError, match=message):
        parse_words(words)


def test_topology_faults_are_validated_with_file_and_line() -> None:
    text = ("networks:\n  lan0: {lnet: tcp, subnet: 10.10.0.0/24}\n"
            "nodes:\n  c1: {interfaces: [lan0]}\n  s1: {interfaces: [lan0]}\n"
            "faults:\n  - {kind: loss, node: c1, rate: 0.1, seed: 4}\n"
            "  - {kind: delay, node: s1, delay: -3}\n")
    from testbed.plan import TopologyError

    with pytest.raises(TopologyError, match=r"^t\.yaml:8: faults\[1\]: delay: -3\.0 out"):
        parse_topology(text, source="t.yaml")
    plan = parse_topology(text.rsplit("  - {kind: delay", 1)[0], source="t.yaml")
    assert plan.faults[0]["kind"] == "loss" and plan.faults[0]["seed"] == 4


# -- decisions --------------------------------------------------------------------------------

def _run(kind: str, params: dict[str, Any], seed: int, n: int = 2000) -> str:
    d = decide.Decider(kind, params, seed)
    return "".join(d.decide(i * 0.001, 100).action for i in range(n))


def test_same_seed_same_decisions_other_seed_other_decisions() -> None:
    p = parse_fault({"kind": "loss", "node": "c1", "rate": 0.3}).params
    assert _run("loss", p, 7) == _run("loss", p, 7)
    assert _run("loss", p, 7) != _run("loss", p, 8)


def test_random_loss_rate_is_close_to_configured() -> None:
    p = parse_fault({"kind": "loss", "node": "c1", "rate": 0.1}).params
    got = _run("loss", p, 1, 20000).count(decide.DROP) / 20000
    assert abs(got - 0.1) < 0.01


def test_gilbert_elliott_mean_and_burstiness() -> None:
    p = parse_fault({"kind": "loss", "node": "c1", "p": 0.02, "r": 0.2}).params
    seq = _run("loss", p, 3, 50000)
    mean = decide.ge_mean_loss(0.02, 0.2, 0.0, 1.0)
    assert abs(seq.count("D") / len(seq) - mean) < 0.015
    bursts = [len(b) for b in seq.split("A") if b]
    # mean burst length of the bad state is 1/r = 5; random loss of the same rate gives ~1.1
    assert statistics.mean(bursts) > 3.5


def test_delay_keeps_order_without_reorder_and_jitters_with_it() -> None:
    p = parse_fault({"kind": "delay", "node": "c1", "delay": 10, "jitter": 8}).params
    d = decide.Decider("delay", p, 5)
    times = [d.decide(i * 0.0001).until for i in range(500)]
    assert times == sorted(times)
    assert all(t >= i * 0.0001 + 0.002 - 1e-9 for i, t in enumerate(times))
    p2 = parse_fault({"kind": "delay", "node": "c1", "delay": 10, "jitter": 8,
                      "reorder": True, "dist": "normal"}).params
    d2 = decide.Decider("delay", p2, 5)
    times2 = [d2.decide(i * 0.0001).until for i in range(500)]
    assert times2 != sorted(times2)
    med = statistics.median(t - i * 0.0001 for i, t in enumerate(times2))
    assert abs(med - 0.010) < 0.001


def test_corrupt_flips_exactly_the_requested_bits_and_rst_counts() -> None:
    p = parse_fault({"kind": "corrupt", "node": "c1", "bits": 3}).params
    v = decide.Decider("corrupt", p, 1).decide(0.0, 40)
    assert v.action == decide.CORRUPT and len(v.bits) == 3
    data = bytes(40)
    flipped = decide.flip_bits(data, v.bits)
    assert sum(bin(b).count("1") for b in flipped) == 3
    r = decide.Decider("rst", {"count": 2}, 1)
    assert [r.decide(0).action for _ in range(4)] == ["R", "R", "A", "A"]


def test_reorder_holds_for_gap() -> None:
    p = parse_fault({"kind": "reorder", "node": "c1", "rate": 1.0, "gap": 4}).params
    v = decide.Decider("reorder", p, 1).decide(0.0)
    assert (v.action, v.gap) == (decide.GAP, 4)


# -- timelines --------------------------------------------------------------------------------

def test_timeline_start_duration_repeat_every() -> None:
    spec = parse_fault({"kind": "blackhole", "node": "c1", "start": 2, "duration": 1,
                        "repeat": 3, "every": 5})
    tl = Timeline(spec, 100.0, 1)
    assert tl.next_deadline() == 102.0 and tl.due(101.9) == []
    assert tl.due(102.0) == [("apply", 0)] and tl.next_deadline() == 103.0
    assert tl.due(107.5) == [("revert", 0), ("apply", 1)]
    assert tl.due(200.0) == [("revert", 1), ("apply", 2), ("revert", 2)]
    assert tl.done and tl.next_deadline() is None


def test_flap_timeline_is_seeded() -> None:
    spec = parse_fault({"kind": "flap", "node": "c1", "iface": "eth0", "down": 1, "up": 2,
                        "count": 3, "jitter": 0.5})

    def transitions(seed: int) -> list[float]:
        tl = Timeline(spec, 0.0, seed)
        out = []
        while (t := tl.next_deadline()) is not None:
            tl.due(t)
            out.append(round(t, 6))
        return out

    a = transitions(9)
    assert len(a) == 6 and a == transitions(9) and a != transitions(10)
    downs = [a[i + 1] - a[i] for i in range(0, 6, 2)]
    assert all(0.5 <= d <= 1.5 for d in downs)


# -- the manager, on a fake supervisor ---------------------------------------------------------

class _FakeSup:
    def __init__(self, rdir: Path) -> None:
        plan = parse_topology("networks:\n  lan0: {lnet: tcp, subnet: 10.10.0.0/24}\n"
                              "nodes:\n  c1: {interfaces: [lan0]}\n"
                              "  s1: {interfaces: [lan0]}\n", name="fake")
        self.plan, self.name, self.rdir, self.env = plan, "fake", rdir, {}
        self.hosts = {"c1": SimpleNamespace(pid=11), "s1": SimpleNamespace(pid=22)}
        self.state: dict[str, Any] = {"nodes": {"c1": {"interfaces": {"eth0": "p0"}},
                                                "s1": {"interfaces": {"eth0": "p1"}}}}
        self.link_state = {"c1": {"eth0": "up"}, "s1": {"eth0": "up"}}
        self.daemons: dict[str, Any] = {}  # the supervisor's node daemons (none here)
        self.saved: list[str] = []

    def save(self) -> None:
        self.saved.append(json.dumps(self.state, sort_keys=True))


def test_manager_records_before_creating_and_reverts_in_reverse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup = _FakeSup(tmp_path)
    log: list[tuple[str, str]] = []

    def create(res: dict[str, Any], env: dict[str, str]) -> None:
        # recorded in state.json before it is made (STYLE rule 9)
        assert json.dumps(res, sort_keys=True) in sup.saved[-1]
        log.append(("create", res["type"]))
        if res["type"] == "interposer":
            res["pid"] = 4242

    monkeypatch.setattr(netops, "make", lambda res, record, env: create(record, env))
    monkeypatch.setattr(netops, "undo", lambda res: log.append(("undo", res["type"])))
    fm = faultctl.FaultManager(sup)
    reply = fm.add({"kind": "delay", "node": "c1", "delay": 5, "direction": "both",
                    "duration": 2, "seed": 77}, now=1000.0)
    assert reply["ok"] and reply["fault"]["seed"] == 77
    assert log == [("create", "interposer"), ("create", "iptables"), ("create", "iptables")]
    rules = [r["rule"] for r in sup.state["faults"]["f1"]["resources"] if "rule" in r]
    assert rules[0][:3] == ["OUTPUT", "!", "-o"] and "INPUT" in rules[1]
    assert all("lntb:f1" in r for r in rules)
    fm.tick(1001.9)
    assert len(log) == 3
    fm.tick(1002.0)
    assert log[3:] == [("undo", "iptables"), ("undo", "iptables"), ("undo", "interposer")]
    assert sup.state["faults"]["f1"]["resources"] == []
    kinds = [e["kind"] for e in runstate.read_events(tmp_path)]
    assert kinds == ["fault_added", "fault_applied", "fault_reverted"]
    applied = runstate.read_events(tmp_path)[1]
    assert applied["seed"] == 77 and applied["spec"]["delay"] == 5.0
    assert fm.delete("f1")["ok"] and fm.delete("f1")["ok"] is False


def test_manager_partition_and_bad_request(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    sup = _FakeSup(tmp_path)
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(netops, "make", lambda res, record, env: made.append(record))
    monkeypatch.setattr(netops, "undo", lambda res: None)
    fm = faultctl.FaultManager(sup)
    assert fm.add({"kind": "partition", "a": ["c1"], "b": ["s1"], "oneway": True})["ok"]
    assert [(r["node"], r["rule"][:3]) for r in made] == [("c1", ["OUTPUT", "-d", "10.10.0.2"])]
    assert "ORIGINAL" in made[0]["rule"]
    bad = fm.add({"kind": "loss", "node": "zz", "rate": 0.1})
    assert bad == {"ok": False, "error": "loss: no node 'zz' (nodes: c1, s1)"}
    assert [f["kind"] for f in fm.clear()["faults"]] == ["partition"]
