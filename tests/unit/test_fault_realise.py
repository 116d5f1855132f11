"""Fault spec -> resources (pure, no root) and resource records round-trip (issue 12 item 3)."""

from __future__ import annotations

import json

import pytest

from faults import netops
from faults.ibspec import IB
from faults.interposer_spec import InterposerSpec
from faults.realise import BUILDERS, Activation, NodeSite, Site, resources_for
from faults.resources import (
    RESOURCES,
    Interposer,
    IptablesRule,
    LinkDown,
    Qdisc,
    StoppedProcess,
    load,
)
from faults.spec import INTERPOSED, PARAMS, FaultError, parse_fault

SITE = Site(nodes={
    "c1": NodeSite(name="c1", ns_pid=11, interfaces=("eth0", "eth1"),
                   ips=("10.10.0.1", "10.20.0.1"), nids=("10.10.0.1@tcp", "10.20.0.1@tcp1"),
                   ports={"eth0": "tb-c1-0", "eth1": "tb-c1-1"}, daemon_pid=101),
    "s1": NodeSite(name="s1", ns_pid=22, interfaces=("eth0",), ips=("10.10.0.2",),
                   nids=("10.10.0.2@tcp",), ports={"eth0": "tb-s1-0"}, daemon_pid=202),
}, fault_dir="/run/tb/faults")
ACT = Activation(fid="f3", k=2, seed=40, queue=7)


def _of(raw: dict[str, object]) -> list[object]:
    return resources_for(parse_fault(raw, nodes={"c1": ["eth0", "eth1"], "s1": ["eth0"]}),
                         SITE, ACT)


def test_every_kind_is_realised_in_one_table() -> None:
    # the IB kinds but port-down (an ib* LinkDown) are the node daemon's o2iblnd's (ib_fault)
    assert set(BUILDERS) | {"kill", "restart"} | (IB - {"port-down"}) == set(PARAMS)
    assert BUILDERS["port-down"] is BUILDERS["carrier"]
    with pytest.raises(FaultError, match="kill: not applicable"):
        _of({"kind": "kill", "node": "c1"})


def test_interposed_fault_is_an_interposer_then_its_queue_rules() -> None:
    res = _of({"kind": "delay", "node": "c1", "delay": 5, "direction": "both",
               "match": {"proto": "lnet", "type": "PUT"}})
    proc, out_rule, in_rule = res
    assert isinstance(proc, Interposer) and proc.ns_pid == 11 and proc.pid is None
    assert proc.interposer.seed == 42 and proc.interposer.queue == 7
    assert proc.interposer.local_nids == ("10.10.0.1@tcp", "10.20.0.1@tcp1")
    assert proc.spec_path == "/run/tb/faults/f3-2.spec.json"
    assert isinstance(out_rule, IptablesRule) and isinstance(in_rule, IptablesRule)
    assert out_rule.rule == ("OUTPUT", "!", "-o", "lo", "-p", "tcp", "-m", "multiport",
                             "--ports", "988", "-m", "mark", "!", "--mark", "19534",
                             "-m", "comment", "--comment", "lntb:f3",
                             "-j", "NFQUEUE", "--queue-num", "7")
    assert in_rule.rule[:3] == ("INPUT", "!", "-i")


def test_wire_kinds() -> None:
    assert _of({"kind": "blackhole", "node": "s1", "iface": "eth0", "direction": "in"}) == [
        IptablesRule(node="s1", ns_pid=22, rule=(
            "INPUT", "-i", "eth0", "-m", "mark", "!", "--mark", "19534",
            "-m", "comment", "--comment", "lntb:f3", "-j", "DROP"))]
    assert _of({"kind": "carrier", "node": "c1", "iface": "eth1"}) == [
        LinkDown(node="c1", ns_pid=11, iface="eth1")]
    flap = _of({"kind": "flap", "node": "c1", "style": "blackhole"})
    assert [r.rule[0] for r in flap] == ["OUTPUT", "INPUT"]  # type: ignore[attr-defined]
    bw_in = _of({"kind": "bandwidth", "node": "c1", "bw": "1mbit", "direction": "in"})
    assert bw_in == [Qdisc(node="c1", iface=i, dev=f"tb-c1-{n}", ns_pid=None, bw="1mbit",
                           burst="32kb", latency=50.0) for n, i in enumerate(("eth0", "eth1"))]
    assert _of({"kind": "stop", "node": "s1"}) == [StoppedProcess(node="s1", pid=202)]


