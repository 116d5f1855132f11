"""The explore regressions of this suite fail with the planted bug they were found with
(issue 17 acceptance): each ``test_explore_*.py`` here was written by ``testbed explore
--planted-bug NAME --out`` and passes without the bug (pytest collects it as it is); this
module replays each one on the simulator with ``LNET_TESTBED_PLANTED_BUG=NAME`` and checks
that it fails, with the invariant its name carries. On Mininet run a file with the variable
set by hand (its docstring says how)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

import testbed
from nodes.planted import PLANTED, PLANTED_ENV
from testbed.pytest.fixtures import unique_name

HERE = Path(__file__).parent
FOUND = sorted(HERE.glob("test_explore_*.py"))


def _planted(path: Path) -> str:
    m = re.search(r"--planted-bug ([a-z-]+)", path.read_text())
    assert m is not None and m.group(1) in PLANTED, f"{path.name}: no planted bug named"
    return m.group(1)


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"planted_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_planted_bug_has_its_regression() -> None:
    assert sorted({_planted(p) for p in FOUND}) == sorted(PLANTED)


@pytest.mark.parametrize("path", FOUND, ids=[p.stem for p in FOUND])
def test_fails_with_its_planted_bug_on_the_sim(path: Path, monkeypatch: pytest.MonkeyPatch,
                                                request: pytest.FixtureRequest) -> None:
    mod = _module(path)
    monkeypatch.setenv(PLANTED_ENV, _planted(path))
    tb = testbed.up(Path(mod.TOPOLOGY), backend="sim", name=unique_name(request.config),
                    seed=int(mod.SIM_SEED), trace_messages=True)
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            getattr(mod, path.stem)(tb)
    finally:
        tb.down()
    invariant = re.sub(r".*_seed\d+_", "", path.stem)  # as emit.py names the file
    assert invariant in str(failed.value).replace("-", "_").replace(" ", "_")
