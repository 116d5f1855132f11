"""testbed.plan: YAML -> frozen plan; every refusal names file, line and YAML path."""

from __future__ import annotations

import dataclasses
import ipaddress
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.plan import (
    NAME_RE,
    TUNABLES,
    Plan,
    TopologyError,
    load_topology,
    parse_topology,
)

NETS = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp, subnet: 10.11.0.0/24}
"""  # lines 1-3 of most documents below


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "topo.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def refuse(tmp_path: Path, text: str, line: int | None, field: str, count: int = 1) -> str:
    """Load ``text`` from a file, expect ``count`` problems, the first at ``line``/``field``,
    each on one line; return the first one's reason."""
    path = write(tmp_path, text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    err = info.value
    where = f"{path}:{line}" if line is not None else str(path)
    prefix = f"{where}: {field}: " if field else f"{where}: "
    assert str(err).startswith(prefix), str(err)
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert len(err.errors) == count, str(err)
    assert str(err).splitlines() == [str(e) for e in err.errors]
    return err.reason


# --------------------------------------------------------------------------- accepted documents


def test_default_topology_loads() -> None:
    plan = load_topology()
    assert isinstance(plan, Plan)
    assert (plan.name, plan.source) == ("mr2", "<default>")
    assert [(s.name, s.lnet, str(s.subnet)) for s in plan.segments] == [
        ("lan0", "tcp", "10.10.0.0/24"), ("lan1", "tcp", "10.11.0.0/24")]
    c1, s1 = plan.node("c1"), plan.node("s1")
    assert [(i.name, i.segment, str(i.ip), i.prefixlen) for i in c1.interfaces] == [
        ("eth0", "lan0", "10.10.0.1", 24), ("eth1", "lan1", "10.11.0.1", 24)]
    assert c1.nids == ("10.10.0.1@tcp", "10.11.0.1@tcp")
    assert s1.nids == ("10.10.0.2@tcp", "10.11.0.2@tcp")
    assert (c1.peers, s1.peers) == (("s1",), ("c1",))
    expected = {"health_sensitivity": 100, "retry_count": 2, "transaction_timeout": 10}
    assert dict(plan.tunables) == expected == dict(c1.tunables) == dict(s1.tunables)
    assert plan.segment("lan1").subnet == ipaddress.IPv4Network("10.11.0.0/24")


def test_plan_is_frozen_and_lookup_misses_raise_keyerror() -> None:
    plan = load_topology()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.name = "x"  # type: ignore[misc]
    with pytest.raises(KeyError):
        plan.node("nope")
    with pytest.raises(KeyError):
        plan.segment("nope")


def test_name_override_yaml_name_and_file_stem(tmp_path: Path) -> None:
    body = NETS + "nodes: {c1: {interfaces: [lan0]}}\n"
    assert load_topology(write(tmp_path, body)).name == "topo"
    assert load_topology(write(tmp_path, "name: yy\n" + body)).name == "yy"
    assert load_topology(write(tmp_path, "name: yy\n" + body), name="zz").name == "zz"
    assert parse_topology(body).name == "default"
    assert parse_topology(body, source="/x/big-mr.yaml").name == "big-mr"


def test_explicit_addresses_are_reserved_before_auto_assignment() -> None:
    plan = parse_topology(NETS + textwrap.dedent("""\
        nodes:
          c1: {interfaces: [lan0, lan1]}
          s1: {interfaces: [{lan0: 10.10.0.1}, lan1]}
          s2: {interfaces: [lan0, {lan1: 10.11.0.2}]}
        """))
    assert plan.node("c1").nids == ("10.10.0.2@tcp", "10.11.0.1@tcp")
    assert plan.node("s1").nids == ("10.10.0.1@tcp", "10.11.0.3@tcp")
    assert plan.node("s2").nids == ("10.10.0.3@tcp", "10.11.0.2@tcp")


def test_node_tunables_override_global_in_stable_order() -> None:
    plan = parse_topology(textwrap.dedent("""\
        global: {transaction_timeout: 10, health_sensitivity: 100, retry_count: 2}
        networks: {lan0: {lnet: tcp1, subnet: 10.10.0.0/24}}
        nodes:
          c1: {interfaces: [lan0]}
          s1: {interfaces: [lan0], global: {discovery: 0, retry_count: 3}}
        """))
    order = list(TUNABLES)
    assert plan.node("c1").tunables == plan.tunables
    s1 = plan.node("s1").tunables
    assert dict(s1) == {"transaction_timeout": 10, "health_sensitivity": 100,
                        "retry_count": 3, "discovery": 0}
    assert [k for k, _ in s1] == sorted((k for k, _ in s1), key=order.index)
    assert plan.node("s1").nids == ("10.10.0.2@tcp1",)


def test_net_names_are_canonical_and_block_style_works() -> None:
    plan = parse_topology(textwrap.dedent("""\
        networks:
          lan0: {lnet: tcp0, subnet: 10.10.0.0/30}
          ib: {lnet: o2ib3, subnet: 192.168.0.0/16}
        nodes:
          a:
            interfaces:
              - lan0
              - ib
          b: {interfaces: [lan0]}
        """))
    assert plan.segment("lan0").lnet == "tcp"
    assert plan.node("a").nids == ("10.10.0.1@tcp", "192.168.0.1@o2ib3")
    assert plan.node("b").nids == ("10.10.0.2@tcp",)


def test_merge_key_is_not_a_duplicate() -> None:
    plan = parse_topology(NETS + textwrap.dedent("""\
        nodes:
          c1: &base {interfaces: [lan0, lan1], global: {retry_count: 1}}
          c2:
            <<: *base
            global: {retry_count: 0}
        """))
    assert dict(plan.node("c2").tunables) == {"retry_count": 0}
    assert plan.node("c2").nids == ("10.10.0.2@tcp", "10.11.0.2@tcp")


# --------------------------------------------------------------------------- refusals


def test_yaml_syntax_error(tmp_path: Path) -> None:
    text = NETS + "nodes:\n  c1: {interfaces: [lan0]}\n  s1: x: y\n"
    reason = refuse(tmp_path, text, 6, "")
    assert reason == "YAML syntax error: mapping values are not allowed here"


def test_yaml_syntax_error_unclosed_names_where_it_opened(tmp_path: Path) -> None:
    reason = refuse(tmp_path, NETS + "nodes:\n  c1: {interfaces: [lan0\n", 6, "")
    assert reason.startswith("YAML syntax error: while parsing a flow sequence (line 5): ")


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    assert "got a list" in refuse(tmp_path, "- a\n- b\n", 1, "")
    assert "got nothing" in refuse(tmp_path, "# empty\n", 1, "")


def test_unknown_top_level_key_lists_allowed(tmp_path: Path) -> None:
    reason = refuse(tmp_path, NETS + "nodez: {}\n", 4, "nodez", count=2)
    assert reason == "unknown key 'nodez' (did you mean 'nodes'?)"
    reason = refuse(tmp_path, NETS + "nodes: {c1: {interfaces: [lan0]}}\nzzz: 1\n", 5, "zzz")
    assert reason == "unknown key 'zzz' (allowed: name, global, networks, nodes, faults, hosts)"


def test_missing_required_key(tmp_path: Path) -> None:
    assert refuse(tmp_path, NETS, 1, "") == "missing required key 'nodes'"


def test_unknown_node_key(tmp_path: Path) -> None:
    reason = refuse(tmp_path, NETS + "nodes:\n  c1:\n    interfaces: [lan0]\n    nis: []\n",
                    7, "nodes.c1.nis")
    assert reason == ("unknown key 'nis' (allowed: interfaces, global, peers, udsp, lnet, "
                      "routing, buffers, routes, multi_rail, host)")


def test_undefined_segment(tmp_path: Path) -> None:
    reason = refuse(tmp_path, NETS + "nodes:\n  c1:\n    interfaces:\n      - lan0\n      - lan9\n",
                    8, "nodes.c1.interfaces[1]")
    assert reason == "unknown network 'lan9' (defined: lan0, lan1; did you mean 'lan1'?)"


def test_undefined_segment_in_address_mapping(tmp_path: Path) -> None:
    reason = refuse(tmp_path, NETS + "nodes:\n  c1: {interfaces: [{lan7: 10.0.0.1}]}\n",
                    5, "nodes.c1.interfaces[0]")
    assert "unknown network 'lan7'" in reason


@pytest.mark.parametrize(("subnet", "words"), [
    ("10.11.0.0/33", "not an IPv4 network"),
    ("fe80::/64", "not an IPv4 network"),
    ("10.11.0.1/24", "host bits set (did you mean 10.11.0.0/24?)"),
    ("10.11.0.0/31", "prefix must be /30 or shorter"),
    ("10.10.0.0/16", "overlaps network 'lan0'"),
])
def test_bad_subnet(tmp_path: Path, subnet: str, words: str) -> None:
    text = NETS.replace("10.11.0.0/24", subnet) + "nodes: {c1: {interfaces: [lan0]}}\n"
    assert words in refuse(tmp_path, text, 3, "networks.lan1.subnet")


@pytest.mark.parametrize(("subnet6", "words"), [
    ("10.11.0.0/24", "not an IPv6 network"),
    ("2001:db8::1/64", "not an IPv6 network"),
    ("fe80::/64", "loopback or link-local"),
    ("2001:db8:1::/124", "smaller than subnet 10.11.0.0/24"),
    ("2001:db8::/48", "overlaps network 'lan0' (2001:db8::/64)"),
])
def test_bad_subnet6(tmp_path: Path, subnet6: str, words: str) -> None:
    text = NETS.replace("10.10.0.0/24}", '10.10.0.0/24, subnet6: "2001:db8::/64"}').replace(
        "10.11.0.0/24}", f'10.11.0.0/24, subnet6: "{subnet6}"}}')
    assert words in refuse(tmp_path, text + "nodes: {c1: {interfaces: [lan0]}}\n", 3,
                           "networks.lan1.subnet6")


def test_subnet6_gives_each_interface_its_ipv4_host_offset(tmp_path: Path) -> None:
    text = NETS.replace("10.11.0.0/24}", '10.11.0.0/24, subnet6: "2001:db8:11::/64"}')
    text += "nodes:\n  c1: {interfaces: [lan0, lan1]}\n  c2: {interfaces: [{lan1: 10.11.0.9}]}\n"
    plan = load_topology(write(tmp_path, text))
    c1, c2 = plan.node("c1").interfaces, plan.node("c2").interfaces
    assert (c1[0].ip6, c1[1].ip6, c1[1].prefixlen6) == (
        None, ipaddress.IPv6Address("2001:db8:11::1"), 64)
    assert c2[0].ip6 == ipaddress.IPv6Address("2001:db8:11::9")


def test_subnet_wrong_type(tmp_path: Path) -> None:
    text = "networks:\n  lan0:\n    lnet: tcp\n    subnet: 42\nnodes: {c1: {interfaces: [lan0]}}\n"
    assert "expected a string, got an integer" in refuse(tmp_path, text, 4,
                                                          "networks.lan0.subnet")


@pytest.mark.parametrize("lnet", ["tcpx", "lo", "ib0", "tcp70000"])
def test_bad_lnet_net_name(tmp_path: Path, lnet: str) -> None:
    text = NETS.replace("lnet: tcp, subnet: 10.11", f"lnet: {lnet}, subnet: 10.11")
    text += "nodes: {c1: {interfaces: [lan0]}}\n"
    assert f"bad LNet net '{lnet}'" in refuse(tmp_path, text, 3, "networks.lan1.lnet")


@pytest.mark.parametrize(("addr", "words"), [
    ("10.10.0.5", "outside network 'lan1' (10.11.0.0/24)"),
    ("10.11.0.0", "network address"),
    ("10.11.0.255", "broadcast address"),
    ("10.11.0.300", "bad IPv4 address"),
])
def test_bad_explicit_address(tmp_path: Path, addr: str, words: str) -> None:
    text = NETS + f"nodes:\n  c1:\n    interfaces:\n      - lan1:\n          {addr}\n"
    assert words in refuse(tmp_path, text, 8, "nodes.c1.interfaces[0].lan1")


def test_duplicate_address_names_both_places(tmp_path: Path) -> None:
    text = NETS + textwrap.dedent("""\
        nodes:
          c1: {interfaces: [{lan1: 10.11.0.7}]}
          s1: {interfaces: [lan0, {lan1: 10.11.0.7}]}
        """)
    reason = refuse(tmp_path, text, 6, "nodes.s1.interfaces[1].lan1")
    assert reason == ("duplicate address 10.11.0.7: also given at nodes.c1.interfaces[0].lan1"
                      " (line 5)")


def test_same_segment_twice_on_one_node(tmp_path: Path) -> None:
    reason = refuse(tmp_path, NETS + "nodes:\n  c1: {interfaces: [lan0, lan1, lan0]}\n",
                    5, "nodes.c1.interfaces[2]")
    assert "network 'lan0' already used by nodes.c1.interfaces[0]" in reason
    assert "Mininet" in reason


def test_segment_runs_out_of_addresses(tmp_path: Path) -> None:
    text = "networks: {n: {lnet: tcp, subnet: 10.0.0.0/30}}\nnodes:\n" + "".join(
        f"  h{i}: {{interfaces: [n]}}\n" for i in range(3))
    assert "no free address left" in refuse(tmp_path, text, 5, "nodes.h2.interfaces[0]")


@pytest.mark.parametrize(("text", "line", "field"), [
    ("name: Big_Testbed\n" + NETS + "nodes: {c1: {interfaces: [lan0]}}\n", 1, "name"),
    (NETS + "nodes:\n  C1: {interfaces: [lan0]}\n", 5, "nodes.C1"),
    (NETS + "nodes:\n  " + "n" * 33 + ": {interfaces: [lan0]}\n", 5, "nodes." + "n" * 33),
    ("networks:\n  lan 0: {lnet: tcp, subnet: 10.0.0.0/24}\nnodes: {c1: {interfaces: ['lan 0']}}\n",
     2, "networks['lan 0']"),
])
def test_bad_names(tmp_path: Path, text: str, line: int, field: str) -> None:
    assert "must match" in refuse(tmp_path, text, line, field)


def test_bad_name_argument_and_file_stem(tmp_path: Path) -> None:
    text = NETS + "nodes: {c1: {interfaces: [lan0]}}\n"
    path = write(tmp_path, text)
    with pytest.raises(TopologyError, match=r"topo.yaml: name: bad testbed name 'a/b'"):
        load_topology(path, name="a/b")
    bad = tmp_path / "My Topo.yaml"
    bad.write_text(text)
    with pytest.raises(TopologyError, match=r"name: bad testbed \(from the file name"):
        load_topology(bad)


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    ("networks: [lan0]\nnodes: {}\n", 1, "networks", "expected a mapping, got a list"),
    (NETS + "nodes:\n  c1: {interfaces: lan0}\n", 5, "nodes.c1.interfaces",
     "expected a list, got a string"),
    (NETS + "nodes:\n  c1: {interfaces: [7]}\n", 5, "nodes.c1.interfaces[0]",
     "expected a network name or a one-key mapping"),
    (NETS + "nodes:\n  c1: {interfaces: [{lan0: 10.10.0.9, lan1: 10.11.0.9}]}\n", 5,
     "nodes.c1.interfaces[0]", "with 2 keys"),
    (NETS + "nodes:\n  c1: {interfaces: [{lan0: 167772161}]}\n", 5,
     "nodes.c1.interfaces[0].lan0", "expected a string, got an integer"),
    (NETS + "nodes:\n  c1:\n", 5, "nodes.c1", "expected a mapping, got nothing"),
    (NETS + "nodes:\n  c1: {interfaces: [{lan0: }]}\n", 5, "nodes.c1.interfaces[0].lan0",
     "expected a string, got nothing"),
    (NETS + "nodes:\n  c1: {interfaces: []}\n", 5, "nodes.c1.interfaces", "at least one"),
    (NETS + "nodes: {}\n", 4, "nodes", "at least one node"),
    ("networks: {}\nnodes: {c1: {}}\n", 1, "networks", "at least one network"),
    (NETS + "nodes:\n  c1: {interfaces: [lan0], peers: c2}\n", 5, "nodes.c1.peers",
     "expected a list"),
])
def test_wrong_types_and_empties(tmp_path: Path, text: str, line: int, field: str,
                                 words: str) -> None:
    assert words in refuse(tmp_path, text, line, field)


