"""The long-lived simulator behind the ``testbed`` CLI (issue 10 point 2), driven as a user
would: ``testbed`` commands in subprocesses against a sim server (``testbed.sim.server``).
No root needed: run directories go under a private RUNROOT (and, as root, one test runs the
CLI as ``nobody`` to show the default non-root run root)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import testbed
from testbed import runstate

ROOT = Path(__file__).resolve().parents[2]
S1 = ["10.10.0.2@tcp", "10.11.0.2@tcp"]


def _name() -> str:
    return f"sv{uuid.uuid4().hex[:8]}"


def cli(*args: str, env: dict[str, str], check: bool = True,
        user: int | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "testbed.cli", *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    res = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=120)
    if check:
        assert res.returncode == 0, f"testbed {' '.join(args)}: {res.stdout}{res.stderr}"
    return res


@pytest.fixture
def env(tmp_path: Path) -> Any:
    """The environment of a user's shell: a private RUNROOT, this project importable."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("LNET_TESTBED")}
    e[runstate.ENV_RUNROOT] = str(tmp_path / "run")
    e["PYTHONPATH"] = str(ROOT)
    yield e
    for name in runstate.list_testbeds(tmp_path / "run"):  # a failed test leaves nothing
        from testbed.clean import clean_testbed

        clean_testbed(name, tmp_path / "run")


