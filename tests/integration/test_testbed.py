"""The orchestrator on the real thing: Mininet namespaces, bridges, node daemons, the CLI.

Every testbed comes from ``testbed_factory`` (unique name per test and xdist worker), which
downs it at teardown and fails the test if anything of it remains.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from itkit import C1_NIDS, PROJECT_ROOT, S1_NIDS, pytestmark, settle_peers  # noqa: F401

from testbed import TestbedError, names, runstate, sh
from testbed.clean import leftovers
from testbed.mininet import MininetNode, MininetTestbed
from testbed.pytest.plugin import unique_name, wait_for


def cli(*args: str, root: Path | None = None, timeout: float = 120.0
        ) -> subprocess.CompletedProcess[str]:
    """Run the ``testbed`` command line as a user would, in a subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT),
                                                      env.get("PYTHONPATH")]))
    if root is not None:
        env[runstate.ENV_RUNROOT] = str(root)
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd="/", check=False)


def ping(node: MininetNode, nid: str, *extra: str) -> sh.Completed:
    return node.lnetctl("ping", nid, *extra)


def tcp_stats(node: MininetNode) -> dict[str, dict[str, Any]]:
    """nid -> {"interface": ..., "statistics": {...}} for the node's tcp NIs."""
    view = node.lnetctl_yaml("net", "show", "-v", "2")
    found = {}
    for net in view["net"]:
        if net["net type"] != "tcp":
            continue
        for ni in net["local NI(s)"]:
            found[ni["nid"]] = {"interface": ni["interfaces"][0],
                                "statistics": ni["statistics"],
                                "sent_stats": ni["sent_stats"],
                                "received_stats": ni["received_stats"]}
    return found


# -- bring-up ------------------------------------------------------------------------------------


def test_default_topology_comes_up_and_pings(testbed_factory: Any) -> None:
    steps: list[tuple[int, int, str]] = []
    started = time.monotonic()
    tb = testbed_factory(progress=lambda *step: steps.append(step))
    elapsed = time.monotonic() - started
    assert [s[0] for s in steps] == [1, 2, 3, 4, 5, 6, 7] and all(s[1] == 7 for s in steps)
    assert elapsed < 30, f"bring-up took {elapsed:.1f}s"

    status = tb.status()
    assert status["phase"] == "ready"
    assert sorted(status["nodes"]) == ["c1", "s1"]
    assert all(n["alive"] for n in status["nodes"].values())
    assert status["nodes"]["c1"]["nids"] == C1_NIDS
    c1 = tb.node("c1")
    for nid in S1_NIDS:
        view = c1.lnetctl_yaml("ping", nid)
        assert view["ping"][0]["primary nid"] == S1_NIDS[0], view
    kinds = [e["kind"] for e in tb.events()]
    assert "up" in kinds  # and after it only the pings' connections (the LND's lnet_notify)
    assert set(kinds[kinds.index("up") + 1:]) <= {"peer_notify"}, kinds


def test_nodes_see_only_their_own_addresses(testbed_factory: Any) -> None:
    tb = testbed_factory()
    c1 = tb.node("c1")
    addrs = c1.exec(["ip", "-4", "-o", "addr", "show"])
    assert addrs.rc == 0, addrs
    got = sorted((f[1], f[3]) for f in (ln.split() for ln in addrs.out.splitlines()))
    assert got == [("eth0", "10.10.0.1/24"), ("eth1", "10.11.0.1/24"), ("lo", "127.0.0.1/8")]
    assert c1.exec(["ip", "route", "show", "default"]).out.strip() == ""
    ipv6 = c1.exec(["sysctl", "-n", "net.ipv6.conf.all.disable_ipv6",
                    "net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce"])
    assert ipv6.out.split() == ["1", "1", "2"], ipv6
    # the kernel names outside follow the hash scheme and fit IFNAMSIZ
    kernel = {i["kernel"] for n in tb.status()["nodes"].values()
              for i in n["interfaces"].values()}
    assert all(names.hash_of(k) == names.short_hash(tb.name) and len(k) <= 15 for k in kernel)


# -- command line --------------------------------------------------------------------------------


