"""Property-based hostile CLI suite (issue 27, "What to build"): Hypothesis builds command
lines for every verb a user runs against a sim testbed -- the verb's own words and options,
mixed with random and boundary values (empty, negative, NaN, past each documented limit,
5,000-character and control-character strings, NIDs near and far) -- and each must pass
``clikit.assert_clean``: success or one ``testbed: error:`` line, no traceback, bounded output,
within ``MAX_SECONDS``; the testbed's ``status`` still answers after each.

Left out of the generated lines, because what they do is the point, not a refusal: ``up``,
``down``, ``clean`` (others' testbeds), ``events --follow`` and ``lst --watch`` (run until
Ctrl-C), ``report`` and ``explore`` (minutes of work by design; their argument errors are
probed in test_cli_probes.py), the fault kinds ``kill``/``stop``/``restart`` (a dead node is
items 5's, branch harden-a). CI runs a fixed, derandomized budget (``BUDGET``, < 30 s here);
``HOSTILE_EXAMPLES=N`` runs N examples per test (a longer run, as a benchmark would).
"""

from __future__ import annotations

import os

from clikit import SimCli, assert_clean, sim_cli  # noqa: F401 (sim_cli: a fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.limits import MAX_ARG_STRLEN

#: fixed seed, no per-example deadline (clikit bounds each command), bounded count
BUDGET = settings(derandomize=True, deadline=None, database=None,
                  max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "60")),
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow, HealthCheck.data_too_large])

