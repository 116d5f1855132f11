"""Statistics and views (spec §4.5-4.6, §9.2-9.3) and the lnetctl verbs of issue 3."""

from __future__ import annotations

import asyncio

import pytest
import yaml
from enginekit import PORTAL, TCP, C, S, mr2_fabric  # noqa: F401
from enginekit import make_node as _node
from rtdouble import RuntimeDouble

from nodes.dlc.verbs import lnetctl_cmd
from nodes.lnet.counters import GLOBAL_KEYS
from nodes.lnet.events import TxCompleted
from nodes.lnet.hstatus import HStatus
from nodes.tools.yamlfmt import dump
from testbed.sim.fabric import Fabric


def _mr2() -> Fabric:
    return mr2_fabric(c_numa=[0, 1])


def _lnetctl(rt: RuntimeDouble, *argv: str) -> tuple[int, str, str]:
    return asyncio.run(lnetctl_cmd.run(rt, list(argv)))  # type: ignore[arg-type]


def test_stats_show_keys_and_reset_semantics() -> None:
    """spec §4.5: 26 keys in order; reset zeroes gauges and per-NI/peer-NI message stats
    (LU-20426) but keeps the NI/peer NI health counters."""
    fab = _mr2()
    c = fab.engines["c1"]
    fab.hold = True
    fab.call("c1", c.put, 0.0, S[0], payload=b"abc", portal=PORTAL)
    _, _, tx = fab.transmits[-1]
    fab.hold = False  # the resend gets through
    fab.apply("c1", c.handle(TxCompleted(tx_id=tx.tx_id, rc=-5,
                                         hstatus=HStatus.LOCAL_TIMEOUT), 0.0))
    fab.run_until(1)
    text = dump(c.view("stats"))
    keys = list(yaml.safe_load(text)["statistics"])
    assert keys == list(GLOBAL_KEYS) and len(keys) == 26
    assert c.counters.values["msgs_max"] >= 1 and c.counters.values["send_count"] == 1
    ni = c.ni_by_nid(tx.ni)
    assert ni.hstats.timeouts == 1 and ni.stats.sent.total() + ni.stats.received.total() >= 0
    c.stats_reset()
    assert all(v == 0 for v in c.counters.values.values())
    assert all(n.stats.sent.total() == 0 and n.stats.put_ack.samples == 0
               for n in c.local_nis())
    assert all(lp.stats.received.total() == 0 for lp in c.peers.by_nid.values())
    assert ni.hstats.timeouts == 1  # health counters survive the reset


def test_net_show_verbosity_health_and_dev_cpt() -> None:
    """spec §9.2: -v 1 adds statistics/tunables/dev cpt; -v 2 (and seed 004's -v 3) add
    per-type and health stats; ``dev cpt`` is the NI's NUMA node; health 0 shows down."""
    fab = _mr2()
    c = fab.engines["c1"]
    v0 = yaml.safe_load(dump(c.view("net", verbose=0)))["net"][1]["local NI(s)"][0]
    assert list(v0) == ["nid", "status", "interfaces"]
    v1 = yaml.safe_load(dump(c.view("net", verbose=1)))["net"][1]["local NI(s)"]
    assert "health stats" not in v1[0] and [n["dev cpt"] for n in v1] == [0, 1]
    c.net_set_health(C[1], 0, 0.0)
    for v in (2, 3):
        ni = yaml.safe_load(dump(c.view("net", verbose=v)))["net"][1]["local NI(s)"][1]
        assert ni["status"] == "down"
        assert list(ni["health stats"]) == [
            "fatal_error", "health value", "interrupts", "dropped", "aborted", "no route",
            "timeouts", "error", "ping_count", "next_ping"]
        assert ni["health stats"]["health value"] == 0
    c.ni_set_fatal(C[0], True, 0.0)
    ni0 = yaml.safe_load(dump(c.view("net", verbose=2)))["net"][1]["local NI(s)"][0]
    assert ni0["health stats"]["fatal_error"] == 1 and ni0["status"] == "down"


def test_peer_show_health_stats() -> None:
    """spec §4.6/§9.2: peer NI ``health stats`` keys at -v 2; ``peer state`` only at -v 3."""
    fab = _mr2()
    c = fab.engines["c1"]
    v2 = yaml.safe_load(dump(c.view("peer", verbose=2)))["peer"][0]
    assert "peer state" not in v2
    assert list(v2["peer ni"][0]["health stats"]) == [
        "health value", "dropped", "timeout", "error", "network timeout", "ping_count",
        "next_ping"]


