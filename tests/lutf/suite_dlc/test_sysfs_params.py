"""A node's ``/sys/module/{lnet,ksocklnd}/parameters`` files (issue 26 item 9).

Real LNet's module parameters are files (``module_param``, api-ni.c, router.c,
socklnd_modparams.c): 0644 ones take a write that goes through the parameter's ``set`` op --
the very op ``lnetctl set`` reaches (liblnetconfig ``write_sysfs_file``) -- and 0444 ones are
read-only after load. sanity-lnet reads and writes them from a shell (``cat``, ``echo V >``).
Here the test's shell command runs inside the node (``NodeHandle.exec``: on Mininet the node's
network and mount namespaces, where its daemon serves the files over FUSE; on the simulator
the same files answered in-process), and each test asserts the engine's behaviour, not only
the file. Runs on Mininet and with ``--lnet-backend=sim``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lutf import lnet_views as lv
from lutf.lnet_views import C1_NIDS, S1_NIDS, advance_until, local_nis, ok
from testbed.base import TestbedError

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]

LNET = "/sys/module/lnet/parameters"
KSOCKLND = "/sys/module/ksocklnd/parameters"


@pytest.fixture
def tb(module_topology: Any) -> Any:
    return lv.reset_nodes(module_topology, "set health_sensitivity 100", "set retry_count 2",
                       "set discovery 1")


def sh(node: Any, command: str) -> Any:
    """``sh -c COMMAND`` inside ``node`` (``testbed exec NODE COMMAND``)."""
    return node.exec(["sh", "-c", command])


def read(node: Any, module_path: str, name: str) -> str:
    res = sh(node, f"cat {module_path}/{name}")
    assert res.rc == 0, res
    return str(res.out)


def write(node: Any, name: str, value: str) -> Any:
    return sh(node, f"echo {value} > {LNET}/{name}")


def health_after_failures(c1: Any) -> tuple[int, int]:
    """(remote timeouts, health of s1's rail-1 peer NI) read at one instant, after PUTs whose
    every transmission to that NID ends in REMOTE_TIMEOUT (spec §8.2), recovery pings too."""
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -e remote_timeout")
    c1.put(S1_NIDS[0], count=12, size=0)
    before = None
    for _ in range(50):
        k = lv.stats(c1)["remote_timeout_count"]
        health = lv.peer_nis(c1)[S1_NIDS[1]]["health stats"]["health value"]
        if health == before:
            return k, int(health)
        before = health
    raise AssertionError(f"peer NI health never stood still: {before}")


@pytest.mark.requirement("hlth-cfg-sensitivity", "cfg-090")
@pytest.mark.parametrize("how", ["sysfs", "lnetctl"])
def test_sysfs_health_sensitivity_costs_as_lnetctl_set(tb: Any, how: str) -> None:
    """api-ni.c ``sensitivity_set`` (``lnet_health_sensitivity``, 0644): ``echo 250 >`` the
    file inside the node and ``lnetctl set health_sensitivity 250`` are one kernel op; either
    way each failure then costs the guilty peer NI exactly 250 (``h = max(h - 250, 0)``),
    and the file reads 250 after either."""
    c1 = tb.node("c1")
    if how == "sysfs":
        res = write(c1, "lnet_health_sensitivity", "250")
        assert res.rc == 0 and res.err == "", res
    else:
        ok(c1, "lnetctl", "set health_sensitivity 250")
    assert read(c1, LNET, "lnet_health_sensitivity") == "250\n"
    assert c1.yaml("global show")["global"]["health_sensitivity"] == 250
    k, health = health_after_failures(c1)
    assert k >= 1
    assert health == max(1000 - k * 250, 0), (k, health)


@pytest.mark.requirement("hlth-cfg-sensitivity", "hlth-lnt-retry-zero")
def test_sysfs_health_sensitivity_zero_turns_retries_off(tb: Any) -> None:
    """``echo 0 > lnet_health_sensitivity``: as ``sensitivity_set`` does, ``lnet_retry_count``
    becomes 0 (its file reads 0), so a resendable LOCAL_TIMEOUT is neither resent nor costs
    the NI health -- the behaviour ``lnetctl set health_sensitivity 0`` gives."""
    c1 = tb.node("c1")
    assert write(c1, "lnet_health_sensitivity", "0").rc == 0
    assert read(c1, LNET, "lnet_retry_count") == "0\n"
    ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m put -e local_timeout")
    reply = c1.put(S1_NIDS[0], count=5, size=0)
    assert reply["failed"] == 5, reply
    st = lv.stats(c1)
    assert (st["local_timeout_count"], st["resend_count"]) == (5, 0), st
    assert {n["health stats"]["health value"] for n in local_nis(c1).values()} == {1000}


@pytest.mark.requirement("hlth-cfg-retry")
def test_sysfs_retry_count_bounds_the_resends(tb: Any) -> None:
    """``echo 1 > lnet_retry_count`` (``retry_count_set``): a PUT failing every attempt with
    LOCAL_TIMEOUT is sent twice, then fails (spec §3.3); ``lnetctl set retry_count 0``
    afterwards reads back through the file as 0 and stops the resends."""
    c1 = tb.node("c1")
    assert write(c1, "lnet_retry_count", "1").rc == 0
    ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m put -e local_timeout")
    c1.put(S1_NIDS[0], count=4, size=0)
    st = lv.stats(c1)
    assert (st["resend_count"], st["local_timeout_count"]) == (4, 8), st
    ok(c1, "lnetctl", "set retry_count 0")
    assert read(c1, LNET, "lnet_retry_count") == "0\n"
    ok(c1, "lnetctl", "stats reset")
    c1.put(S1_NIDS[0], count=4, size=0)
    st = lv.stats(c1)
    assert (st["resend_count"], st["local_timeout_count"]) == (0, 4), st


def test_sysfs_discovery_disabled_inverts_discovery(tb: Any) -> None:
    """``lnet_peer_discovery_disabled`` (``discovery_set``: any non-zero is 1) is ``lnetctl
    set discovery``'s file, inverted: ``echo 7 >`` it and ``global show`` says discovery 0;
    ``lnetctl set discovery 1`` and it reads 0 again."""
    c1 = tb.node("c1")
    assert write(c1, "lnet_peer_discovery_disabled", "7").rc == 0
    assert read(c1, LNET, "lnet_peer_discovery_disabled") == "1\n"
    assert c1.yaml("global show")["global"]["discovery"] == 0
    ok(c1, "lnetctl", "set discovery 1")
    assert read(c1, LNET, "lnet_peer_discovery_disabled") == "0\n"


@pytest.mark.parametrize(("name", "value"), [
    ("lnet_health_sensitivity", "1001"),  # sensitivity_set: > LNET_MAX_HEALTH_VALUE
    ("lnet_health_sensitivity", "-1"),  # kstrtoul: no sign
    ("lnet_health_sensitivity", "lots"),
    ("lnet_transaction_timeout", "2"),  # transaction_to_set: must exceed retry_count (2)
    ("lnet_response_tracking", "4"),  # response_tracking_set: 0..3
    ("lnet_max_recovery_ping_interval", "0"),  # strictly positive
    ("lnet_retry_count", "9" * 5000),  # longer than a page: no number the kernel reads
])
def test_sysfs_bad_value_fails_the_write_with_einval(tb: Any, name: str, value: str) -> None:
    """A value the parameter's ``set`` op refuses fails the ``write(2)`` with -EINVAL: the
    shell prints one line (dash: ``echo: I/O error``), the file and ``global show`` keep the
    old value, the node's log has the kernel's reason, and the node still sends."""
    c1 = tb.node("c1")
    old = read(c1, LNET, name)
    res = write(c1, name, value)
    assert res.rc != 0
    assert res.err.strip().count("\n") == 0 and "I/O error" in res.err, res
    assert read(c1, LNET, name) == old
    assert name in c1.log()
    assert c1.ping(S1_NIDS[0]).rc == 0


@pytest.mark.parametrize("path", [f"{LNET}/lnet_no_such_parameter", f"{LNET}/lock_prim_nid",
                                  f"{KSOCKLND}/credits"])
def test_sysfs_unknown_or_read_only_file_is_refused(tb: Any, path: str) -> None:
    """sysfs makes no new file in a parameters directory, and a 0444 parameter is read-only
    after load: ``echo 1 >`` either is "cannot create ...: Permission denied" (one line),
    nothing changes, and the node is alive."""
    c1 = tb.node("c1")
    before = sh(c1, f"cat {path}")
    res = sh(c1, f"echo 1 > {path}")
    assert res.rc != 0 and res.err.strip().count("\n") == 0, res
    assert "Permission denied" in res.err, res
    assert sh(c1, f"cat {path}").out == before.out
    assert c1.ping(S1_NIDS[1], source=C1_NIDS[1]).rc == 0


def test_sysfs_files_read_as_the_kernel_prints_them(tb: Any) -> None:
    """Reads print ``param_get_*``'s text: a value and a newline (the engine's tunable as
    ``global show`` has it); the defaults of today's LNet and ksocklnd where the engine
    keeps no value (docs/differences.md)."""
    c1 = tb.node("c1")
    tt = c1.yaml("global show")["global"]["transaction_timeout"]
    assert read(c1, LNET, "lnet_transaction_timeout") == f"{tt}\n"
    assert read(c1, LNET, "accept_port") == "988\n"
    assert read(c1, LNET, "dead_router_check_interval") == f"{-(2**31)}\n"
    assert read(c1, KSOCKLND, "peer_credits") == "8\n"
    names = sh(c1, f"ls {LNET}").out.split()
    assert "lnet_health_sensitivity" in names and "lnet_no_such_parameter" not in names
    # the node's files never show in the machine's mount namespace (this process's)
    assert "fuse.lnet" not in Path("/proc/self/mountinfo").read_text()


def test_sysfs_files_follow_a_module_reload_and_a_restart(topology: Any) -> None:
    """A node's "modules reloaded" with new parameters (sanity-lnet ``load_lnet OPTS``,
    ``reload_modules``) reads the new load's values, and ``lnet configure --all`` makes the
    NIs its ``networks`` names; a killed node's files are gone with it (Mininet: the FUSE
    connection is dead, ENOTCONN) and a restarted one serves them again."""
    topology.reload_modules("c1", {"lnet": {"lnet_health_sensitivity": "5",
                                            "networks": "tcp(eth1)"}})
    c1 = topology.node("c1")  # the reloaded node's handle
    assert read(c1, LNET, "lnet_health_sensitivity") == "5\n"
    assert read(c1, LNET, "networks") == "tcp(eth1)\n"
    ok(c1, "lnetctl", "lnet configure --all")
    assert set(local_nis(c1)) == {C1_NIDS[1]}
    topology.fault.add("kill", node="c1")
    try:
        dead = sh(c1, f"cat {LNET}/lnet_health_sensitivity")
        assert dead.rc != 0, dead
    except TestbedError:
        pass  # the simulator refuses any verb of a dead node
    topology.fault.add("restart", node="c1")
    advance_until(topology, lambda: sh(topology.node("c1"),
                                       f"cat {LNET}/lnet_health_sensitivity").rc == 0,
                  20.0, "the restarted node's files")
