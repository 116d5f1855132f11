"""Kernel names and run-time layout (testbed/names.py, testbed/runstate.py): no root needed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from testbed import names, runstate, sh

# -- names ---------------------------------------------------------------------------------------


def test_short_hash_is_six_hex_and_stable() -> None:
    h = names.short_hash("mr2")
    assert len(h) == 6 and all(c in "0123456789abcdef" for c in h)
    assert names.short_hash("mr2") == h
    assert names.short_hash("mr3") != h


def test_bridge_and_port_names() -> None:
    h = names.short_hash("mr2")
    assert names.bridge_name("mr2", 0) == f"tb{h}s0"
    assert names.port_name("mr2", 1, 3) == f"tb{h}s1p3"


def test_port_name_contains_its_bridge_name() -> None:
    # LinuxBridge.start only attaches interfaces whose name contains the bridge's name
    for seg in range(12):
        for node in range(12):
            assert names.bridge_name("x", seg) in names.port_name("x", seg, node)


def test_longest_testbed_name_fits_ifnamsiz() -> None:
    long = "a" + "b" * 31  # NAME_RE allows 32 characters
    assert len(names.port_name(long, 99, 999)) == 15
    with pytest.raises(ValueError, match="longer than 15"):
        names.port_name(long, 999, 999)


def test_kernel_name_pattern_matches_only_ours() -> None:
    h = names.short_hash("t1")
    assert names.hash_of(f"tb{h}s0") == h
    assert names.hash_of(f"tb{h}s2p11") == h
    for other in ("eth0", "tb12345s0", f"tb{h}x0", f"tb{h}s0p", f"xtb{h}s0", f"tb{h}s0q1",
                  f"TB{h}s0"):
        assert names.hash_of(other) is None, other
    assert names.is_bridge(f"tb{h}s3")
    assert not names.is_bridge(f"tb{h}s3p0")


def test_names_of_parallel_testbeds_differ() -> None:
    made = {names.bridge_name(f"t1a2bw{w}n{n}", 0) for w in range(8) for n in range(1, 50)}
    assert len(made) == 8 * 49


def _fake_sys(tmp_path: Path, *ifnames: str) -> Path:
    base = tmp_path / "sys_class_net"
    base.mkdir()
    for n in ifnames:
        (base / n).mkdir()
    return base


def test_check_free_refuses_an_existing_bridge(tmp_path: Path) -> None:
    br = names.bridge_name("mr2", 0)
    fake = _fake_sys(tmp_path, "lo", "eth0", br, names.bridge_name("other", 0))
    with pytest.raises(names.NameCollision, match="testbed down -n mr2") as exc:
        names.check_free("mr2", fake)
    assert br in str(exc.value)
    names.check_free("mr3", fake)  # another name's hash is free


def test_ours_filters_by_hash(tmp_path: Path) -> None:
    a, b = names.port_name("a", 0, 0), names.bridge_name("b", 1)
    fake = _fake_sys(tmp_path, "lo", a, b, "tbzzzzzzs0")
    assert names.ours(None, fake) == sorted([a, b])
    assert names.ours([names.short_hash("a")], fake) == [a]


# -- runstate ------------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "runroot"
    monkeypatch.setenv(runstate.ENV_RUNROOT, str(r))
    return r


def test_runroot_from_env_and_default(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert runstate.runroot() == root
    assert runstate.rundir("mr2") == root / "mr2"
    monkeypatch.delenv(runstate.ENV_RUNROOT)
    assert runstate.runroot() == Path("/run/lnet-testbed")
    assert runstate.runroot("/x") == Path("/x")


def test_create_rundir_is_private_and_exclusive(root: Path) -> None:
    rdir = runstate.create_rundir("mr2")
    assert stat.S_IMODE(os.stat(rdir).st_mode) == 0o700
    assert (rdir / "nodes").is_dir()
    assert (root / "by-netns").is_dir()
    with pytest.raises(FileExistsError):
        runstate.create_rundir("mr2")
    assert runstate.list_testbeds() == ["mr2"]


def test_by_netns_is_not_a_testbed_name_anywhere(root: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11 item 4: `testbed down -n by-netns` passed the name check and deleted the
    by-netns registry of every testbed. Every place a name is taken refuses it now."""
    import testbed
    from testbed import clean, cli
    from testbed.base import TestbedError

    runstate.create_rundir("t1")
    link = root / "by-netns" / "4026532000"
    link.symlink_to(root / "t1" / "nodes" / "c1.sock")
    for argv in (["down", "-n", "by-netns"], ["status", "-n", "by-netns"],
                 ["events", "-n", "by-netns"], ["fault", "-n", "by-netns", "list"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.endswith("bad testbed name 'by-netns': reserved (the run root's by-netns/ "
                            "is shared by every testbed)"), err
    with pytest.raises(TestbedError, match="reserved"):
        testbed.attach("by-netns")
    with pytest.raises(ValueError, match="not a testbed name"):
        clean.clean_testbed("by-netns")
    assert link.is_symlink() and (root / "by-netns").is_dir()
    assert runstate.list_testbeds() == ["t1"]


def test_state_round_trip_and_atomic_replace(root: Path) -> None:
    rdir = runstate.create_rundir("t1")
    assert runstate.read_state(rdir) == {}
    runstate.write_state(rdir, {"name": "t1", "created": [{"kind": "bridge", "name": "x"}]})
    runstate.write_state(rdir, {"name": "t1", "created": []})
    assert runstate.read_state(rdir) == {"name": "t1", "created": []}
    assert sorted(p.name for p in rdir.iterdir()) == ["nodes", "state.json"]  # no temp files


def test_read_state_tolerates_garbage(root: Path) -> None:
    rdir = runstate.create_rundir("t1")
    (rdir / "state.json").write_text("{not json")
    assert runstate.read_state(rdir) == {}
    (rdir / "state.json").write_text("[1, 2]")
    assert runstate.read_state(rdir) == {}


def test_events_append_one_json_object_per_line(root: Path) -> None:
    rdir = runstate.create_rundir("t1")
    runstate.append_event(rdir, "up", testbed="t1")
    runstate.append_event(rdir, "link_down", node="c1", iface="eth1")
    lines = (rdir / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["up", "link_down"]
    events = runstate.read_events(rdir)
    assert events[1]["node"] == "c1" and isinstance(events[1]["t"], float)
    with open(rdir / "events.jsonl", "a") as f:
        f.write("garbage\n")
    assert len(runstate.read_events(rdir)) == 2


def test_netns_links_only_those_into_the_rundir(root: Path) -> None:
    a = runstate.create_rundir("a")
    runstate.create_rundir("ab")
    links = root / "by-netns"
    (links / "1").symlink_to(a / "nodes" / "c1.sock")
    (links / "2").symlink_to(root / "ab" / "nodes" / "c1.sock")  # prefix "a" is not "a/"
    assert runstate.netns_links(a) == [links / "1"]


def test_process_tag_and_liveness() -> None:
    me = os.getpid()
    assert runstate.pid_alive(me)
    assert not runstate.pid_alive(None) and not runstate.pid_alive(0)
    tag = f"unit-tag-{me}"
    proc = subprocess.Popen(["sleep", "30"], env={**os.environ, runstate.ENV_NAME: tag})
    try:
        deadline = time.monotonic() + 5
        while runstate.process_tag(proc.pid) != tag and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd with its own environment
        assert runstate.process_tag(proc.pid) == tag
        assert runstate.tagged_pids(tag) == {proc.pid: tag}
        assert runstate.supervisor_alive(tag, {"supervisor_pid": proc.pid})
        assert not runstate.supervisor_alive("other", {"supervisor_pid": proc.pid})
    finally:
        proc.kill()
        proc.wait()
    assert runstate.tagged_pids(tag) == {}
    assert not runstate.supervisor_alive(tag, {"supervisor_pid": proc.pid})
    assert not runstate.supervisor_alive(tag, {})


# -- sh ------------------------------------------------------------------------------------------


def test_run_returns_status_and_both_streams() -> None:
    r = sh.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.rc, r.out, r.err) == (3, "out\n", "err\n")
    assert sh.run(["cat"], input="abc").out == "abc"


def test_run_checked_error_carries_the_evidence() -> None:
    with pytest.raises(sh.CommandError) as exc:
        sh.run_checked(["sh", "-c", "echo o; echo e >&2; exit 4"])
    msg = str(exc.value)
    assert "rc=4" in msg and "'o'" in msg and "'e'" in msg and "sh -c" in msg


def test_run_missing_program_and_timeout() -> None:
    assert sh.run(["/nonexistent/prog"]).rc == 127
    r = sh.run(["sleep", "5"], timeout=0.2)
    assert r.rc == -9 and "timeout" in r.err


def test_ns_argv_enters_only_the_network_namespace() -> None:
    assert sh.ns_argv(["ip", "link"], None) == ["ip", "link"]
    assert sh.ns_argv(["ip", "link"], 42) == ["nsenter", "--net=/proc/42/ns/net", "--", "ip",
                                              "link"]