@pytest.mark.parametrize(("text", "line", "field"), [
    (NETS + "nodes:\n  c1: {interfaces: [lan0]}\n  c1: {interfaces: [lan1]}\n", 6, "nodes.c1"),
    ("networks:\n  lan0:\n    lnet: tcp\n    lnet: tcp1\n    subnet: 10.0.0.0/24\n"
     "nodes: {c1: {interfaces: [lan0]}}\n", 4, "networks.lan0.lnet"),
    ("global: {retry_count: 1, retry_count: 2}\n" + NETS
     + "nodes: {c1: {interfaces: [lan0]}}\n", 1, "global.retry_count"),
])
def test_duplicate_keys(tmp_path: Path, text: str, line: int, field: str) -> None:
    assert "duplicate key" in refuse(tmp_path, text, line, field)


def test_duplicate_key_message_names_first_line(tmp_path: Path) -> None:
    text = NETS + "nodes:\n  c1: {interfaces: [lan0]}\n  c1: {interfaces: [lan1]}\n"
    assert refuse(tmp_path, text, 6, "nodes.c1") == "duplicate key 'c1' (first at line 5)"


@pytest.mark.parametrize(("tunables", "words"), [
    ("{retry_cnt: 1}", "unknown key 'retry_cnt' (did you mean 'retry_count'?)"),
    ("{health_sensitivity: 1001}", "health_sensitivity must be in 0..1000, got 1001"),
    ("{router_sensitivity: 101}", "router_sensitivity must be in 0..100"),
    ("{response_tracking: 4}", "response_tracking must be in 0..3"),
    ("{discovery: 2}", "discovery must be in 0..1"),
    ("{max_recovery_ping_interval: 0}", "must be in 1.."),
    ("{recovery_limit: -1}", "recovery_limit must be in 0.."),
    ("{tiny_buffers: 0}", "tiny_buffers must be in 1.."),
    ("{discovery: yes}", "expected an integer in 0..1, got a boolean"),
    ("{retry_count: '2'}", "got a string"),
    ("{numa_range: 1.5}", "got a number"),
])
def test_bad_tunables(tmp_path: Path, tunables: str, words: str) -> None:
    text = NETS + f"nodes:\n  c1:\n    interfaces: [lan0]\n    global: {tunables}\n"
    key = tunables.strip("{}").split(":")[0]
    assert words in refuse(tmp_path, text, 7, f"nodes.c1.global.{key}")


