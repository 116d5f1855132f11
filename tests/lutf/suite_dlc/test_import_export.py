"""lnetctl export/import on a running node (cfg-170, cfg-065; spec §9.4)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture(scope="module")
def c1(module_topology: Any) -> Any:
    return module_topology.node("c1")


@pytest.mark.requirement("cfg-170", "cfg-045")
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