def test_global_show_every_tunable_in_order() -> None:
    """spec §9.3 ``global show`` defaults, in lnetctl's order."""
    eng = _node(1, C)
    text = dump(eng.view("global"))
    assert text == ("global:\n    numa_range: 0\n    max_interfaces: 4096\n    discovery: 1\n"
                    "    drop_asym_route: 0\n    retry_count: 2\n    transaction_timeout: 150\n"
                    "    health_sensitivity: 100\n    recovery_interval: 1\n"
                    "    router_sensitivity: 100\n    lnd_timeout: 49\n"
                    "    response_tracking: 3\n    recovery_limit: 0\n"
                    "    max_recovery_ping_interval: 900\n")


def test_lnetctl_net_and_peer_set_health_and_debug_recovery() -> None:
    """spec §3.6, §9.3: ``net set``/``peer set --health`` and ``debug recovery`` output."""
    fab = _mr2()
    c = fab.engines["c1"]
    rt = RuntimeDouble(c)
    assert _lnetctl(rt, "debug", "recovery", "--local") == (0, "", "")
    assert _lnetctl(rt, "net", "set", "--nid", "10.11.0.1@tcp", "--health", "0")[0] == 0
    assert c.local_nis()[1].healthv == 0
    rc, out, _ = _lnetctl(rt, "debug", "recovery", "--local")
    assert (rc, out) == (0, "Local NI recovery:\n    nid-0: 10.11.0.1@tcp\n")
    assert _lnetctl(rt, "net", "set", "--all", "--health", "2000")[0] == 0
    assert [n.healthv for n in c.local_nis()] == [1000, 1000]
    lpni = c.peers.find_lpni(S[1])
    lpni.last_alive = 1.0
    assert _lnetctl(rt, "peer", "set", "--nid", str(S[1]), "--health", "10")[0] == 0
    rc, out, _ = _lnetctl(rt, "debug", "recovery", "--peer")
    assert lpni.healthv == 10 and out == "Peer NI recovery:\n    nid-0: 10.11.0.2@tcp\n"
    rc, _, err = _lnetctl(rt, "net", "set", "--health", "5")
    assert rc != 0 and "missing --nid or --all" in err
    rc, _, err = _lnetctl(rt, "peer", "set", "--nid", "bogus@@", "--health", "5")
    assert rc != 0 and "Traceback" not in err
    rc, _, err = _lnetctl(rt, "debug", "recovery")
    assert rc != 0 and "--local" in err


@pytest.mark.parametrize(("param", "value", "shown"), [
    ("health_sensitivity", "1000", 1000), ("health_sensitivity", "1001", None),
    ("retry_count", "3", 3), ("retry_count", "151", None),
    ("transaction_timeout", "0", None), ("response_tracking", "4", None),
    ("recovery_limit", "60", 60), ("max_recovery_ping_interval", "0", None),
    ("drop_asym_route", "1", 1), ("router_sensitivity", "101", None),
    ("retry_count", "x", None),
    # liblnetconfig writes any non-zero as 1; numa_range rides a __u32 ioctl field
    ("discovery", "2", 1), ("drop_asym_route", "-5", 1), ("discovery", "0", 0),
    ("numa_range", "-1", 2**32 - 1),
])
def test_lnetctl_set_range_checks(param: str, value: str, shown: int | None) -> None:
    """lnetctl set <tunable>: the kernel's range checks; errors as YAML, never a traceback.
    Accepted values are shown by ``global show`` as the kernel stores them (spec §9.1)."""
    rt = RuntimeDouble(_node(1, C))
    rc, _, err = _lnetctl(rt, "set", param, value)
    assert (rc == 0) == (shown is not None)
    if shown is None:
        assert "Traceback" not in err and err.strip()
        assert yaml.safe_load(err) is not None
    else:
        assert rt.engine.view("global")["global"][param] == shown


@pytest.mark.parametrize("text", ["*@tcp", "*.*.2.*@tcp", "@tcp", ">x", "?x", "tcp[1,3]",
                                  "10.11.[0-3/2].[1,5-9]@tcp", "-1x"])
def test_yaml_indicator_scalars_read_back(text: str) -> None:
    """lnetctl's output is valid YAML: ``udsp show`` printed ``dst: *@tcp``, a YAML alias that
    ``yaml.safe_load`` refused; a scalar starting with an indicator is quoted."""
    doc = {"udsp": [{"idx": 0, "dst": text, "action": {"priority": 1}}]}
    assert yaml.safe_load(dump(doc)) == doc
