"""Help that answers (issue 31 item 5): fault kinds with their keys and defaults, did-you-mean
on a mistyped subcommand, ``events --kind`` refusing an unknown kind, ``testbed lctl``/``lst``
in README's command table, ``status`` naming a hosts testbed's backend, ``check`` warning when
the message invariants went unchecked for want of a message trace."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_sim_server import cli as sim_cli
from test_sim_server import env  # noqa: F401 (a fixture)

from faults import kinds, spec
from faults.kinds import describe
from testbed import cli, runstate
from testbed.commands import status
from testbed.observe import check, eventlog

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        rc = cli.main(list(argv))
    except SystemExit as exc:  # argparse: usage errors and --help
        rc = int(exc.code or 0)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_fault_kinds_lists_every_kind_with_its_keys_and_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``testbed fault kinds`` needs no testbed and prints what ``faults/spec.py`` defines:
    every kind, every key of it, the defaults and the common and match keys."""
    rc, out, err = run(capsys, "fault", "kinds")
    assert rc == 0 and not err
    assert out == describe()
    blocks = {m.group(1): m.group(2) for m in
              re.finditer(r"^  ([\w-]+) +.*\n((?:  +keys:.*\n)(?: {10,}\S.*\n)*)", out, re.M)}
    assert set(blocks) == set(spec.PARAMS)
    for kind, params in spec.PARAMS.items():
        text = " ".join(blocks[kind].split())
        for key, (_typ, default, _rng) in params.items():
            shown = f"{key}={default:g}" if isinstance(default, float) else \
                f"{key}={str(default).lower()}" if isinstance(default, bool) else \
                f"{key}={default}" if default is not None else f"{key} ("
            assert shown in text, (kind, shown, text)
    assert "reorder=false" in out and "burst=32kb" in out and "gap=3 (integer 1..1000)" in out
    assert "bw (required" in out and "a (required" in out
    assert all(f"match.{k}" in out for k in spec.MATCH_KEYS)
    assert all(k in out for k in spec.COMMON if k != "kind")


def test_fault_add_help_lists_the_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "fault", "add", "--help")
    assert rc == 0
    assert describe() in out  # (RawDescriptionHelpFormatter: not rewrapped)


def test_every_kind_has_a_summary() -> None:
    """``kinds.ABOUT`` (the one-line meaning) covers exactly the kinds ``spec.PARAMS`` has."""
    assert set(kinds.ABOUT) == set(spec.PARAMS)


@pytest.mark.parametrize(("argv", "suggestion"), [
    (["stauts"], "'status'"), (["fualt", "list"], "'fault'"), (["fault", "kindz"], "'kinds'"),
    (["lnetcl", "c1"], "'lnetctl' or 'lctl'"), (["repot"], "'report'")])
def test_did_you_mean_on_a_mistyped_subcommand(capsys: pytest.CaptureFixture[str],
                                               argv: list[str], suggestion: str) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert err.splitlines()[-1].endswith(f"did you mean {suggestion}?"), err


def test_no_suggestion_for_a_word_like_no_subcommand(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "xyzzy")
    assert rc == 2 and "invalid choice: 'xyzzy'" in err and "did you mean" not in err


@pytest.fixture
def rundir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(tmp_path))
    rdir = runstate.create_rundir("firstrun-help")
    log = [{"t": T0, "kind": "up", "testbed": "firstrun-help", "seconds": 1.0},
           {"t": T0 + 1, "kind": "ni_link", "node": "c1", "nid": "10.10.0.1@tcp",
            "link": "down", "cause": "carrier"},
           {"t": T0 + 2, "kind": "brand_new_kind", "node": "c1"}]
    (rdir / runstate.EVENTS_FILE).write_text(
        "".join(json.dumps(e, sort_keys=True) + "\n" for e in log))
    return rdir


def test_events_with_an_unknown_kind_is_an_error_naming_the_known_ones(
        rundir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "events", "-n", "firstrun-help", "--kind", "ni_lnk")
    assert rc == 1 and not out
    assert len(err.splitlines()) == 1, err
    assert "unknown kind 'ni_lnk' (did you mean 'ni_link'?)" in err
    assert all(k in err for k in ("ni_link", "route_state", "msg.send", "fault_applied"))


def test_events_kinds_known_or_in_the_log_are_accepted(
        rundir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "events", "-n", "firstrun-help", "--kind", "ni_link")
    assert rc == 0 and "ni_link" in out
    # a known kind the log happens not to hold: no error, nothing printed
    assert run(capsys, "events", "-n", "firstrun-help", "--kind", "route_state")[:2] == (0, "")
    # a kind this code does not know but the log holds (a newer writer): shown
    rc, out, _ = run(capsys, "events", "-n", "firstrun-help", "--kind", "brand_new_kind")
    assert rc == 0 and "brand_new_kind" in out


