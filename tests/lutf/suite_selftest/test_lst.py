"""lnet_selftest with ``lst``, on both backends (issue 13 item 1).

Real lnet_selftest: a console (``lst`` on ``con``) makes a session on the test nodes, groups
them, adds brw or ping tests to a batch and runs it; the test nodes then exchange test RPCs
over LNet (framework RPCs on portal 51, test RPCs on 50, replies and bulk on 52) and ``lst
stat`` reports each group's LNet message and byte rates from the nodes' own counters. Here
``lst`` is the real program in the node's namespace on Mininet (``node.exec``) and the lst
verb on the simulator, where time is virtual. What is asserted: lst's output, bytes moved
agreeing with the nodes' ``lnetctl stats``, a payload altered on the wire reported as brw
errors, and the console's idle timeout ending the session (lnet/utils/lst.c, lnet/selftest).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from lutf.lnet_views import delta, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("lst3.yaml")]

KEY = "4242"
CON, C1, S1 = "10.20.0.1@tcp", "10.20.0.2@tcp", "10.20.0.3@tcp"
MIB = 1 << 20


def lst(tb: Any, *argv: str, key: str = KEY, timeout: float = 120.0) -> Any:
    """``LST_SESSION=KEY lst ARGV`` in the console node (the program on Mininet)."""
    return tb.node("con").exec(["env", f"LST_SESSION={key}", "lst", *argv], timeout=timeout)


def ok(tb: Any, *argv: str) -> str:
    r = lst(tb, *argv)
    assert (r.rc, r.err) == (0, ""), (argv, r)
    return str(r.out)


def setup(tb: Any, *tests: list[str]) -> None:
    """A session, groups clients (c1) and servers (s1), batch ``b`` with ``tests``."""
    ok(tb, "new_session", "suite")
    assert ok(tb, "add_group", "clients", C1) == f"{C1} are added to session\n"
    assert ok(tb, "add_group", "servers", S1) == f"{S1} are added to session\n"
    ok(tb, "add_batch", "b")
    for t in tests:
        assert ok(tb, "add_test", "--batch", "b", "--from", "clients", "--to", "servers",
                  *t) == "Test was added successfully\n"


def wait_stopped(tb: Any, limit: float = 120.0) -> None:
    """``lst query b`` until the batch is stopped (virtual seconds on the sim)."""
    end = tb.now + limit
    while ok(tb, "query", "b") != "b [0] is stopped\n":
        assert tb.now < end, "batch still running"
        tb.advance(0.5)


def test_session_groups_batch_and_end(topology: Any) -> None:
    """lst's session, group and batch commands print what lst prints; a second session is
    refused; after ``end_session`` the console has none."""
    tb = topology
    setup(tb, ["brw", "read", "size=4k"])
    assert re.fullmatch(rf"suite ID: \d+@{CON}, KEY: {KEY} FEATURES: 1 NODES: 2\n",
                        ok(tb, "show_session"))
    assert ok(tb, "list_group", "clients", "servers") == (
        "\tACTIVE\tBUSY\tDOWN\tUNKNOWN\tTOTAL\n\t1\t0\t0\t0\t1\tclients\n"
        "\t1\t0\t0\t0\t1\tservers\n")
    assert ok(tb, "list_batch", "b").startswith(
        "Batch: b Tests: 1 State: 176\n\tACTIVE\tBUSY\tDOWN\tUNKNOWN\tTOTAL\n")
    r = lst(tb, "new_session", "second")
    assert (r.rc, r.err) == (255, "session already exists\n")
    assert ok(tb, "ping", "--session") == (
        f"\t12345-{C1}: Active [session: suite id: {CON}]\n"
        f"\t12345-{S1}: Active [session: suite id: {CON}]\n")
    assert ok(tb, "end_session") == "session is ended\n"
    r = lst(tb, "list_group")
    assert (r.rc, r.err) == (255, "No session exists\n")


@pytest.mark.parametrize(("rw", "mover", "getter"), [("write", "c1", "s1"),
                                                     ("read", "s1", "c1")])
def test_brw_check_full_moves_the_bytes_the_nodes_count(topology: Any, rw: str, mover: str,
                                                        getter: str) -> None:
    """32 brw RPCs of 1 MiB with check=full: the bytes sent by the data's owner (the client
    for a write, read by the server's GET; the server for a read, PUT to the client) and
    received by the other side are what their ``lnetctl stats`` add up, plus the 160-byte
    RPC messages; no brw error anywhere."""
    tb = topology
    setup(tb, ["--loop", "16", "--concurrency", "2", "brw", rw, "size=1M", "check=full"])
    before = {n: stats(tb.node(n)) for n in ("c1", "s1")}
    assert ok(tb, "run", "b") == "b is running now\n"
    wait_stopped(tb)
    d = {n: delta(stats(tb.node(n)), before[n]) for n in ("c1", "s1")}
    small = 100 * 1024  # requests, replies, the console's RPCs: 160 bytes each
    assert 32 * MIB <= d[mover]["send_length"] < 32 * MIB + small, d
    assert 32 * MIB <= d[getter]["recv_length"] < 32 * MIB + small, d
    assert ok(tb, "show_error", "clients", "servers") == (
        "clients:\nTotal 0 error nodes in clients\nservers:\nTotal 0 error nodes in servers\n")


def test_stat_rates_match_the_counters(topology: Any) -> None:
    """``lst stat`` of the servers while a write runs: [R] MiB/s and RPC/s are the bytes and
    messages s1's ``lnetctl stats`` count. lst's span (``--delay 3``, at least 3 s) lies inside
    the test's, which also holds the command's start: so lst's figures times 3 are at most
    what the counters saw over the whole span (exact), and, the write being steady, its rates
    are near the counters' average (within 30 %: on a loaded host the command's start takes a
    good part of a second); [W] is the small replies only."""
    tb = topology
    setup(tb, ["--concurrency", "4", "brw", "write", "size=1M"])
    ok(tb, "run", "b")
    tb.advance(1.0)
    t0, s0 = tb.now, stats(tb.node("s1"))
    out = ok(tb, "stat", "--count", "1", "--delay", "3", "servers")
    t1, s1 = tb.now, stats(tb.node("s1"))
    m = re.fullmatch(r"\[LNet Rates of servers\]\n"
                     r"\[R\] Avg: (\d+) +RPC/s Min: \d+ +RPC/s Max: \d+ +RPC/s\n"
                     r"\[W\] Avg: (\d+) +RPC/s Min: \d+ +RPC/s Max: \d+ +RPC/s\n"
                     r"\[LNet Bandwidth of servers\]\n"
                     r"\[R\] Avg: ([\d.]+) +MiB/s Min: [\d.]+ +MiB/s Max: [\d.]+ +MiB/s \n"
                     r"\[W\] Avg: ([\d.]+) +MiB/s Min: [\d.]+ +MiB/s Max: [\d.]+ +MiB/s \n", out)
    assert m, out
    ok(tb, "stop", "b")
    dt = t1 - t0
    mib, msgs = (s1["recv_length"] - s0["recv_length"]) / MIB, s1["recv_count"] - s0["recv_count"]
    lst_mib, lst_rpcs = float(m.group(3)), float(m.group(1))
    assert 3 * lst_mib <= mib + 0.03 and 3 * lst_rpcs <= msgs + 3, (out, mib, msgs, dt)
    assert lst_mib >= 0.7 * mib / dt and lst_rpcs >= 0.7 * msgs / dt, (out, mib, msgs, dt)
    assert float(m.group(4)) < 0.01 * float(m.group(3))


def _tamper_sim(tb: Any, node: str, size: int) -> None:
    """Flip one bit of every ``size``-byte payload ``node`` sends (the fabric's wire)."""
    from nodes.lnet.actions import Transmit

    def tamper(name: str, act: Transmit) -> Transmit:
        if name == node and len(act.payload) == size:
            data = bytearray(act.payload)
            data[size // 2] ^= 0x01
            act = Transmit(tx_id=act.tx_id, ni=act.ni, lpni=act.lpni, hdr=act.hdr,
                           payload=bytes(data))
        return act

    tb.fabric.interpose = tamper


@pytest.mark.parametrize(("rw", "sender"), [("write", "c1"), ("read", "s1")])
def test_a_payload_altered_on_the_wire_is_a_brw_error(topology: Any, rw: str,
                                                      sender: str) -> None:
    """check=full: bulk data altered between the nodes (a corrupt fault with the TCP checksum
    fixed on Mininet, a flipped bit on the sim's wire) fails the data check -- on the server
    for a write (EBADMSG in its reply), on the client for a read -- and lst show_error lists
    the client's brw errors; the console's own RPCs are untouched."""
    tb = topology
    setup(tb, ["--loop", "200", "--concurrency", "2", "brw", rw, "size=64k", "check=full"])
    if hasattr(tb, "fabric"):
        _tamper_sim(tb, sender, 64 * 1024)
        fault = None
    else:  # bits flipped deep in TCP segments of the bulk (past any message header)
        fault = tb.fault.add("corrupt", node=sender, direction="out", rate=0.05, bits=1,
                             offset=600, match={"proto": "tcp", "port": 988})
    try:
        ok(tb, "run", "b")
        wait_stopped(tb)
    finally:
        if fault is not None:
            tb.fault.delete(fault["id"])
    r = lst(tb, "show_error", "clients")
    assert r.rc == 0 and r.out.endswith("Total 1 error nodes in clients\n"), r
    m = re.search(rf"12345-{C1}: \[Session (\d+) brw errors, 0 ping errors\] "
                  r"\[RPC: \d+ errors, \d+ dropped, \d+ expired\]\n", r.err)
    assert m and int(m.group(1)) >= 1, r.err


def test_ping_batch_and_its_rate(topology: Any) -> None:
    """A ping test of 400 RPCs (4 units x 100): the server received 400 test requests, the
    client counts no ping error; ``stat --rate --read`` prints only the [R] rate line."""
    tb = topology
    setup(tb, ["--loop", "100", "--concurrency", "4", "ping"])
    ok(tb, "run", "b")
    wait_stopped(tb)
    r = lst(tb, "show_error", "--session", "clients", "servers")
    assert r.out.endswith("Total 0 error nodes in servers\n") and r.err == "", r
    ok(tb, "run", "b")
    out = ok(tb, "stat", "--count", "1", "--delay", "1", "--rate", "--read", "servers")
    assert re.fullmatch(r"\[LNet Rates of servers\]\n\[R\] Avg: \d+ +RPC/s Min: \d+ +RPC/s "
                        r"Max: \d+ +RPC/s\n", out), out


@pytest.mark.slow
def test_an_idle_console_ends_the_session_everywhere(topology: Any) -> None:
    """``new_session --timeout 5``: with no lst command for 5 s the console's pinger (every
    8 s) ends the session on its nodes; the next command finds none. The nodes are free for
    another console's session at once (no EBUSY)."""
    tb = topology
    assert ok(tb, "new_session", "--timeout", "5", "short").endswith("TIMEOUT: 5 FORCE: No\n")
    ok(tb, "add_group", "all", C1, S1)
    tb.advance(15.0)
    r = lst(tb, "list_group")
    assert (r.rc, r.err) == (255, "No session exists\n")
    r = tb.node("c1").exec(["env", "LST_SESSION=7", "lst", "new_session", "other"])
    assert r.rc == 0, r
    r = tb.node("c1").exec(["env", "LST_SESSION=7", "lst", "add_group", "s", S1])
    assert (r.rc, r.out) == (0, f"{S1} are added to session\n"), r


def test_a_node_in_another_session_is_busy(topology: Any) -> None:
    tb = topology
    setup(tb)
    r = tb.node("c1").exec(["env", "LST_SESSION=7", "lst", "new_session", "rival"])
    assert r.rc == 0, r
    r = tb.node("c1").exec(["env", "LST_SESSION=7", "lst", "add_group", "g", S1])
    assert r.rc == 253 and r.err == (
        f"operation create session failed on 12345-{S1}: Device or resource busy\n"
        "No nodes added successfully, deleting group g\n"), r


@pytest.mark.mininet_only("the lst program's own output stream")
def test_lst_stat_streams_until_interrupted(topology: Any) -> None:
    """The lst program prints a block per --delay and runs until interrupted, as lst does."""
    import subprocess

    from testbed import sh

    tb = topology
    setup(tb, ["brw", "read", "size=64k"])
    ok(tb, "run", "b")
    node = tb.node("con")
    env = {**node.exec_env(), "LST_SESSION": KEY}
    proc = subprocess.Popen(sh.ns_argv(["lst", "stat", "--delay", "1", "clients"],
                                       node.host_pid), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(12)]  # type: ignore[union-attr]
        assert proc.poll() is None  # still running: no --count
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert lines[0] == "[LNet Rates of clients]\n" and lines[6] == "[LNet Rates of clients]\n"
