"""The CLI habits of issue 18 on the simulator (no root): options anywhere, ``--json`` where
a table is printed, ``down`` saying what it removed, ``status`` truthful about a testbed this
user cannot reach, node names where the API takes a NID, a closed pipe ending quietly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_sim_server import ROOT, _name, cli, env  # noqa: F401 (env: a fixture)


def test_options_anywhere_json_tables_and_down_lists_what_it_removed(env: dict[str, str]  # noqa: F811
                                                                     ) -> None:
    name = _name()
    up = json.loads(cli("up", "--backend", "sim", "--speed", "0", "--json", "-n", name,
                        env=env).stdout)
    assert up["name"] == name and up["nodes"]["c1"] == {"eth0": "10.10.0.1@tcp",
                                                        "eth1": "10.11.0.1@tcp"}
    # -n after the subcommand's positionals (it had to come before `add`)
    added = json.loads(cli("fault", "add", "loss", "node=c1", "rate=0.5", "match.type=PUT",
                           "-n", name, "--json", env=env).stdout)
    assert added["kind"] == "loss" and added["state"] == "active"
    listed = json.loads(cli("fault", "list", "--json", "-n", name, env=env).stdout)
    assert [f["id"] for f in listed] == [added["id"]]
    table = cli("fault", "list", "-n", name, env=env).stdout.splitlines()
    assert table[0].split() == ["id", "kind", "state", "seed", "applied", "spec", "counters",
                                "error"]
    assert set(table[1]) == {"-", " "}  # tabulate's rule, not a Python dict
    assert table[2].split()[:3] == [added["id"], "loss", "active"]
    assert "match.type=PUT" in table[2] and "{" not in table[2]
    st = json.loads(cli("status", "-n", name, "--json", env=env).stdout)["testbeds"][0]
    assert st["nodes"]["s1"]["lnet"]["nis"]["10.10.0.2@tcp"] == {"status": "up",
                                                                 "health": 1000}
    moved = json.loads(cli("traffic", "c1", "--to", "s1", "--count", "5", "--op", "get",
                           "-n", name, "--json", env=env).stdout)
    assert (moved["dst"], moved["op"]) == ("10.10.0.2@tcp", "get")
    pid = st["supervisor_pid"]
    down = cli("down", "-n", name, env=env).stdout.splitlines()
    assert down[0] == f"removed process {pid} (sim server)"
    assert down[-1] == f"testbed {name} is down: nothing of it is left"


def test_status_tells_another_users_testbed_from_a_dead_one(env: dict[str, str]  # noqa: F811
                                                            ) -> None:
    """Root's testbed seen by ``nobody``: whose it is, not "supervisor not running"; a dead
    one: `testbed down -n NAME`, never `testbed clean` (issue 11 item 10)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the CLI as another user")
    base = Path(tempfile.mkdtemp(prefix="tb-status-"))
    base.chmod(0o755)
    own = {**env, "LNET_TESTBED_RUNROOT": str(base)}
    name = _name()
    try:
        cli("up", "--backend", "sim", "-n", name, env=own)
        other = cli("status", env=own, user=65534).stdout
        assert other.startswith(f"testbed {name}: {base / name} belongs to uid 0 and cannot "
                                "be read as uid 65534 (run as root)")
        refused = cli("lnetctl", "-n", name, "c1", "net", "show", env=own, user=65534,
                      check=False)
        assert refused.returncode == 1 and "belongs to uid 0" in refused.stderr
        pid = json.loads(cli("status", "--json", env=own).stdout)["testbeds"][0][
            "supervisor_pid"]
        os.kill(pid, 9)
        cli("clock", "-n", name, "show", env=own, check=False)  # (reaps nothing: not ours)
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        dead = cli("status", env=own).stdout
        assert f"is not running (remove what is left: `testbed down -n {name}`)" in dead
        assert "testbed clean" not in dead
    finally:
        cli("down", "-n", name, env=own, check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_api_takes_node_names_where_it_takes_a_nid() -> None:
    """``node.put("s1")`` quietly failed with "Cannot parse NID 's1'" (issue 18)."""
    from testbed.sim import SimTestbed

    tb = SimTestbed.up()
    try:
        c1 = tb.node("c1")
        assert c1.resolve_nid("s1") == "10.10.0.2@tcp"
        assert c1.resolve_nid("10.11.0.2@tcp") == "10.11.0.2@tcp"
        for verb in (c1.put, c1.get):
            reply = verb("s1", count=3)
            assert reply["ok"] and reply["completed"] == 3, reply
        assert c1.ping("s1").rc == 0
        bad = c1.put("nosuchnode")
        assert not bad["ok"] and "nosuchnode" in bad["error"]
    finally:
        tb.down()


def test_version_module_and_a_closed_pipe() -> None:
    penv = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "testbed"]
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, env=penv,
                             timeout=60, check=False)
    assert version.returncode == 0 and version.stdout.startswith("testbed 0.")
    # `testbed completion bash | head -1`: exit 141 and nothing on stderr
    proc = subprocess.Popen([*run, "completion", "bash"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=penv)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"#")
    proc.stdout.close()
    _out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) in ((141, b""), (0, b""))