def test_cli_exec_and_lnetctl_pass_through(testbed_factory: Any) -> None:
    tb = testbed_factory()
    shown = cli("exec", "-n", tb.name, "c1", "lnetctl", "net", "show")
    assert shown.returncode == 0, shown.stderr
    for text in (*C1_NIDS, "eth0", "eth1"):
        assert text in shown.stdout

    failed = cli("exec", "-n", tb.name, "c1", "sh", "-c", "echo oops >&2; echo out; exit 7")
    assert (failed.returncode, failed.stdout, failed.stderr) == (7, "out\n", "oops\n")
    one_string = cli("exec", "-n", tb.name, "c1", "exit 7")
    assert one_string.returncode == 7

    direct = cli("lnetctl", "-n", tb.name, "c1", "net", "show")
    assert direct.returncode == 0 and direct.stdout == tb.node("c1").lnetctl("net show").out
    bad = cli("lnetctl", "-n", tb.name, "c1", "no-such-command")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr

    status = cli("status", "-n", tb.name)
    assert status.returncode == 0 and "10.11.0.2@tcp" in status.stdout


def test_cli_errors_are_one_line(testbed_factory: Any) -> None:
    tb = testbed_factory()
    for args in (["lnetctl", "-n", tb.name, "c9", "net", "show"],
                 ["link", "-n", tb.name, "c1", "eth7", "down"],
                 ["exec", "-n", "no-such-testbed", "c1", "true"]):
        result = cli(*args)
        assert result.returncode == 1, (args, result)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("testbed: error: "), (args, lines)
    usage = cli("link", "-n", tb.name, "c1", "eth0", "sideways")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


# -- links and traffic ---------------------------------------------------------------------------


def tcp_connect(node: MininetNode, ip: str) -> int:
    """rc of a TCP connect from inside ``node`` to ``ip``:988 (the socklnd acceptor)."""
    code = f"import socket; socket.create_connection(({ip!r}, 988), timeout=3).close()"
    return node.exec([sys.executable, "-c", code]).rc


def test_link_down_and_up(testbed_factory: Any) -> None:
    tb = testbed_factory()
    c1 = tb.node("c1")
    rail1 = ("10.11.0.2@tcp", "--source", "10.11.0.1@tcp", "--timeout", "3")
    assert ping(c1, *rail1).rc == 0
    tb.link("c1", "eth1", "down")
    assert tb.status()["nodes"]["c1"]["interfaces"]["eth1"]["state"] == "down"
    # The rail is really cut: no IP path, and LNet cannot ping over it...
    assert tcp_connect(c1, "10.11.0.2") != 0
    down = ping(c1, *rail1)
    assert down.rc != 0, down
    # ...while the other rail works. (A ping without --source may reach 10.11.0.2@tcp
    # through eth0: s1 is a Multi-Rail peer and LNet picks any healthy path to it.)
    assert tcp_connect(c1, "10.10.0.2") == 0
    assert ping(c1, "10.10.0.2@tcp", "--source", "10.10.0.1@tcp").rc == 0
    tb.link("c1", "eth1", "up")
    wait_for(lambda: ping(c1, *rail1).rc, timeout=30, expected=0)
    assert tcp_connect(c1, "10.11.0.2") == 0
    kinds = [e["kind"] for e in tb.events()]
    assert kinds.index("link_down") < kinds.index("link_up")


def test_puts_use_both_rails(testbed_factory: Any) -> None:
    tb = testbed_factory()
    c1 = tb.node("c1")
    settle_peers(tb)  # discovery of the static peers first: count only the 100 PUTs
    reply = c1.put(S1_NIDS[0], count=100, size=1024)
    assert reply.get("ok") and reply["sent"] == 100, reply
    assert reply["completed"] == 100 and reply["failed"] == 0, reply
    stats = tcp_stats(c1)
    assert sorted(s["interface"] for s in stats.values()) == ["eth0", "eth1"]
    for nid, ni in stats.items():
        assert ni["statistics"]["send_count"] > 0, (nid, ni)
    # the totals add up: every PUT left on exactly one rail, and s1 received each one once
    assert sum(ni["sent_stats"]["put"] for ni in stats.values()) == 100, stats
    assert sum(ni["statistics"]["send_count"] for ni in stats.values()) == 100, stats
    s1_stats = tcp_stats(tb.node("s1"))
    assert sum(ni["received_stats"]["put"] for ni in s1_stats.values()) == 100, s1_stats
    traffic = cli("traffic", "-n", tb.name, "c1", "--to", "s1", "--count", "5")
    assert traffic.returncode == 0 and "completed 5" in traffic.stdout, traffic


# -- several testbeds ----------------------------------------------------------------------------