def test_tunable_cross_checks_follow_lnet(tmp_path: Path) -> None:
    text = "global: {retry_count: 2, transaction_timeout: 10}\n" + NETS + textwrap.dedent("""\
        nodes:
          c1:
            interfaces: [lan0]
            global: {transaction_timeout: 2}
        """)
    assert "must be greater than retry_count (2)" in refuse(
        tmp_path, text, 8, "nodes.c1.global.transaction_timeout")
    text = "global: {health_sensitivity: 0, retry_count: 1}\n" + NETS \
        + "nodes: {c1: {interfaces: [lan0]}}\n"
    assert "retry_count must be 0" in refuse(tmp_path, text, 1, "global.retry_count")


@pytest.mark.parametrize(("peers", "line", "field", "words"), [
    (["c9"], 9, "nodes.c1.peers[0]", "unknown node 'c9' (defined: s1, c1)"),
    (["c1"], 9, "nodes.c1.peers[0]", "cannot be its own peer"),
    (["s1", "s1"], 10, "nodes.c1.peers[1]", "peer 's1' listed twice"),
    ([3], 9, "nodes.c1.peers[0]", "expected a string, got an integer"),
])
def test_bad_peers(tmp_path: Path, peers: list[object], line: int, field: str,
                   words: str) -> None:
    items = "".join(f"      - {p}\n" for p in peers)
    text = NETS + "nodes:\n  s1: {interfaces: [lan0]}\n  c1:\n    interfaces: [lan0]\n" \
        "    peers:\n" + items
    assert words in refuse(tmp_path, text, line, field)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read topology"):
        load_topology(tmp_path / "missing.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(TopologyError, match="cannot read topology"):
        load_topology(bad)


# --------------------------------------------------------------------------- robustness

MALFORMED = [
    "", "~", "[", "{", "a: [1", "a: b: c", "\t- x", "a: &x [*x]", "? [1, 2]\n: 3",
    "a: 2020-13-45", "a: !!python/object:os.system x", "a: !custom 1", "a: \x07",
    "---\na: 1\n---\nb: 2\n", "<<: 1", "a: *nope", "a: !!binary '%%%'", "[[[[[[]]]]]]",
    "networks: {a: {lnet: tcp, subnet: 10.0.0.0/24}}\nnodes: {b: {interfaces: [{}]}}",
    "networks: {a: {lnet: [tcp], subnet: {x: 1}}}\nnodes: {b: {interfaces: [a]}}",
    "networks: {a: {lnet: tcp, subnet: 10.0.0.0/24}}\nnodes: {b: {interfaces: [a], "
    "peers: [[1]]}}", "networks: {1: 2}\nnodes: {null: 1}", "name: 5\nnetworks: 1\nnodes: 1",
    "networks: !!set {a}\nnodes: !!omap [{a: 1}]", "x: 'line\nbreak'\n", "'a\u2028b': 1",
    "[" * 2000, "networks: {\u0085: 1}\nnodes: 1",
]


def assert_refused_cleanly(text: str) -> None:
    """Only TopologyError escapes; each problem one line naming the file, at most 20 shown."""
    try:
        parse_topology(text, source="fuzz.yaml")
    except TopologyError as e:
        lines = str(e).splitlines()
        assert all(ln.startswith("fuzz.yaml") for ln in lines[:20]), lines
        assert len(lines) == min(len(e.errors), 20) + (len(e.errors) > 20), lines
        assert [str(x) for x in e.errors[:20]] == lines[:20]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_corpus_only_raises_topologyerror_one_line(text: str) -> None:
    """Every file of the corpus is bad: accepting one fails the test (issue 14 item 3)."""
    with pytest.raises(TopologyError):
        parse_topology(text, source="fuzz.yaml")
    assert_refused_cleanly(text)


YAMLISH = st.text(alphabet=st.sampled_from(list("abc019 .:-[]{},&*!?|>'\"#\n\t/@<%\u2028\x85")),
                  max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_random_yamlish_text_only_raises_topologyerror(text: str) -> None:
    assert_refused_cleanly(text)


_DEFAULT_LINES = (Path(__file__).resolve().parents[2] / "topologies" / "default.yaml") \
    .read_text().splitlines()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_DEFAULT_LINES) - 1),
                          st.sampled_from(["drop", "dup", "cut", "junk"]),
                          st.text(max_size=6)), max_size=4))
