"""The module parameter files of a node (``nodes/dlc/verbs/modparam_files.py``) and the FUSE
file system serving them (``nodes/daemon/fusefs.py``), issue 26 item 9.

Names and modes are real LNet's (``module_param`` in api-ni.c, router.c, acceptor.c,
socklnd_modparams.c); writes parse as the kernel's ``kstrtoul``/``param_set_int`` and go to
the engine's ``set_tunable`` like ``lnetctl set``.
"""

from __future__ import annotations

import errno as E
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rtdouble import RuntimeDouble

from nodes.dlc.verbs.modparam_files import (
    BY_PATH,
    PARAMS,
    ModParams,
    ParamError,
    kstrto,
    parse_path,
)
from nodes.lnet.engine import LNetEngine
from testbed.sim.sysfs_exec import is_sysfs, run

ROOT = Path(__file__).resolve().parents[2]


def _runtime() -> RuntimeDouble:
    """A node runtime for ``ModParams`` (``rtdouble.py``), its engine seeded."""
    return RuntimeDouble(LNetEngine(rng=random.Random(7)))


@pytest.fixture
def params() -> ModParams:
    return ModParams(_runtime(), [("networks", "tcp(eth0)"), ("ksocklnd.nagle", "1")])  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "mode"), [
    ("lnet/lnet_health_sensitivity", 0o644), ("lnet/lnet_numa_range", 0o444),
    ("lnet/lock_prim_nid", 0o444), ("lnet/networks", 0o444), ("lnet/accept_timeout", 0o644),
    ("lnet/alive_router_check_interval", 0o644), ("lnet/check_routers_before_use", 0o444),
    ("lnet/router_sensitivity_percentage", 0o644), ("ksocklnd/sock_timeout", 0o644),
    ("ksocklnd/credits", 0o444), ("ksocklnd/conns_per_peer", 0o644),
    ("ksocklnd/skip_mr_route_setup", 0o444)])
def test_modes_are_real_lnets(name: str, mode: int) -> None:
    module, param = name.split("/")
    assert BY_PATH[(module, param)].mode == mode


def test_only_real_parameters_and_none_of_cpts() -> None:
    """No testbed-only knob and no CPT parameter (issue 26 item 10) is a file."""
    names = {p.name for p in PARAMS}
    assert not names & {"testbed_seed_recovery_interval", "cpu_npartitions", "cpu_pattern",
                        "routing", "discovery", "health_sensitivity"}
    assert len(names) == len(PARAMS) - 1  # peer_buffer_credits: lnet's and ksocklnd's


@pytest.mark.parametrize(("text", "value"), [("2\n", 2), ("0x10", 16), ("010\n", 8),
                                             ("+5", 5), ("0", 0)])
def test_kstrtoul_reads_as_the_kernel(text: str, value: int) -> None:
    assert kstrto(text, 0, 2**64 - 1) == value


@pytest.mark.parametrize("text", ["-1", " 2", "2\n\n", "08", "", "1.5", "2 ", "9" * 100_000])
def test_kstrtoul_refuses_as_the_kernel(text: str) -> None:
    with pytest.raises(ParamError) as err:
        kstrto(text, 0, 2**64 - 1)
    assert err.value.errno == E.EINVAL


def test_write_goes_to_the_engine_as_lnetctl_set(params: ModParams) -> None:
    """``sensitivity_set``: 0 turns retries off; the read is the engine's value now."""
    p = parse_path("/sys/module/lnet/parameters/lnet_health_sensitivity")
    params.write(p, b"0\n")
    assert params.rt.engine.tunables.health_sensitivity == 0
    assert params.rt.engine.tunables.retry_count == 0
    assert params.read(parse_path("/sys/module/lnet/parameters/lnet_retry_count")) == "0\n"
    params.rt.engine.set_tunable("health_sensitivity", 3)
    assert params.read(p) == "3\n"


def test_refused_write_changes_nothing(params: ModParams) -> None:
    p = parse_path("/sys/module/lnet/parameters/lnet_health_sensitivity")
    for bad in (b"1001\n", b"-3\n", b"x\n"):
        with pytest.raises(ParamError) as err:
            params.write(p, bad)
        assert err.value.errno == E.EINVAL and "lnet_health_sensitivity" in err.value.text
    assert params.rt.engine.tunables.health_sensitivity == 100
    with pytest.raises(ParamError) as err:
        params.write(parse_path("/sys/module/lnet/parameters/lnet_numa_range"), b"1\n")
    assert err.value.errno == E.EACCES


