"""UDSP failover and export/import on the real thing (seed 000 "Failover Policy", cfg-170;
spec §7, §9.4). Topology: topologies/hetero-failover.yaml (c1/s1 on tcp and tcp1, both nodes
with ``udsp: [{src: tcp, priority: 0}, {src: tcp1, priority: 1}]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from itkit import TOPOLOGIES, pytestmark  # noqa: F401  (the marks)

from testbed.pytest.plugin import wait_for

TOPO = TOPOLOGIES / "hetero-failover.yaml"
S1_TCP = "10.20.0.2@tcp"


def _sends(node: Any) -> list[int]:
    doc = yaml.safe_load(node.lnetctl("net", "show", "-v", "1").out)
    return [ni["statistics"]["send_count"] for n in doc["net"][1:] for ni in n["local NI(s)"]]


@pytest.mark.requirement("cfg-110", "cfg-125", "cfg-160")
def test_failover_rule_keeps_traffic_on_tcp_until_link_down(testbed_factory: Any) -> None:
    tb = testbed_factory(TOPO)
    c1 = tb.node("c1")
    assert yaml.safe_load(c1.lnetctl("udsp", "show").out)["udsp"][0]["src"] == "tcp"
    assert c1.put(S1_TCP, count=200, size=4096)["completed"] == 200
    before = _sends(c1)
    assert before[0] >= 200 and before[1] == 0
    tb.link("c1", "eth0", "down")
    wait_for(lambda: "down" in c1.lnetctl("net", "show", "--net", "tcp").out, timeout=5)
    res = c1.put(S1_TCP, count=200, size=4096)
    assert res["completed"] == 200, res
    after = _sends(c1)
    assert after[1] - before[1] >= 200 and after[0] == before[0]


@pytest.mark.requirement("cfg-170")
def test_export_then_import_on_fresh_node_reproduces_config(testbed_factory: Any,
                                                            tmp_path: Path) -> None:
    tb = testbed_factory(TOPO)
    c1, s1 = tb.node("c1"), tb.node("s1")
    assert c1.lnetctl("set", "health_sensitivity", "50").rc == 0
    assert c1.lnetctl("udsp", "add", "--dst", "tcp1", "--priority", "3").rc == 0
    path = tmp_path / "c1.yaml"
    assert c1.lnetctl("export", "--backup", str(path)).rc == 0
    assert s1.lnetctl("lnet", "unconfigure").rc == 0
    assert s1.lnetctl("lnet", "configure").rc == 0
    doc = yaml.safe_load(path.read_text())
    doc.pop("peer")  # c1's peer is s1 itself: s1 cannot add its own NIDs as a peer (-EEXIST)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = s1.lnetctl("import", str(path))
    assert res.rc == 0, res
    mine = yaml.safe_load(c1.lnetctl("export", "--backup").out)
    theirs = yaml.safe_load(s1.lnetctl("export", "--backup").out)
    # peers differ by construction (c1's peer is s1, whose own NIDs cannot be its peer)
    mine.pop("peer", None)
    theirs.pop("peer", None)
    assert theirs == mine