def test_partition_one_way_drops_only_originals() -> None:
    res = _of({"kind": "partition", "a": ["c1"], "b": ["s1"], "oneway": True})
    assert res == [IptablesRule(node="c1", ns_pid=11, rule=(
        "OUTPUT", "-d", "10.10.0.2", "-m", "conntrack", "--ctdir", "ORIGINAL",
        "-m", "comment", "--comment", "lntb:f3", "-j", "DROP"))]
    both = _of({"kind": "partition", "a": ["c1"], "b": ["s1"]})
    assert [(r.node, r.rule[2]) for r in both] == [  # type: ignore[attr-defined]
        ("c1", "10.10.0.2"), ("s1", "10.10.0.1"), ("s1", "10.20.0.1")]


@pytest.mark.parametrize("raw", [
    {"kind": "loss", "node": "c1", "p": 0.1, "r": 0.5},
    {"kind": "corrupt", "node": "c1", "csum": "bad", "match": {"port": 988}},
    {"kind": "rst", "node": "s1", "match": {"src_nid": "10.10.0.1@tcp"}},
    {"kind": "bandwidth", "node": "s1", "bw": "10mbit"},
    {"kind": "partition", "a": ["c1"], "b": ["s1"]},
    {"kind": "carrier", "node": "c1", "iface": "eth0"},
    {"kind": "stop", "node": "c1"},
])
def test_records_round_trip_through_json(raw: dict[str, object]) -> None:
    for res in _of(raw):
        record = json.loads(json.dumps(res.to_dict()))  # what state.json holds
        assert RESOURCES[record["type"]] is type(res)
        assert load(record) == res


def test_interposer_spec_round_trip_and_refusals() -> None:
    for kind in sorted(INTERPOSED):
        raw = {"kind": kind, "node": "c1", **({"rate": 0.5} if kind == "loss" else {})}
        proc = _of(raw)[0]
        assert isinstance(proc, Interposer)
        spec = proc.interposer
        assert InterposerSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    rst = _of({"kind": "rst", "node": "c1"})[0]
    assert isinstance(rst, Interposer)
    good = rst.interposer.to_dict()
    for bad, why in [({**good, "kind": "carrier"}, "kind 'carrier'"),
                     ({**good, "queue": -1}, "queue"), ({**good, "extra": 1}, "unknown key"),
                     ({k: v for k, v in good.items() if k != "seed"}, "missing key 'seed'"),
                     ({**good, "params": {"count": 0}}, "count")]:
        with pytest.raises(FaultError, match=why):
            InterposerSpec.from_dict(bad)


def test_bad_records_are_refused_and_skipped() -> None:
    with pytest.raises(FaultError, match="not a fault resource record"):
        load({"type": "nope"})
    with pytest.raises(FaultError, match="iptables record"):
        load({"type": "iptables", "node": "c1"})
    state = {"faults": {"f1": {"resources": [{"type": "nope"}, "junk",
                                             {"type": "link", "node": "c1", "ns_pid": 11,
                                              "iface": "eth0"}]}}}
    assert netops.recorded(state) == [LinkDown(node="c1", ns_pid=11, iface="eth0")]
    assert netops.undo({"type": "nope"}) is not None
    with pytest.raises(netops.FaultApplyError):
        netops.create({"type": "qdisc", "node": "c1"}, {})