def test_two_testbeds_at_once_do_not_interfere(testbed_factory: Any) -> None:
    one, two = testbed_factory(), testbed_factory()
    assert one.name != two.name
    bridges = [{s["bridge"] for s in tb.status()["segments"].values()} for tb in (one, two)]
    assert not bridges[0] & bridges[1]
    for tb in (one, two):
        for nid in S1_NIDS:
            assert ping(tb.node("c1"), nid).rc == 0
    one.link("c1", "eth1", "down")
    link = two.node("c1").exec(["ip", "-o", "link", "show", "eth1"])
    assert "state UP" in link.out or ",UP" in link.out, link
    assert ping(two.node("c1"), "10.11.0.2@tcp", "--timeout", "3").rc == 0
    assert two.status()["nodes"]["c1"]["interfaces"]["eth1"]["state"] == "up"


# -- teardown and cleaning -----------------------------------------------------------------------


def test_down_leaves_nothing(testbed_factory: Any) -> None:
    tb = testbed_factory()
    assert leftovers(tb.name)  # while up, there is something to find
    result = cli("down", "-n", tb.name)
    assert result.returncode == 0, result.stderr
    assert leftovers(tb.name) == []
    assert cli("status", "-n", tb.name).returncode == 1


def test_kill9_then_clean_removes_everything(testbed_factory: Any, tmp_path: Path) -> None:
    root = tmp_path / "runroot"  # private: `testbed clean` here must not touch other tests
    tb = testbed_factory(root=root)
    state = runstate.read_state(tb.rundir)
    supervisor, daemon = state["supervisor_pid"], state["nodes"]["s1"]["daemon_pid"]
    os.kill(supervisor, signal.SIGKILL)
    os.kill(daemon, signal.SIGKILL)
    wait_for(lambda: not runstate.pid_alive(supervisor), timeout=5)
    assert leftovers(tb.name, root)
    result = cli("clean", root=root)
    assert result.returncode == 0, result.stderr
    assert "removed directory" in result.stdout
    assert wait_for(lambda: leftovers(tb.name, root), timeout=10, expected=[]) == []
    assert not names.ours([names.short_hash(tb.name)])


def test_interrupted_up_removes_what_it_made(testbed_factory: Any) -> None:
    class Abort(Exception):
        pass

    def progress(step: int, _total: int, _text: str) -> None:
        if step == 4:  # daemons started, not yet configured
            raise Abort

    with pytest.raises(Abort):
        testbed_factory(progress=progress)
    # the factory's teardown proves nothing remains


def test_existing_bridge_refused(request: pytest.FixtureRequest) -> None:
    name = unique_name(request.config)
    bridge = names.bridge_name(name, 1)
    # A live process tagged with the name marks the bridge as owned, so a concurrent
    # `testbed clean` (another xdist worker) leaves it alone, as it would a real testbed's.
    owner = subprocess.Popen(["sleep", "120"], env={**os.environ, runstate.ENV_NAME: name})
    sh.run_checked(["ip", "link", "add", "name", bridge, "type", "bridge"])
    try:
        with pytest.raises(TestbedError, match=f"testbed down -n {name}") as exc:
            MininetTestbed.up(None, name=name)
        assert bridge in str(exc.value)
        assert bridge in names.ours([names.short_hash(name)])  # someone else's: left alone
        assert not runstate.rundir(name).exists()
    finally:
        sh.run(["ip", "link", "del", "dev", bridge])
        owner.kill()
        owner.wait()
    assert leftovers(name) == []


BAD_TOPOLOGIES = {
    "undefined-segment": ("""\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
nodes:
  c1: {interfaces: [lan0]}
  s1: {interfaces: [lan9]}
""", 5),
    "bad-subnet": ("""\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.1/24}
nodes:
  c1: {interfaces: [lan0]}
""", 2),
    "duplicate-address": ("""\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
nodes:
  c1: {interfaces: [{lan0: 10.10.0.7}]}
  s1: {interfaces: [{lan0: 10.10.0.7}]}
""", 5),
}


@pytest.mark.parametrize("case", sorted(BAD_TOPOLOGIES))
def test_bad_topology_refused_before_anything_starts(
        case: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    text, line = BAD_TOPOLOGIES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    name = unique_name(request.config)
    result = cli("up", "-n", name, str(path))
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed: error: "), lines
    assert f"{path.name}:{line}" in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert leftovers(name) == []
    assert not runstate.rundir(name).exists()


def test_wait_for_reports_the_last_value() -> None:
    values = iter(range(100))
    with pytest.raises(AssertionError, match=r"expected|waited .* for 99; last call returned"):
        wait_for(lambda: next(values), timeout=0.3, interval=0.05, expected=99)
    assert wait_for(lambda: "x", timeout=1) == "x"