def test_mutated_default_only_raises_topologyerror(edits: list[tuple[int, str, str]]) -> None:
    lines = list(_DEFAULT_LINES)
    for index, op, junk in edits:
        i = min(index, len(lines) - 1)
        if i < 0:
            break
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][: len(lines[i]) // 2]
        else:
            lines[i] += junk
    assert_refused_cleanly("\n".join(lines) + "\n")


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2000) | st.text(max_size=12)
    | st.sampled_from(["lan0", "tcp", "10.10.0.0/24", "10.10.0.3", "c1", "retry_count"]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "global", "networks", "nodes", "lan0", "c1", "lnet",
                         "subnet", "interfaces", "peers", "retry_count", "x"]), kids,
        max_size=4),
    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(JSONISH)
def test_random_structures_only_raise_topologyerror(data: object) -> None:
    assert_refused_cleanly(yaml.safe_dump(data))


def test_name_re_is_anchored_for_fullmatch() -> None:
    assert NAME_RE.fullmatch("mr2-x")
    assert not NAME_RE.fullmatch("mr2\n")
    assert not NAME_RE.fullmatch("2mr")


NUMA_TOPO = """\
name: numa
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp, subnet: 10.11.0.0/24}
nodes:
  c1:
    interfaces:
      - {lan0: {ip: 10.10.0.9, numa: 1}}
      - {lan1: {numa: 0}}
  s1: {interfaces: [lan0, {lan1: 10.11.0.50}]}
"""


