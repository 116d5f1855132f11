"""``lnetctl import FILE`` with a file that is not YAML (cfg-065; lnetctl.c ``jt_import``).

Real lnetctl hands the file to ``lustre_yaml_config``; when ``cYAML_build_tree`` cannot build
a tree it records a builder error (cyaml.c ``cYAML_parser_to_tree``: errno -1, descr "Failed to
handle token:N NAME [...]") and ``jt_import`` prints that error YAML on stderr and returns
-EINVAL. An unreadable file is the same builder error with "cannot open 'FILE': why".
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodes.dlc.verbs import lnetctl_config


def _import(path: Path) -> tuple[int, str, str]:
    # the file is parsed before the runtime is consulted: no node needed
    rt: Any = None
    return asyncio.run(lnetctl_config.run(rt, "import", [str(path)]))


@pytest.mark.requirement("cfg-065")
@pytest.mark.parametrize(("text", "token", "where"), [
    ("net:\n    - net type: tcp7\n      local NI(s): [\n", "2 YAML_STREAM_END_TOKEN",
     "line 4, column 1"),
    ("net:\n  - net type: tcp\n bad: 1\n", "8 YAML_BLOCK_MAPPING_START_TOKEN",
     "line 3, column 2"),
    ("net: *nowhere\n", "18 YAML_ALIAS_TOKEN", "line 1, column 6"),
    ("net: tcp: tcp7\n", "0 YAML_NO_TOKEN", "line 1, column 9"),  # scanner error
])
def test_malformed_yaml_is_a_builder_error_yaml(tmp_path: Path, text: str, token: str,
                                                 where: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc, out, err = _import(path)
    assert (rc, out) == (256 - errno.EINVAL, "")
    doc = yaml.safe_load(err)
    assert list(doc) == ["yaml"] and list(doc["yaml"][0]) == ["builder"], err
    b = doc["yaml"][0]["builder"]
    assert b["errno"] == -1, b
    assert b["descr"].startswith(f"Failed to handle token:{token} [{where}: "), b
    assert err.startswith("yaml:\n    - builder:\n          errno: -1\n          descr: "), err


@pytest.mark.requirement("cfg-065")
def test_missing_file_is_a_cannot_open_builder_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    rc, out, err = _import(path)
    assert (rc, out) == (256 - errno.ENOENT, "")
    assert yaml.safe_load(err) == {"yaml": [{"builder": {
        "errno": -1, "descr": f"cannot open '{path}': No such file or directory"}}]}