#: values at and past the edges: numbers, names, NIDs, sizes (5,000 characters, one past
#: an argument's 128 KiB), control characters
EDGES = st.sampled_from([
    "", "0", "-1", "1", "3", "nan", "inf", "-inf", "1e400", "0x10", "1000000", "1000001",
    "1048576", "1048577", "4294967296", "9" * 30, "c1", "s1", "x1", "c9", "eth0", "eth1",
    "lo", "any", "10.10.0.2@tcp", "10.10.0.99@tcp", "0@lo", "10.10.0.[1-3]@tcp", "tcp",
    "tcp1", "o2ib", "@tcp", "10.10.0.2@", "-", "--", "-v", "--json", "\x00", "\t", "a b",
    "é", "'", '"', "\\", "y" * 5000, "z" * (MAX_ARG_STRLEN // 2),
])
WORD = EDGES | st.text(max_size=12)
NODE = st.sampled_from(["c1", "s1", "x1"]) | WORD


def _lnetctl() -> st.SearchStrategy[list[str]]:
    head = st.sampled_from([["net", "show"], ["net", "add"], ["peer", "show"], ["peer", "add"],
                            ["route", "show"], ["route", "add"], ["ping"], ["discover"],
                            ["stats", "show"], ["global", "show"], ["set"], ["udsp", "add"],
                            ["export"], ["import"], ["debug", "recovery"], ["fault"], []])
    opts = st.sampled_from(["--net", "--nid", "--if", "--gateway", "--hop", "--priority",
                            "--prim_nid", "--timeout", "-v", "--verbose", "--src", "--dst",
                            "--count", "--json"])
    return st.tuples(head, st.lists(opts | WORD, max_size=6)).map(lambda t: t[0] + t[1])


def _fault_words() -> st.SearchStrategy[list[str]]:
    kind = st.sampled_from(["loss", "delay", "reorder", "duplicate", "corrupt", "stall", "rst",
                            "bandwidth", "blackhole", "carrier", "flap", "partition"]) | WORD
    key = st.sampled_from(["node", "rate", "delay", "iface", "direction", "name", "seed",
                           "start", "at", "duration", "every", "repeat", "p", "r", "a", "b",
                           "match.type", "match.dst_nid", "match.portal", "match", "bw"]) | WORD
    pair = st.tuples(key, WORD).map(lambda kv: f"{kv[0]}={kv[1]}")
    return st.tuples(kind, st.lists(pair | WORD, max_size=6)).map(lambda t: [t[0], *t[1]])


def command_lines(name: str) -> st.SearchStrategy[list[str]]:
    """One command line of a verb run against testbed ``name`` (or a bad -n)."""
    n = st.just(["-n", name]) | st.tuples(st.just("-n"), WORD).map(list) | st.just([])
    verbs = st.one_of(
        st.tuples(st.just(["status"]), st.lists(st.sampled_from(["--json", "--node"]) | NODE,
                                                max_size=3)),
        st.tuples(st.just(["clock"]), st.lists(st.sampled_from(["show", "advance"]) | EDGES,
                                               max_size=2)),
        st.tuples(st.just(["lnetctl"]), st.tuples(NODE, _lnetctl()).map(
            lambda t: [t[0], *t[1]])),
        st.tuples(st.just(["lctl"]), st.tuples(NODE, st.lists(st.sampled_from(
            ["list_nids", "ping", "net_drop_add", "net_delay_list", "set_param", "get_param",
             "which_nid", "network"]) | WORD, max_size=4)).map(lambda t: [t[0], *t[1]])),
        st.tuples(st.just(["exec"]), st.lists(NODE | st.sampled_from(
            ["lnetctl", "lctl", "lst", "sh", "-c", "net show"]), max_size=4)),
        st.tuples(st.just(["link"]), st.lists(NODE | st.sampled_from(["up", "down"]),
                                              max_size=4)),
        st.tuples(st.just(["traffic"]), st.lists(NODE | st.sampled_from(
            ["--to", "--count", "--size", "--op", "put", "get", "--json"]), max_size=7)),
        st.tuples(st.just(["lst"]), st.tuples(NODE, st.lists(st.sampled_from(
            ["new_session", "end_session", "show_session", "add_group", "list_group",
             "add_batch", "add_test", "run", "stop", "stat", "ping", "--help"]) | WORD,
            max_size=5)).map(lambda t: [t[0], *t[1]])),
        st.tuples(st.just(["fault", "add"]), _fault_words()),
        st.tuples(st.just(["fault"]), st.lists(st.sampled_from(["list", "del", "clear",
                                                                "--json"]) | WORD, max_size=3)),
        st.tuples(st.just(["events"]), st.lists(st.sampled_from(
            ["--node", "--kind", "--since", "--json", "--rundir"]) | NODE, max_size=4)),
        st.tuples(st.just(["check"]), st.lists(st.sampled_from(
            ["--events", "--max", "--rundir", "/dev/null", "/"]) | EDGES, max_size=3)),
        st.tuples(st.just(["capture"]), st.lists(NODE | st.sampled_from(
            ["--summary", "/dev/zero", "/dev/null", "-o", "--for", "--filter", "--json"]),
            max_size=4)),
    )
    return st.tuples(verbs, n).map(lambda t: [*t[0][0], *t[1], *t[0][1]])


def _tame(argv: list[str]) -> list[str]:
    """A valid number that asks for a long run (``clock advance 1000000``, ``traffic --count
    1000000``: seconds of real work, not a refusal) made small; out-of-range ones stay (the
    fixed probes of test_cli_probes.py keep the limits themselves)."""
    out = []
    for w in argv:
        try:
            big = 5 < float(w) <= 1_000_000
        except ValueError:
            big = False
        out.append("5" if big else w)
    return out


@BUDGET
@given(data=st.data())
def test_every_verb_answers_in_one_line_or_succeeds(sim_cli: SimCli,  # noqa: F811
                                                    data: st.DataObject) -> None:
    argv = _tame(data.draw(command_lines(sim_cli.name), label="argv"))
    assert_clean(sim_cli.call(argv))
    status = sim_cli.call(["status", "-n", sim_cli.name, "--json"])
    assert status.rc == 0 and sim_cli.name in status.out, status


@BUDGET
@given(words=st.lists(WORD | st.sampled_from(["net", "show", "add", "--net", "-v", "lnetctl",
                                              "lctl", "lst", "fault", "status"]), max_size=6))
def test_random_words_after_testbed(sim_cli: SimCli, words: list[str]) -> None:  # noqa: F811
    """Any words at all after ``testbed``: a usage error or a refusal, in one line."""
    if words[:1] in (["up"], ["down"], ["clean"], ["report"], ["explore"], ["sim"]) \
            or {"--follow", "-f", "--watch"} & set(words):
        return  # (the module doc: left out on purpose)
    assert_clean(sim_cli.call(_tame(words)))