def test_interface_numa_option() -> None:
    """snd-010 (emulated NUMA): `{lan0: {ip: A, numa: N}}` and `{lan0: {numa: N}}` forms."""
    plan = parse_topology(NUMA_TOPO)
    c1, s1 = plan.node("c1"), plan.node("s1")
    assert [(str(i.ip), i.numa) for i in c1.interfaces] == [("10.10.0.9", 1), ("10.11.0.1", 0)]
    assert [i.numa for i in s1.interfaces] == [None, None]


@pytest.mark.parametrize(("bad", "field", "reason"), [
    ("{lan1: {numa: -1}}", "nodes.c1.interfaces[1].lan1.numa", "integer 0..1023"),
    ("{lan1: {numa: yes}}", "nodes.c1.interfaces[1].lan1.numa", "integer 0..1023"),
    ("{lan1: {nuam: 1}}", "nodes.c1.interfaces[1].lan1.nuam", "unknown key 'nuam'"),
    ("{lan1: {ip: 10.10.0.3}}", "nodes.c1.interfaces[1].lan1", "outside network"),
])
def test_interface_numa_errors_name_line_and_field(bad: str, field: str, reason: str) -> None:
    """Bad per-interface options are refused with file:line and the YAML path."""
    with pytest.raises(TopologyError) as e:
        parse_topology(NUMA_TOPO.replace("{lan1: {numa: 0}}", bad))
    text = str(e.value)
    assert text.startswith("<string>:9: ") and field in text and reason in text


