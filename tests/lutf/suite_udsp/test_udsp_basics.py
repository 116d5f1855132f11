"""UDSP through lnetctl on a running node (cfg-095..165; spec §7)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture(scope="module")
def c1(module_topology: Any) -> Any:
    return module_topology.node("c1")


@pytest.mark.requirement("cfg-095", "cfg-100", "cfg-115", "cfg-160", "cfg-050")
def test_add_show_del_and_v4_udsp_info(c1: Any) -> None:
    try:
        assert c1.lnetctl("udsp add --src 10.11.0.1@tcp --priority 2").rc == 0
        assert c1.lnetctl("udsp add --src tcp --priority 1 --idx 0").rc == 0
        rules = yaml.safe_load(c1.lnetctl("udsp show").out)["udsp"]
        assert [r.get("src") for r in rules] == ["tcp", "10.11.0.1@tcp"]
        net = c1.yaml("net show -v 4")["net"][1]["local NI(s)"]
        assert [ni["udsp info"]["nid priority"] for ni in net] == [-1, 2]
        assert net[0]["udsp info"]["net priority"] == 1
    finally:
        assert c1.lnetctl("udsp del --all").rc == 0
    assert c1.lnetctl("udsp show").out == ""


@pytest.mark.requirement("cfg-120", "cfg-125")
def test_preferred_source_pins_the_local_nid(c1: Any) -> None:
    """A src+dst rule makes 10.11.0.1 the preferred source for s1's eth0 NID (spec §7.2)."""
    try:
        assert c1.lnetctl("udsp add --src 10.11.0.1@tcp --dst 10.10.0.2@tcp").rc == 0
        peer = c1.yaml("peer show -v 4")["peer"][0]["peer ni"]
        assert peer[0]["udsp info"]["Preferred source NIDs"] == {"NID-0": "10.11.0.1@tcp"}
    finally:
        c1.lnetctl("udsp del --all")
