"""``testbed up`` traces messages by default; ``--no-trace`` turns it off (issue 31 item 5).

The message trace is what ``testbed check`` needs for its message invariants (completion,
resend, fatal_ni, routing; docs/events.md §2): a default testbed is checked in full, and one
brought up with ``--no-trace`` still gets ``check``'s WARN line above PASS (exit 1 with
``--strict``). The cost of the default is measured by benchmarks/trace_cost.py.
"""

from __future__ import annotations

import re
import uuid

import pytest
from test_sim_server import (
    cli,
    env,  # noqa: F401 (a fixture)
)

from testbed import cli as testbed_cli
from testbed.commands import lifecycle


def _up_args(*argv: str) -> bool:
    return bool(testbed_cli.build_parser().parse_args(["up", *argv]).trace_messages)


def test_up_traces_messages_unless_no_trace() -> None:
    assert lifecycle.TRACE_BY_DEFAULT is True
    assert _up_args() is True
    assert _up_args("--backend", "sim") is True
    assert _up_args("--no-trace") is False
    assert _up_args("--trace-messages") is True  # the old spelling, kept for scripts


def test_no_trace_and_trace_messages_exclude_each_other(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        testbed_cli.build_parser().parse_args(["up", "--no-trace", "--trace-messages"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "traced"), [((), True), (("--no-trace",), False)])
def test_check_of_a_default_testbed_checks_every_invariant(
        env: dict[str, str], flags: tuple[str, ...], traced: bool) -> None:  # noqa: F811
    """A sim testbed up with the defaults writes ``msg`` events and ``check --strict`` passes
    with no WARN; with ``--no-trace`` there are none and the WARN is there (exit 1 strict)."""
    name = f"firstrun2-{uuid.uuid4().hex[:6]}"
    cli("up", "--backend", "sim", "--speed", "0", "-n", name, *flags, env=env)
    try:
        out = cli("traffic", "-n", name, "c1", "--to", "s1", "--count", "10", env=env).stdout
        assert "put sent 10 completed 10 failed 0" in out
        res = cli("check", "--strict", "-n", name, env=env, check=False)
    finally:
        cli("down", "-n", name, env=env)
    lines = res.stdout.splitlines()
    assert lines[-1] == "PASS", res.stdout
    if traced:
        assert res.returncode == 0, res.stdout + res.stderr
        assert not any(ln.startswith("WARN") for ln in lines), res.stdout
        for inv in ("completion", "resend", "fatal_ni", "routing"):  # the message invariants
            assert re.search(rf"^  ok +{inv} .*\(([1-9]\d*) checked\)$", res.stdout, re.M), \
                res.stdout
    else:
        assert res.returncode == 1, res.stdout + res.stderr
        assert lines[-2].startswith("WARN: 4 of 6 invariants NOT CHECKED"), res.stdout
        assert "--no-trace" in lines[-2]