# --------------------------------------------------------------------------- faults (issue 5)


def test_faults_list_is_validated_item_by_item(tmp_path: Path) -> None:
    body = NETS + "nodes:\n  c1: {interfaces: [lan0, lan1]}\n  s1: {interfaces: [lan0]}\n"
    ok = load_topology(write(tmp_path, body + "faults:\n"
                             "  - {kind: flap, node: c1, iface: eth1, down: 2, up: 3}\n"))
    assert ok.faults[0]["kind"] == "flap" and ok.faults[0]["iface"] == "eth1"
    reason = refuse(tmp_path, body + "faults:\n  - {kind: loss, node: c1, rate: 0.1}\n"
                    "  - {kind: carrier, node: s1, iface: eth1}\n", 9, "faults[1]")
    assert reason == "carrier: node s1 has no interface eth1 (has eth0)"
    assert refuse(tmp_path, body + "faults: {kind: loss}\n", 7, "faults") == (
        "expected a list, got a mapping")


# --------------------------------------------------------------------------- issue 4: config


CFG = NETS + """nodes:
  c1:
    interfaces: [lan0, lan1]
    global: {alive_router_check_interval: 5, lnet_peer_discovery_disabled: 1}
    peers: [s1, {prim_nid: 10.99.0.1@tcp, nids: [10.99.0.2@tcp], non_mr: false, lock_prim: true}]
    udsp:
      - {src: tcp, priority: 0}
      - {dst: "10.11.0.[1-9]@tcp", src: 10.10.0.1@tcp, idx: 0}
    lnet:
      global: {retry_count: 1}
  s1: {interfaces: [lan0]}
"""