def test_cli_drives_a_sim_testbed(env: dict[str, str], tmp_path: Path) -> None:
    name = _name()
    up = cli("up", "--backend", "sim", "-n", name, "--speed", "0", "--seed", "1",
             "--trace-messages", "--record-period", "50", env=env)
    assert f"testbed {name} is up" in up.stdout and "speed 0" in up.stdout
    rdir = tmp_path / "run" / name
    assert runstate.read_state(rdir)["backend"] == "sim"
    nis = yaml.safe_load(cli("lnetctl", "-n", name, "c1", "net", "show", env=env).stdout)
    assert [ni["nid"] for net in nis["net"][1:] for ni in net["local NI(s)"]] == [
        "10.10.0.1@tcp", "10.11.0.1@tcp"]
    assert cli("link", "-n", name, "c1", "eth1", "down", env=env).stdout.strip() == \
        "c1 eth1 down"
    out = cli("traffic", "-n", name, "c1", "--to", "s1", "--count", "20", env=env).stdout
    assert "put sent 20 completed 20 failed 0" in out
    assert cli("clock", "-n", name, "advance", "5", env=env).stdout.startswith("5.")
    view = yaml.safe_load(cli("lnetctl", "-n", name, "c1", "net", "show", "-v", "3",
                              env=env).stdout)
    status = {ni["nid"]: ni["status"] for net in view["net"] for ni in net["local NI(s)"]}
    assert status["10.11.0.1@tcp"] == "down" and status["10.10.0.1@tcp"] == "up"
    assert cli("exec", "-n", name, "c1", "lctl list_nids", env=env).stdout.split() == [
        "10.10.0.1@tcp", "10.11.0.1@tcp"]
    refused = cli("exec", "-n", name, "c1", "ip link", env=env, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "exec runs one lnetctl, lctl or lst command" in refused.stderr
    st = cli("status", "-n", name, env=env).stdout
    assert "backend sim" in st
    assert re.search(r"eth1\s+10\.11\.0\.1@tcp\s+lan1\s+down\s+sim\s+down", st), st
    kinds = [json.loads(ln)["kind"] for ln in cli("events", "-n", name, "--json", env=env)
             .stdout.splitlines()]
    assert {"link_down", "send", "recv", "md", "msg", "traffic_start", "traffic_end",
            "tunable"} <= set(kinds)
    checked = cli("check", "-n", name, env=env).stdout  # (asks the server to flush first)
    assert "PASS" in checked and "NOT CHECKED completion" not in checked
    from testbed.observe import recfile

    recs = recfile.read_dir(rdir)
    assert set(recs) == {"c1", "s1"} and recs["c1"].meta == {
        "format": "lnet-rec/1", "node": "c1", "period": "0.05", "clock": "virtual"}
    assert recs["c1"].series("ni", "10.11.0.1@tcp", "state")[1][-1] == "fatal"
    assert "is down" in cli("down", "-n", name, env=env).stdout
    assert not rdir.exists()
    gone = cli("lnetctl", "-n", name, "c1", "net", "show", env=env, check=False)
    assert gone.returncode == 1 and f"no testbed named {name} is up" in gone.stderr


SCRIPT = [
    ("fault", "add", "loss", "node=c1", "rate=0.3"),
    ("fault", "add", "delay", "node=s1", "delay=3", "jitter=2"),
    ("traffic", "c1", "--to", "s1", "--count", "40", "--size", "1024"),
    ("clock", "advance", "3"),
    ("lnetctl", "c1", "ping", S1[1]),
    ("link", "c1", "eth0", "down"),
    ("traffic", "c1", "--to", "s1", "--count", "10"),
    ("clock", "advance", "2"),
]


def _script_log(env: dict[str, str], tmp_path: Path, seed: int) -> bytes:
    name = _name()
    cli("up", "--backend", "sim", "-n", name, "--speed", "0", "--seed", str(seed), env=env)
    for cmd, *rest in SCRIPT:
        cli(cmd, "-n", name, *rest, env=env)
    log = (tmp_path / "run" / name / runstate.EVENTS_FILE).read_bytes()
    cli("down", "-n", name, env=env)
    return log


def test_same_seed_same_commands_same_event_log_byte_for_byte(env: dict[str, str],
                                                               tmp_path: Path) -> None:
    """--speed 0: only the commands move time, so a seed and a script replay exactly (fault
    seeds derive from the testbed's); another seed draws other losses and jitter."""
    first, again, other = (_script_log(env, tmp_path, s) for s in (7, 7, 8))
    assert first == again
    assert first != other
    events = [json.loads(ln) for ln in first.splitlines()]
    assert {e["kind"] for e in events} >= {"fault_added", "fault_applied", "send", "md"}
    assert len(events) > 300


def test_speed_1_tracks_the_wall_clock(env: dict[str, str]) -> None:
    """--speed 1 (the default): 5 s of a user's sleep are 5 virtual seconds, within 5 %."""
    name = _name()
    cli("up", "--backend", "sim", "-n", name, env=env)
    os.environ[runstate.ENV_RUNROOT] = env[runstate.ENV_RUNROOT]
    try:
        tb: Any = testbed.attach(name)
        w0, v0 = time.monotonic(), tb.now
        time.sleep(5.0)
        w1, v1 = time.monotonic(), tb.now
        assert abs((v1 - v0) - (w1 - w0)) <= 0.05 * (w1 - w0), (v1 - v0, w1 - w0)
        assert tb.node("c1").ping(S1[0]).rc == 0  # a blocking verb, paced
    finally:
        del os.environ[runstate.ENV_RUNROOT]
    cli("down", "-n", name, env=env)


def test_speed_max_runs_ahead_and_speed_is_checked(env: dict[str, str]) -> None:
    name = _name()
    bad = cli("up", "--backend", "sim", "-n", name, "--speed", "fast", env=env, check=False)
    assert bad.returncode == 1 and "--speed: speed must be a number" in bad.stderr
    cli("up", "--backend", "sim", "-n", name, "--speed", "max", env=env)
    cli("fault", "-n", name, "add", "blackhole", "node=s1", env=env)
    w0 = time.monotonic()
    ping = cli("lnetctl", "-n", name, "c1", "ping", "--timeout", "30", S1[0],
               env=env, check=False)  # its messages vanish: LND timeouts, in virtual time
    assert ping.returncode != 0 and time.monotonic() - w0 < 10.0
    assert float(cli("clock", "-n", name, "show", env=env).stdout.split()[0]) >= 3.0
    cli("fault", "-n", name, "clear", env=env)
    cli("fault", "-n", name, "add", "flap", "node=c1", "iface=eth0", "down=100", "up=100",
        "count=3", env=env)  # 500 virtual seconds of schedule: run through at once
    time.sleep(0.5)
    assert float(cli("clock", "-n", name, "show", env=env).stdout.split()[0]) >= 500.0
    faults = cli("fault", "-n", name, "list", env=env).stdout
    assert " done " in faults, faults
    cli("down", "-n", name, env=env)


def test_down_after_kill_9_of_the_server_removes_the_run_directory(env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    name = _name()
    cli("up", "--backend", "sim", "-n", name, env=env)
    rdir = tmp_path / "run" / name
    pid = runstate.read_state(rdir)["supervisor_pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while runstate.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rdir.exists()  # killed: nobody cleaned
    assert "not running" in cli("status", "-n", name, env=env).stdout
    cli("down", "-n", name, env=env)
    assert not rdir.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_a_sim_testbed_needs_no_root(env: dict[str, str]) -> None:
    """As ``nobody``, with no RUNROOT set: the run directory is /tmp/lnet-testbed-65534/NAME
    (no $XDG_RUNTIME_DIR here), and ``down`` removes it."""
    user = {k: v for k, v in env.items() if k != runstate.ENV_RUNROOT}
    user.pop("XDG_RUNTIME_DIR", None)
    name = _name()
    up = cli("up", "--backend", "sim", "-n", name, "--speed", "0", env=user, user=65534)
    rdir = Path(f"/tmp/lnet-testbed-65534/{name}")
    assert f"run directory {rdir}" in up.stdout
    assert os.stat(rdir).st_uid == 65534
    ping = cli("lnetctl", "-n", name, "c1", "ping", S1[1], env=user, user=65534)
    assert "primary nid: 10.10.0.2@tcp" in ping.stdout
    cli("down", "-n", name, env=user, user=65534)
    assert not rdir.exists()
