"""lnetctl export/import on a running node (cfg-170, cfg-065; spec §9.4)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from lutf.lnet_views import discover_peers

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture(scope="module")
def c1(module_topology: Any) -> Any:
    return module_topology.node("c1")


@pytest.mark.requirement("cfg-170", "cfg-045")
@pytest.mark.namespace_only("lnetctl import reads a file this machine wrote (a guest has its "
                            "own file system)")
def test_export_order_and_reimport_is_idempotent_for_udsp(c1: Any) -> None:
    doc = yaml.safe_load(c1.lnetctl("export").out)
    assert list(doc)[:1] == ["net"] and list(doc).index("global") > list(doc).index("peer")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cfg.yaml"
        path.write_text("udsp:\n    - idx: 0\n      src: tcp\n      action:\n"
                        "          priority: 4\n")
        try:
            assert c1.lnetctl(f"import {path}").rc == 0
            assert yaml.safe_load(c1.lnetctl("export --backup").out)["udsp"][0]["action"] == {
                "priority": 4}
            assert c1.lnetctl(f"import --del {path}").rc == 0
            assert "udsp" not in yaml.safe_load(c1.lnetctl("export --backup").out)
        finally:
            c1.lnetctl("udsp del --all")


NET_TCP7 = """net:
    - net type: tcp7
      local NI(s):
        - interfaces:
              0: eth1
          tunables:
              peer_timeout: 180
              peer_credits: 8
              credits: 256
"""


def _tcp7(node: Any) -> list[dict[str, Any]]:
    doc = yaml.safe_load(node.lnetctl("net show --net tcp7 -v 2").out) or {}
    return [ni for net in doc.get("net") or [] for ni in net["local NI(s)"]]


def _nets(node: Any) -> list[tuple[str, str]]:
    doc = yaml.safe_load(node.lnetctl("net show").out)
    return [(ni["nid"], ni["status"]) for net in doc["net"] for ni in net["local NI(s)"]]


@pytest.mark.requirement("cfg-065")
@pytest.mark.namespace_only("lnetctl import reads files this machine wrote (a guest has its "
                            "own file system)")
def test_import_net_block_adds_and_removes_a_local_ni(topology: Any, tmp_path: Path) -> None:
    """cfg-065: ``lnetctl import FILE`` parses a ``net:`` block (spec §9.4 backup form) and
    configures each local NI through the DLC ``net add`` path, as real lnetctl's
    ``lustre_yaml_config`` does. c1 and s1 first give eth1 up (``net del --net tcp --if
    eth1``; the daemon's socklnd listens per NI address, docs/differences.md), then import a
    net tcp7 on eth1: each gets an ``@tcp7`` NID with the file's tunables and LNet traffic
    flows over it (``lnetctl ping``). ``import --del FILE`` removes exactly those NIs. A file
    that is not valid YAML is refused with cYAML's builder error YAML (errno -1, "Failed to
    handle token:...", exit -EINVAL), a net entry without interfaces with an error naming the
    entry; neither changes anything."""
    c1, s1 = topology.node("c1"), topology.node("s1")
    for node in (c1, s1):
        res = node.lnetctl("net del --net tcp --if eth1")
        assert res.rc == 0, res
    before = _nets(c1)
    assert before == [("0@lo", "up"), ("10.10.0.1@tcp", "up")], before
    good = tmp_path / "tcp7.yaml"
    good.write_text(NET_TCP7)
    for node in (c1, s1):
        res = node.lnetctl(f"import {good}")
        assert res.rc == 0, res
    (ni,) = _tcp7(c1)
    assert (ni["nid"], ni["status"], ni["interfaces"]) == (
        "10.11.0.1@tcp7", "up", {0: "eth1"}), ni
    assert (ni["tunables"]["peer_credits"], ni["tunables"]["credits"]) == (8, 256), ni
    assert [n["nid"] for n in _tcp7(s1)] == ["10.11.0.2@tcp7"]
    # as an admin would after renumbering: drop the statically configured peer NIs that no
    # longer exist (discovery keeps configured ones, and selection may pick them for the ping)
    # and bring the peers up to date
    for node, prim, gone in ((c1, "10.10.0.2@tcp", "10.11.0.2@tcp"),
                             (s1, "10.10.0.1@tcp", "10.11.0.1@tcp")):
        res = node.lnetctl(f"peer del --prim_nid {prim} --nid {gone}")
        assert res.rc == 0, res
    discover_peers(topology)
    ping = c1.ping("10.11.0.2@tcp7", source="10.11.0.1@tcp7", timeout=10)
    assert ping.rc == 0 and "10.11.0.2@tcp7" in ping.out, ping
    (ni,) = _tcp7(c1)
    assert ni["statistics"]["send_count"] >= 1 and ni["statistics"]["recv_count"] >= 1, ni
    for node in (s1, c1):
        res = node.lnetctl(f"import --del {good}")
        assert res.rc == 0, res
    assert _tcp7(c1) == [] and _tcp7(s1) == []
    assert _nets(c1) == before
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("net:\n    - net type: tcp7\n      local NI(s): [\n")
    no_if = tmp_path / "noif.yaml"
    no_if.write_text("net:\n    - net type: tcp7\n      local NI(s):\n        - tunables: {}\n")
    # lustre_yaml_config -> cYAML_build_tree: a builder error YAML on stderr, -EINVAL
    res = c1.lnetctl(f"import {bad_yaml}")
    assert res.rc == 256 - 22 and res.out == "", res
    err = yaml.safe_load(res.err)["yaml"][0]["builder"]
    assert err["errno"] == -1 and err["descr"].startswith("Failed to handle token:"), err
    assert "line 4, column 1" in err["descr"], err
    res = c1.lnetctl(f"import {no_if}")
    assert res.rc != 0 and res.out == "", res
    # lnetctl names the entry, not the file (yaml_lnet_print_error "import")
    assert "net[0]" in res.err and "Traceback" not in res.err, res
    assert "no interfaces" in c1.lnetctl(f"import {no_if}").err
    assert _nets(c1) == before and _tcp7(c1) == []