def test_module_params_udsp_long_peers_and_lnet_block_reach_the_plan() -> None:
    """spec §0 module parameters, §7 UDSP rules, cfg-070 long-form peers, §9.4 raw block."""
    c1 = parse_topology("global: {forwarding: enabled, router_ping_timeout: 10}\n" + CFG
                        ).node("c1")
    assert dict(c1.module_params) == {"forwarding": "enabled", "router_ping_timeout": "10",
                                      "alive_router_check_interval": "5",
                                      "lnet_peer_discovery_disabled": "1"}
    assert c1.peers == ("s1",)
    assert c1.static_peers[0].argv() == ["peer", "add", "--prim_nid", "10.99.0.1@tcp", "--nid",
                                         "10.99.0.2@tcp", "--lock_prim"]
    assert c1.udsp[1] == ("udsp", "add", "--src", "10.10.0.1@tcp", "--dst", "10.11.0.[1-9]@tcp",
                          "--idx", "0")
    assert c1.lnet == {"global": {"retry_count": 1}}


@pytest.mark.parametrize(("old", "new", "field", "reason"), [
    ("alive_router_check_interval: 5", "router_ping_timeout: x", "nodes.c1.global."
     "router_ping_timeout", "not an integer"),
    ("{src: tcp, priority: 0}", "{src: tcp, rte: 1.2.3.4@tcp}", "nodes.c1.udsp[0]",
     "src and rte cannot be combined"),
    ("{src: tcp, priority: 0}", "{src: tcpx}", "nodes.c1.udsp[0]", "failed to parse src"),
    ("{src: tcp, priority: 0}", "{src: tcp, prio: 0}", "nodes.c1.udsp[0].prio",
     "unknown key 'prio'"),
    ("prim_nid: 10.99.0.1@tcp", "prim_nid: 10.99.0.1", "prim_nid", "bad NID"),
    ("lock_prim: true", "lock_prim: 1", "lock_prim", "expected true or false"),
    ("global: {retry_count: 1}", "globl: {}", "nodes.c1.lnet", "invalid key 'globl'"),
])
def test_issue4_keys_refuse_bad_values_with_line(old: str, new: str, field: str,
                                                 reason: str) -> None:
    assert old in CFG
    with pytest.raises(TopologyError) as e:
        parse_topology(CFG.replace(old, new))
    text = str(e.value)
    assert field in text and reason in text and text.startswith("<string>:")


# ------------------------------------------------------------------ routing keys (issue 4)
ROUTED = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp1, subnet: 10.20.0.0/24}
nodes:
  c1: {interfaces: [lan0], routes: [{net: tcp1, gateway: r1, hop: 1, priority: 2}]}
  r1: {interfaces: [lan0, lan1], routing: true, buffers: {tiny: 64, small: 128, large: 16}}
  s1: {interfaces: [lan1], routes: [{net: tcp, gateway: 10.20.0.1@tcp1}]}
