"""``lst``'s command surface and output, word for word, on the simulator (issue 13 item 1).

The lst verb runs the tool in the console node (``con``) against its console, as the ``lst``
program does against the kernel; every expected line below is lst.c's format string with the
values filled in (``jt_lst_*``, ``lst_print_error``, ``lst_print_transerr``, cfs_parser).
The same commands run through the real ``lst`` program on Mininet in tests/lutf/suite_selftest.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

import testbed
from testbed.base import Completed

TOPO = Path(__file__).parents[1] / "lutf" / "suite_selftest" / "lst3.yaml"
CON, C1, S1 = "10.20.0.1@tcp", "10.20.0.2@tcp", "10.20.0.3@tcp"


@pytest.fixture
def tb() -> Any:
    return testbed.up(TOPO, backend="sim", seed=3)


def lst(tb: Any, *argv: str, key: str | None = "77") -> Completed:
    env = [f"LST_SESSION={key}"] if key is not None else []
    return tb.node("con").verb("lst", [*env, *argv])


def ok(tb: Any, *argv: str) -> str:
    r = lst(tb, *argv)
    assert (r.rc, r.err) == (0, ""), (argv, r)
    return r.out


def test_session_lifecycle_and_its_errors(tb: Any) -> None:
    r = lst(tb, "new_session", "sess", key=None)
    assert (r.rc, r.err) == (255, "Can't find env LST_SESSION or value is not valid\n")
    assert ok(tb, "new_session", "--timeout", "600", "sess") == \
        "SESSION: sess FEATURES: 1 TIMEOUT: 600 FORCE: No\n"
    r = lst(tb, "new_session", "again")
    assert (r.rc, r.out, r.err) == (255, "", "session already exists\n")
    assert re.fullmatch(rf"sess ID: \d+@{CON}, KEY: 77 FEATURES: 1 NODES: 0\n",
                        ok(tb, "show_session"))
    r = lst(tb, "end_session", key="78")
    assert (r.rc, r.err) == (255, "Unmatched session key or not root\n")
    assert ok(tb, "new_session", "--force", "other") == \
        "SESSION: other FEATURES: 1 TIMEOUT: 300 FORCE: Yes\n"
    assert ok(tb, "end_session") == "session is ended\n"
    r = lst(tb, "show_session")
    assert (r.rc, r.err) == (255, "No session exists\n")
    assert ok(tb, "new_session") == \
        f"SESSION: root@{socket.gethostname()[:31]} FEATURES: 1 TIMEOUT: 300 FORCE: No\n"


@pytest.mark.parametrize(("argv", "err", "rc"), [
    (["new_session", "--timeout", "0", "x"], "Invalid timeout value\n", 255),
    (["new_session", "x" * 32], "Name size is limited to 31\n", 255),
    (["new_session", "--bogus"], "new_session: unrecognized option '--bogus'\n", 4),
    (["bogus"], "lst: 'bogus' is not a valid command. See 'lst --list-commands'.\n", 255),
])
def test_argument_errors(tb: Any, argv: list[str], err: str, rc: int) -> None:
    r = lst(tb, *argv)
    assert (r.rc, r.err) == (rc, err)
    if rc == 4:
        assert r.out == "Usage: lst new_session [--timeout TIME] [--force] [NAME]\n"


def test_groups_ranges_states_and_errors(tb: Any) -> None:
    ok(tb, "new_session", "s")
    assert ok(tb, "add_group", "nodes", "10.20.0.[2-3]@tcp") == \
        "10.20.0.[2-3]@tcp are added to session\n"
    r = lst(tb, "add_group", "nodes", C1)
    assert (r.rc, r.err) == (255, "group already exists\n")
    r = lst(tb, "add_group", "bad", "10.20.0.[3-2]@tcp")  # rc: lst_del_group's (0)
    assert r.rc == 0 and r.out == "Group is deleted\n"
    assert r.err == ('Syntax error in "10.20.0.[3-2]@tcp"\nIgnore invalid id list '
                     "10.20.0.[3-2]@tcp\nNo nodes added successfully, deleting group bad\n")
    r = lst(tb, "add_group", "gone", "10.20.0.99@tcp")  # nobody has that NID
    assert r.rc == 254 and r.out == "Group is deleted\n"
    assert re.fullmatch(r"create session RPC failed on 12345-10\.20\.0\.99@tcp: "
                        r"Unknown error -\d+\nNo nodes added successfully, deleting group "
                        r"gone\n", r.err)
    assert ok(tb, "list_group") == "1) nodes\nTotal 1 groups\n"
    assert ok(tb, "list_group", "nodes") == \
        "\tACTIVE\tBUSY\tDOWN\tUNKNOWN\tTOTAL\n\t2\t0\t0\t0\t2\tnodes\n"
    assert ok(tb, "list_group", "--all", "nodes") == (
        f"Group [ nodes ]\n\t12345-{C1}: Active\n\t12345-{S1}: Active\n"
        "Total 2 nodes [ nodes ]\n")
    assert ok(tb, "list_group", "--down", "nodes") == "Group [ nodes ]\nTotal 0 nodes [ nodes ]\n"
    assert ok(tb, "ping", "--group", "nodes") == (
        f"\t12345-{C1}: Active [session: s id: {CON}]\n"
        f"\t12345-{S1}: Active [session: s id: {CON}]\n")
    assert ok(tb, "update_group", "--remove", S1, "nodes") == ""
    assert ok(tb, "list_group", "nodes").endswith("\t1\t0\t0\t0\t1\tnodes\n")
    assert ok(tb, "del_group", "nodes") == "Group is deleted\n"
    r = lst(tb, "del_group", "nodes")
    assert (r.rc, r.err) == (255, "Can't find group in current session\n")


def test_batches_tests_run_query_stop(tb: Any) -> None:
    ok(tb, "new_session", "s")
    ok(tb, "add_group", "clients", C1)
    ok(tb, "add_group", "servers", S1)
    assert ok(tb, "add_batch", "bulk") == ""
    r = lst(tb, "add_batch", "bulk")
    assert (r.rc, r.err) == (255, "batch already exists\n")
    assert ok(tb, "add_test", "--batch", "bulk", "--loop", "30", "--concurrency", "2",
              "--from", "clients", "--to", "servers", "brw", "write", "size=64k",
              "check=full") == "Test was added successfully\n"
    assert ok(tb, "add_test", "--batch", "bulk", "--from", "clients", "--to", "servers",
              "ping") == "Test was added successfully\n"
    assert ok(tb, "list_batch") == "1) batch\n2) bulk\nTotal 2 batches\n"
    table = "\tACTIVE\tBUSY\tDOWN\tUNKNOWN\tTOTAL\nclient\t1\t0\t0\t0\t1\nserver\t1\t0\t0\t0\t1\n"
    assert ok(tb, "list_batch", "bulk") == (
        "Batch: bulk Tests: 2 State: 176\n" + table
        + "\tTest 1(brw) (loop: 30, concurrency: 2)\n" + table
        + "\tTest 2(ping) (loop: -1, concurrency: 1)\n" + table)
    assert ok(tb, "list_batch", "bulk", "--test", "2", "--server", "--all") == \
        f"\t12345-{S1}: Active\nTotal 1 nodes\n"
    assert ok(tb, "query", "bulk") == "bulk [0] is stopped\n"
    assert ok(tb, "run", "bulk") == "bulk is running now\n"
    assert ok(tb, "query", "bulk") == "bulk [0] is running\n"
    assert ok(tb, "list_batch", "bulk").startswith("Batch: bulk Tests: 2 State: 177\n")
    assert ok(tb, "query", "bulk", "--all") == f"12345-{C1} [Active]: Running\n"
    r = lst(tb, "add_test", "--batch", "bulk", "--from", "clients", "--to", "servers", "ping")
    assert (r.rc, r.err) == (255, "Invalid parameters list in command line\n")
    assert ok(tb, "stop", "bulk").endswith("Batch is stopped\n")
    assert ok(tb, "query", "bulk") == "bulk [0] is stopped\n"
    assert ok(tb, "show_error", "clients", "servers") == \
        "clients:\nTotal 0 error nodes in clients\nservers:\nTotal 0 error nodes in servers\n"


@pytest.mark.parametrize(("argv", "err"), [
    (["--from", "nosuch", "--to", "servers", "ping"],
     "Can't get count of nodes from nosuch: No such file or directory\n"),
    (["--from", "servers", "--to", "servers", "foo"],
     "Unknow test name foo\nFailed to add test (foo)\n"),
    (["--from", "servers", "--to", "servers", "brw", "size=2M"],
     "Size exceed limitation: 2097152 bytes\nFailed to add test (brw)\n"),
    (["--from", "servers", "--to", "servers", "brw", "check=x"],
     "Unknow flag x\nFailed to add test (brw)\n"),
    (["--from", "servers", "--to", "servers", "brw", "off=3"],
     "Invalid offset 3/3, it should be postive value and multiple of 8\n"
     "Failed to add test (brw)\n"),
    (["--from", "servers", "--to", "servers", "brw", "bogus"],
     "Unknow parameter: bogus\nFailed to add test (brw)\n"),
    (["--concurrency", "0", "--from", "servers", "--to", "servers", "ping"],
     "Invalid concurrency of test: 0\n"),
    (["--distribute", "1", "--from", "servers", "--to", "servers", "ping"],
     "Invalid distribution: 1\n"),
    (["--batch", "nosuch", "--from", "servers", "--to", "servers", "ping"],
     "Can't find test in current session\n"),
])
def test_add_test_errors(tb: Any, argv: list[str], err: str) -> None:
    ok(tb, "new_session", "s")
    ok(tb, "add_group", "servers", S1)
    r = lst(tb, "add_test", *argv)
    assert (r.rc, r.out, r.err) == (255, "", err)


def test_stat_blocks_and_their_options(tb: Any) -> None:
    """``[LNet Rates of G]`` / ``[LNet Bandwidth of G]`` from the second sample on, [R] then
    [W], Avg/Min/Max; ``--bw --write --max --mbs`` select parts and units."""
    ok(tb, "new_session", "s")
    ok(tb, "add_group", "clients", C1)
    ok(tb, "add_group", "servers", S1)
    ok(tb, "add_test", "--concurrency", "4", "--from", "clients", "--to", "servers", "brw",
       "read", "size=1M")
    ok(tb, "run")
    out = ok(tb, "stat", "--count", "2", "--delay", "1", "servers")
    rate = r"\[([RW])\] Avg: (\d+) +RPC/s Min: \d+ +RPC/s Max: \d+ +RPC/s\n"
    bw = r"\[([RW])\] Avg: ([\d.]+) +MiB/s Min: [\d.]+ +MiB/s Max: [\d.]+ +MiB/s \n"
    block = (r"\[LNet Rates of servers\]\n" + rate + rate
             + r"\[LNet Bandwidth of servers\]\n" + bw + bw)
    assert re.fullmatch(f"({block}){{2}}", out), out
    m = re.match(block, out)
    assert m and (m.group(1), m.group(3), m.group(5), m.group(7)) == ("R", "W", "R", "W")
    assert float(m.group(8)) > 100 * float(m.group(6))  # a read server sends the bulk
    out = ok(tb, "stat", "--count", "1", "--delay", "1", "--bw", "--write", "--max", "--mbs",
             "servers")
    assert re.fullmatch(r"\[LNet Bandwidth of servers\]\n\[W\] Max: [\d.]+ +MB/s  \n", out)
    r = lst(tb, "stat", "servers")
    assert r.rc == 255 and "give --count N" in r.err  # the verb cannot run forever
    r = lst(tb, "stat", "--delay", "0", "servers")
    assert (r.rc, r.err) == (255, "Invalid timeout or delay value\n")


def test_help_and_list_commands(tb: Any) -> None:
    assert ok(tb, "help").startswith("usage: lst [COMMAND] [OPTIONS]... [ARGS]\n")
    r = lst(tb, "help", "add_test")
    assert r.err == ("add_test: Usage: lst add_test [--batch BATCH] [--loop #] "
                     "[--concurrency #]  [--distribute #:#] [--from GROUP] [--to GROUP] "
                     "TEST...\n")
    cmds = ok(tb, "--list-commands").split()
    assert cmds[:3] == ["quit", "exit", "help"] and cmds[-1] == "add_test" and "stat" in cmds