def test_fuse_server_answers_a_malformed_request_with_eio(params: ModParams) -> None:
    """A request the server cannot decode (a truncated body) gets -EIO, never no answer (the
    caller would hang in the kernel); a well-formed one after it is served."""
    from nodes.daemon import fusefs

    fs = fusefs.ParamFS(params, "/nonexistent")
    replies: list[tuple[int, int, bytes]] = []
    fs._reply = lambda unique, error, body: replies.append((unique, error, body))  # type: ignore[method-assign]
    fs.serve(fusefs.IN_HEADER.pack(40, fusefs.READ, 7, 3, 0, 0, 0, 0, 0) + b"\0" * 3)
    fs.serve(fusefs.IN_HEADER.pack(40, fusefs.GETATTR, 8, 1, 0, 0, 0, 0, 0) + b"\0" * 16)
    assert [(u, e) for u, e, _ in replies] == [(7, -E.EIO), (8, 0)]


def test_discovery_disabled_is_inverted_and_boolean(params: ModParams) -> None:
    p = parse_path("/sys/module/lnet/parameters/lnet_peer_discovery_disabled")
    params.write(p, b"9\n")
    assert params.rt.engine.tunables.discovery == 0 and params.read(p) == "1\n"


def test_stored_parameters_read_what_the_module_was_loaded_with(params: ModParams) -> None:
    assert params.read(parse_path("/sys/module/lnet/parameters/networks")) == "tcp(eth0)\n"
    nagle = parse_path("/sys/module/ksocklnd/parameters/nagle")
    assert params.read(nagle) == "1\n"
    params.write(nagle, b"0\n")
    assert params.read(nagle) == "0\n"


def test_unknown_paths_are_enoent() -> None:
    for path in ("/sys/module/lnet/parameters/nope", "/sys/module/lnet/nope/x",
                 "/sys/module/ko2iblnd/parameters/credits", "/etc/passwd"):
        with pytest.raises(ParamError) as err:
            parse_path(path)
        assert err.value.errno == E.ENOENT


def test_sim_exec_answers_like_dash(params: ModParams) -> None:
    """The simulator's ``testbed exec``: dash's statuses and one-line errors."""
    lnet = "/sys/module/lnet/parameters"
    assert is_sysfs(["echo", "2", ">", f"{lnet}/lnet_retry_count"])
    assert not is_sysfs(["cat", "/etc/passwd"]) and not is_sysfs(["lnetctl", "net", "show"])
    done = run(params, ["echo", "1", f">{lnet}/lnet_retry_count"])
    assert (done.rc, done.out, done.err) == (0, "", "")
    assert params.rt.engine.tunables.retry_count == 1
    done = run(params, ["echo", "7", ">", f"{lnet}/lnet_response_tracking"])
    assert (done.rc, done.err) == (1, "sh: 1: echo: echo: I/O error\n")
    done = run(params, ["echo", "1", ">", f"{lnet}/nope"])
    assert done.rc == 2 and done.err.endswith("Permission denied\n")
    assert run(params, ["cat", f"{lnet}/nope"]).rc == 1


def _can_fuse() -> str | None:
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("unshare") is None:
        return "needs root, /dev/fuse and unshare"
    return None


@pytest.mark.skipif(_can_fuse() is not None, reason=str(_can_fuse()))
def test_fuse_mount_serves_reads_writes_and_errors(tmp_path: Path) -> None:
    """The FUSE file system in a private mount namespace of its own (``unshare -m``): a shell
    reads and writes the files, a refused write fails with EINVAL (dash: I/O error), a new
    file with EACCES, and the mount is gone with the namespace."""
    script = textwrap.dedent(f"""
        import asyncio, random, sys
        from nodes.daemon.fusefs import ParamFS
        from nodes.dlc.verbs.modparam_files import ModParams
        sys.path.insert(0, {str(ROOT / 'tests' / 'unit')!r})
        from rtdouble import RuntimeDouble
        from nodes.lnet.engine import LNetEngine

        async def main():
            rt = RuntimeDouble(LNetEngine(rng=random.Random(7)))
            fs = ParamFS(ModParams(rt), {str(tmp_path)!r})
            loop = asyncio.get_running_loop()
            fs.mount(loop)
            p = await asyncio.create_subprocess_exec("sh", "-c", sys.argv[1])
            rc = await p.wait()
            fs.close(loop)
            print("engine", rt.engine.tunables.health_sensitivity, rc)
        asyncio.run(main())
    """)
    lnet = f"{tmp_path}/lnet/parameters"
    shell = (f"cat {lnet}/lnet_health_sensitivity; echo 2 > {lnet}/lnet_health_sensitivity; "
             f"cat {lnet}/lnet_health_sensitivity; echo 5000 > {lnet}/lnet_health_sensitivity;"
             f" echo rc=$?; echo 1 > {lnet}/nope; echo rc=$?; ls {tmp_path}")
    res = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                          script, shell], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["100", "2", "rc=1", "rc=2", "ksocklnd", "lnet", "engine",
                                  "2", "0"], res
    assert "I/O error" in res.stderr and "Permission denied" in res.stderr
    assert not any(tmp_path.iterdir())  # nothing mounted here outside that namespace

