"""``make demo`` starts on the pure-Python modules while the compiled ones are not built, and
says which engine runs in one line; its closing note times the parts (issue 31 item 1)."""

from __future__ import annotations

import os

import pytest

from nodes import native
from testbed import demo


@pytest.fixture(autouse=True)
def no_pure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.PURE_ENV, "x")  # recorded: restored after the test, which
    monkeypatch.delenv(native.PURE_ENV)        # ``demo.engine`` may set


def test_not_built_runs_every_process_on_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build finishing while the demo runs changes nothing: every process the demo starts
    inherits ``LNET_TESTBED_PURE_PYTHON``."""
    monkeypatch.setattr(native, "built_for_sources", lambda package, root=native.ROOT: False)
    line = demo.engine()
    assert line.startswith("engine: pure Python (the compiled modules are not built")
    assert os.environ.get(native.PURE_ENV) == "1"


def test_built_runs_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "built_for_sources", lambda package, root=native.ROOT: True)
    assert demo.engine() == "engine: compiled with mypyc"
    assert native.PURE_ENV not in os.environ


def test_pure_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "built_for_sources", lambda package, root=native.ROOT: True)
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert demo.engine() == f"engine: pure Python ({native.PURE_ENV} is set)"


def test_closing_note_times_the_parts(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    now = [1000.0]
    monkeypatch.setattr(demo.time, "time", lambda: now[0])
    clock = demo.Clock("900.0 960.0")  # make started at 900, apt done at 960, demo at 1000
    now[0] = 1012.0
    clock.step()
    clock.step()  # only the first step is timed
    now[0] = 1050.0
    assert capsys.readouterr().out == "    (first step 52 s after apt was done)\n"
    assert clock.note() == ("timing: 150 s in all: apt 60 s, venv 40 s, first step 52 s "
                            "after apt, demo 50 s")
    assert demo.Clock(None).note().startswith("timing: 0 s in all: apt 0 s")