def test_known_kinds_are_the_documented_ones() -> None:
    """``eventlog.KNOWN_KINDS`` equals docs/events.md §1's tables (and §1.6's workload
    events), message trace names aside."""
    doc = (ROOT / "docs" / "events.md").read_text()
    tables = doc.split("### 1.1")[1].split("### 1.5")[0]  # 1.5: the fields of kind msg
    rows = re.findall(r"^\| `([a-z_]+)`(?: / `([a-z_]+)`)? \|", tables, re.M)
    workload = re.findall(r"`(traffic_[a-z]+)`", doc.split("### 1.6")[1].split("## 2.")[0])
    documented = {k for row in rows for k in row if k} | {"msg", *workload}
    assert eventlog.KNOWN_KINDS - {"msg.send", "msg.resend", "msg.complete"} == documented


def test_readme_command_table_has_lctl_and_lst() -> None:
    table = [ln for ln in (ROOT / "README.md").read_text().splitlines()
             if ln.startswith("| `testbed ")]
    assert any(ln.startswith("| `testbed lctl [-n NAME] NODE") for ln in table)
    assert any(ln.startswith("| `testbed lst [-n NAME]") for ln in table)
    assert any(ln.startswith("| `testbed fault kinds`") for ln in table)
    # and the parser has them
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert {"lctl", "lst"} <= set(sub.choices)  # type: ignore[arg-type]


def _status(backend: str, **extra: Any) -> dict[str, Any]:
    return {"name": "firstrun-h", "phase": "up", "backend": backend, "topology": "default",
            "supervisor_pid": 1, "started": 0.0, "segments": {}, "nodes": {}, "lnet_shown": 0,
            **extra}


@pytest.mark.parametrize(("backend", "extra", "shown"), [
    ("hosts", {"provider": None, "hosts": {"h1": {}, "h2": {}}}, "backend hosts on 2 hosts"),
    ("vagrant", {"provider": "lxc", "hosts": {"local": {}}}, "backend vagrant/lxc on 1 host"),
    ("mininet", {}, "backend mininet,")])
def test_status_names_the_backend(backend: str, extra: dict[str, Any], shown: str) -> None:
    head = status.render(_status(backend, **extra)).splitlines()[0]
    assert shown in head, head
    assert backend == "mininet" or "mininet" not in head


UNTRACED = [{"t": 1.0, "kind": "ni_health", "node": "c1", "nid": "10.10.0.1@tcp", "old": 1000,
             "new": 900, "cause": "error", "sensitivity": 100}]
TRACED = [*UNTRACED, {"t": 2.0, "kind": "msg", "node": "c1", "event": "send", "msg": 1,
                      "type": "PUT", "src": "10.10.0.1@tcp", "dst": "10.10.0.2@tcp",
                      "ni": "10.10.0.1@tcp", "lpni": "10.10.0.2@tcp", "attempt": 0,
                      "retry_count": 2, "deadline": 52.0, "fixed_ni": False}]


def test_check_warns_above_pass_when_tracing_was_off() -> None:
    text = check.check_events(UNTRACED).render()
    lines = text.splitlines()
    assert lines[-1] == "PASS"
    assert lines[-2].startswith("WARN: 4 of 6 invariants NOT CHECKED (completion, resend, "
                                "fatal_ni, routing)") and "--no-trace" in lines[-2]
    traced = check.check_events(TRACED).render().splitlines()
    assert not any(ln.startswith("WARN") for ln in traced)


def test_check_strict_fails_when_tracing_was_off(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for name, log in (("untraced", UNTRACED), ("traced", TRACED)):
        (tmp_path / name).write_text("".join(json.dumps(e) + "\n" for e in log))
    assert run(capsys, "check", "--events", str(tmp_path / "untraced"))[0] == 0
    rc, out, _ = run(capsys, "check", "--strict", "--events", str(tmp_path / "untraced"))
    assert rc == 1 and "WARN: 4 of 6" in out
    assert run(capsys, "check", "--strict", "--events", str(tmp_path / "traced"))[0] == 0


def test_testbed_lctl_runs_lctl_on_a_node(env: dict[str, str]) -> None:  # noqa: F811
    """``testbed lctl NODE ARGS``: the node's lctl, output and exit status passed through."""
    name = f"firstrun-{uuid.uuid4().hex[:6]}"
    sim_cli("up", "--backend", "sim", "--speed", "0", "-n", name, env=env)
    try:
        nids = sim_cli("lctl", "-n", name, "c1", "list_nids", env=env).stdout.split()
        assert nids == ["10.10.0.1@tcp", "10.11.0.1@tcp"]
        bad = sim_cli("lctl", "-n", name, "c1", "no_such_command", env=env, check=False)
        assert bad.returncode != 0 and bad.stderr
    finally:
        sim_cli("down", "-n", name, env=env)