"""


def test_routes_routing_and_buffers_reach_the_plan() -> None:
    """Spec §6.1/§6.2/§1.6: gateway by node name -> its NID on a shared net; by NID verbatim;
    `routing: true` = forwarding=enabled; buffers are the router pool sizes."""
    plan = parse_topology(ROUTED)
    c1, r1, s1 = plan.node("c1"), plan.node("r1"), plan.node("s1")
    assert [r.argv() for r in c1.routes] == [["route", "add", "--net", "tcp1", "--gateway",
                                              "10.10.0.2@tcp", "--hop", "1",
                                              "--priority", "2"]]
    assert s1.routes[0].argv() == ["route", "add", "--net", "tcp", "--gateway",
                                   "10.20.0.1@tcp1"]
    tun = dict(r1.tunables)
    assert tun["forwarding"] == 1 and (tun["tiny_buffers"], tun["small_buffers"],
                                       tun["large_buffers"]) == (64, 128, 16)
    names = [k for k, _ in r1.tunables]
    assert names.index("large_buffers") < names.index("forwarding")  # pools sized first
    assert "forwarding" not in dict(c1.tunables)


@pytest.mark.parametrize(("old", "new", "line", "field", "reason"), [
    ("gateway: r1, hop: 1", "gateway: r9, hop: 1", 5, "nodes.c1.routes[0].gateway",
     "unknown gateway node 'r9'"),
    ("net: tcp1, gateway: r1", "net: tcp, gateway: r1", 5, "nodes.c1.routes[0].net",
     "is local to node 'c1'"),
    ("hop: 1,", "hop: 0,", 5, "nodes.c1.routes[0].hop", "expected an integer in 1..255"),
    ("routing: true", "routing: 1", 6, "nodes.r1.routing", "expected true or false"),
    ("tiny: 64", "tiny: 0", 6, "nodes.r1.buffers.tiny", "expected an integer"),
    ("large: 16}", "huge: 16}", 6, "nodes.r1.buffers.huge", "unknown key 'huge'"),
    ("gateway: 10.20.0.1@tcp1", "gateway: 10.30.0.1@tcp2", 7, "nodes.s1.routes[0].gateway",
     "not on a net of node 's1'"),
    ("priority: 2}", "prio: 2}", 5, "nodes.c1.routes[0].prio", "unknown key 'prio'"),
    # issue 27 item 8: the node itself as gateway was "unknown gateway node 'c1' (did you
    # mean 'c1'?)"; by NID it was taken
    ("gateway: r1, hop: 1", "gateway: c1, hop: 1", 5, "nodes.c1.routes[0].gateway",
     "gateway 'c1' is node 'c1' itself: a route's gateway is another node"),
    ("gateway: 10.20.0.1@tcp1", "gateway: 10.20.0.2@tcp1", 7, "nodes.s1.routes[0].gateway",
     "gateway 10.20.0.2@tcp1 is a NID of node 's1' itself"),
])
def test_routing_keys_refused_with_line_and_field(old: str, new: str, line: int, field: str,
                                                  reason: str) -> None:
    assert old in ROUTED
    with pytest.raises(TopologyError) as info:
        parse_topology(ROUTED.replace(old, new), source="t.yaml")
    text = str(info.value)
    assert text.startswith(f"t.yaml:{line}: {field}: ") and reason in text, text
    assert "\n" not in text


def test_example_routing_topologies_validate() -> None:
    """topologies/routed.yaml, multihop.yaml, mr-routers.yaml are valid plans."""
    root = Path(__file__).resolve().parents[2] / "topologies"
    for name in ("routed", "multihop", "mr-routers"):
        plan = load_topology(root / f"{name}.yaml")
        routers = [n for n in plan.nodes if dict(n.tunables).get("forwarding")]
        assert len(routers) >= 2, name
        assert all(n.routes for n in plan.nodes if n not in routers), name


def test_multi_rail_false_reaches_the_plan_and_supervisor_verb(tmp_path: Path) -> None:
    """bck-025 (seed 000 Backwards Compatibility): ``multi_rail: false`` marks a downrev node;
    it is configured with ``lnetctl set multi_rail 0`` before ``lnet configure``."""
    path = write(tmp_path, NETS + "nodes:\n  c1: {interfaces: [lan0, lan1]}\n"
                 "  s1: {interfaces: [lan0], multi_rail: false}\n")
    plan = load_topology(path)
    assert plan.node("s1").multi_rail is False and plan.node("c1").multi_rail is True


@pytest.mark.parametrize(("node", "line", "field", "why"), [
    ("s1: {interfaces: [lan0], multi_rail: 0}", 6, "nodes.s1.multi_rail", "true or false"),
    ("s1: {interfaces: [lan0, lan1], multi_rail: false}", 6, "nodes.s1.interfaces[1]",
     "one NI per LNet net"),
])
def test_multi_rail_refusals_name_line_and_field(tmp_path: Path, node: str, line: int,
                                                 field: str, why: str) -> None:
    """A non-MR node with two NIs on one net, or a non-bool value, is refused (bck-025)."""
    reason = refuse(tmp_path, NETS + "nodes:\n  c1: {interfaces: [lan0]}\n  " + node + "\n",
                    line, field)
    assert why in reason


def test_discovery_and_compat_topologies_validate() -> None:
    """topologies/discovery.yaml (no static peers) and compat.yaml (a downrev node) load."""
    root = Path(__file__).resolve().parents[2] / "topologies"
    disc = load_topology(root / "discovery.yaml")
    assert all(not n.peers and not n.static_peers for n in disc.nodes)
    compat = load_topology(root / "compat.yaml")
    assert [n.name for n in compat.nodes if not n.multi_rail] == ["s2"]
