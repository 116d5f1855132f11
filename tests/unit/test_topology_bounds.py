"""Topology input under hostile sizes and shapes (issue 11 item 5, item 10's node limit) and
the loader's manners (issue 18: every error at once, did-you-mean, built-in names).

Each refusal is a ``TopologyError`` whose lines are one problem each, in bounded time and
memory: the alias bombs run in a child process with a 1 GiB address-space limit, so a
regression fails the test (MemoryError, or the timeout) instead of eating the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from testbed.plan import (
    MAX_NODES,
    TopologyError,
    builtin_names,
    builtin_topology,
    load_topology,
    parse_topology,
)
from testbed.plan.model import MAX_SHOWN
from testbed.plan.source import MAX_TOPOLOGY_BYTES

ROOT = Path(__file__).resolve().parents[2]

#: ~600 bytes: nine levels of nine aliases, 9**9 = 387,420,489 strings once expanded, in a
#: node's raw ``lnet:`` block, which the old loader copied into plain Python objects.
BOMB = textwrap.dedent("""\
    networks: {lan0: {lnet: tcp, subnet: 10.10.0.0/24}}
    nodes:
      c1:
        interfaces: [lan0]
        lnet:
          a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
          b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
          c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
          d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
          e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
          f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
          g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
          h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
          i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """)


def _bounded_child(code: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child limited to 1 GiB of address space."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    """Issue 11 item 5: 609 bytes used to end in a MemoryError traceback."""
    assert len(BOMB) <= 640
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    res = _bounded_child(
        "import sys\nfrom testbed.plan import load_topology, TopologyError\n"
        f"try:\n    load_topology({str(path)!r})\nexcept TopologyError as e:\n"
        "    print(e)\n    sys.exit(3)\n")
    assert res.returncode == 3, res.stderr[-2000:]
    assert res.stdout.splitlines() == [
        f"{path}:12: YAML aliases expand this document beyond 2000000 nodes: refused "
        "(an alias bomb?)"]


def test_merge_key_bomb_and_recursive_alias_are_refused() -> None:
    merges = "a0: &a0 {k: 1}\n" + "".join(
        f"a{i}: &a{i} {{<<: [{', '.join(f'*a{i - 1}' for _ in range(9))}], k{i}: 1}}\n"
        for i in range(1, 10))
    res = _bounded_child(
        "from testbed.plan import parse_topology, TopologyError\n"
        f"try:\n    parse_topology({merges!r})\nexcept TopologyError as e:\n    print(e)\n")
    assert "beyond 2000000 nodes" in res.stdout, res.stderr[-2000:]
    with pytest.raises(TopologyError, match="recursive alias") as info:
        parse_topology("networks: &n {lan0: *n}\nnodes: {}\n")
    assert len(str(info.value).splitlines()) == 1


DEEP = {
    "flow": ("networks: {}\nnodes: " + "[" * 100_000 + "]" * 100_000 + "\n", 2, ""),
    "compact block": ("networks: {}\nnodes:\n" + "- " * 100_000 + "x\n", 3, ""),
    "block": ("".join(" " * i + f"k{i}:\n" for i in range(200)), 65, ""),
    "aliases": ("".join(f"a{i}: &a{i} [[[[[[[[[[*a{i - 1}]]]]]]]]]]\n" for i in range(1, 10))
                .replace("*a0", "x") + "nodes: {}\n", 7, " once its aliases are expanded"),
}


@pytest.mark.parametrize("what", sorted(DEEP))
def test_deep_nesting_is_refused_before_it_is_composed(what: str, tmp_path: Path) -> None:
    """100,000 nested ``[`` overflowed libyaml's (recursive, C) composer: a segfault. Now
    one line naming the file and the line of the first collection too deep (in a child:
    a regression crashes it, not the test run)."""
    text, line, how = DEEP[what]
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    res = _bounded_child(
        "from testbed.plan import load_topology, TopologyError\n"
        f"try:\n    load_topology({str(path)!r})\n"
        "except TopologyError as e:\n    print(e)\n")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == [
        f"{path}:{line}: YAML nested more than 64 levels deep{how}: refused"]


def test_sixty_four_levels_are_accepted_as_yaml() -> None:
    """The bound is the YAML's, not the schema's: 64 levels parse (then the schema speaks)."""
    with pytest.raises(TopologyError) as info:
        parse_topology("networks: {}\nnodes: " + "[" * 63 + "]" * 63 + "\n")
    assert "nested" not in str(info.value)


@pytest.mark.parametrize("text, quoted", ids=["name", "node", "net"], argvalues=[
    ("name: " + "x" * (1 << 20) + "\nnetworks: {}\nnodes: {}\n", "'" + "x" * 80 + "'"),
    ("networks: {lan0: {lnet: tcp, subnet: 10.0.0.0/24}}\nnodes:\n  ? " + "n" * (1 << 20)
     + "\n  : {interfaces: [lan0]}\n", "nodes['" + "n" * 80 + "'"),
    ("networks: {lan0: {lnet: " + "t" * (1 << 20) + ", subnet: 10.0.0.0/24}}\nnodes: {}\n",
     "'" + "t" * 80 + "'")])
def test_a_megabyte_value_is_quoted_cut(text: str, quoted: str) -> None:
    """A value is quoted by its first 80 characters and its length, never whole."""
    with pytest.raises(TopologyError) as info:
        parse_topology(text, source="big.yaml")
    first = str(info.value).splitlines()[0]
    assert first.startswith("big.yaml:") and quoted in first and "... (1048576 characters)" \
        in first, first[:300]
    assert len(first) < 500


@pytest.mark.parametrize("what", ["/dev/zero", "/dev/null", "fifo", "directory"])
def test_only_regular_files_are_read(tmp_path: Path, what: str) -> None:
    """``testbed up /dev/zero`` grew without bound; a FIFO blocked: both refused at once."""
    path = Path(what)
    if what == "fifo":
        path = tmp_path / "topo.fifo"
        os.mkfifo(path)
    elif what == "directory":
        path = tmp_path
    result: list[BaseException] = []
    worker = threading.Thread(target=lambda: _catch(path, result), daemon=True)
    worker.start()
    worker.join(10.0)
    assert not worker.is_alive(), f"reading {path} blocked"
    assert isinstance(result[0], TopologyError), result
    kind = {"/dev/zero": "character device", "/dev/null": "character device",
            "fifo": "FIFO", "directory": "directory"}[what]
    assert str(result[0]) == f"{path}: cannot read topology: not a regular file (a {kind})"


def _catch(path: Path, out: list[BaseException]) -> None:
    try:
        load_topology(path)
    except BaseException as e:  # the test inspects it
        out.append(e)


def test_oversized_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(MAX_TOPOLOGY_BYTES + 1)  # sparse: 8 MiB of NULs, nothing to parse
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert str(info.value) == (f"{path}: topology file larger than {MAX_TOPOLOGY_BYTES} "
                               "bytes (8 MiB): refused")
    with pytest.raises(TopologyError, match="larger than"):
        parse_topology("#" * (MAX_TOPOLOGY_BYTES + 1))


def _nodes_yaml(n: int) -> str:
    return ("networks: {lan0: {lnet: tcp, subnet: 10.0.0.0/16}}\nnodes:\n"
            + "".join(f"  n{i}: {{interfaces: [lan0]}}\n" for i in range(n)))


def test_node_count_limit_per_backend() -> None:
    """Issue 11 item 10: at least 10,000 nodes on the sim, 1,000 on Mininet (issue 34);
    beyond, a one-line refusal at validation."""
    assert MAX_NODES == {"mininet": 1_000, "sim": 10_000}
    assert len(parse_topology(_nodes_yaml(1_000), backend="mininet").nodes) == 1_000
    with pytest.raises(TopologyError) as info:
        parse_topology(_nodes_yaml(1_001), backend="mininet")
    assert str(info.value) == ("<string>:3: nodes: 1,001 nodes: more than the mininet backend "
                               "takes (1,000; limits: mininet 1,000, sim 10,000)")
    big = _nodes_yaml(10_001)
    with pytest.raises(TopologyError, match=r"10,001 nodes: more than the sim backend takes"):
        parse_topology(big, backend="sim")
    with pytest.raises(TopologyError, match=r"10,001 nodes: more than the testbed takes"):
        parse_topology(big)


def test_every_problem_at_once_with_did_you_mean(tmp_path: Path) -> None:
    """Issue 18: all errors, one line each; a misspelt key gets one suggestion, not 44."""
    text = textwrap.dedent("""\
        networks:
          lan0: {lnet: tcp, subnet: 10.10.0.0/24}
          lan1: {lnet: tcpx, subnet: 10.11.0.0/24}
        nodes:
          c1: {interfaces: [lan0, lan1], global: {helth_sensitivity: 100}}
          s1: {interfaces: [lan0], peers: [c2, c1], routing: 1}
          s2: {interfaces: [lan0], global: {retry_count: -1}}
        """)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert str(info.value).splitlines() == [
        f"{path}:3: networks.lan1.lnet: bad LNet net 'tcpx' (expected an IP-addressed net "
        "such as tcp, tcp1, o2ib2)",
        f"{path}:5: nodes.c1.global.helth_sensitivity: unknown key 'helth_sensitivity' "
        "(did you mean 'health_sensitivity'?)",
        f"{path}:6: nodes.s1.routing: expected true or false, got an integer",
        f"{path}:7: nodes.s2.global.retry_count: retry_count must be in 0..4294967295, got -1",
        f"{path}:6: nodes.s1.peers[0]: unknown node 'c2' (defined: s1, s2)",
    ]  # not reported again: c1's lan1 (its network failed), s1's peer c1 (c1 failed)


def test_at_most_twenty_then_and_n_more() -> None:
    text = ("networks: {lan0: {lnet: tcp, subnet: 10.0.0.0/16}}\nnodes:\n"
            + "".join(f"  n{i}: {{interfaces: [lan0], bogus: 1}}\n" for i in range(25)))
    with pytest.raises(TopologyError) as info:
        parse_topology(text)
    lines = str(info.value).splitlines()
    assert len(info.value.errors) == 25
    assert len(lines) == MAX_SHOWN + 1 and lines[-1] == "and 5 more"
    assert lines[0] == "<string>:3: nodes.n0.bogus: unknown key 'bogus' (allowed: interfaces, " \
        "global, peers, udsp, lnet, routing, buffers, routes, multi_rail, host)"


def test_builtin_topologies_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 18: ``testbed up routed`` and ``topology("routed")`` find the packaged file;
    a file of that name here wins; an unknown name lists the built-in ones."""
    assert {"default", "routed", "multihop"} <= set(builtin_names())
    assert load_topology("routed").name == "routed"
    assert str(builtin_topology("routed")) == load_topology("routed").source
    assert Path(load_topology("routed").source).name == "routed.yaml"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "routed").write_text(_nodes_yaml(1))
    assert len(load_topology("routed").nodes) == 1
    with pytest.raises(TopologyError, match=r"^nosuch: no such file, nor a built-in topology "
                       r"\(built-in: .*default.*routed"):
        load_topology("nosuch")
    assert builtin_topology("../etc/passwd") is None


def test_reserved_testbed_names_are_refused() -> None:
    """Issue 11 item 4: ``by-netns`` matches the name pattern but is the run root's shared
    registry; as a testbed name it is refused wherever a name is taken."""
    with pytest.raises(TopologyError, match="bad testbed name 'by-netns': reserved"):
        parse_topology(_nodes_yaml(1), name="by-netns")
    with pytest.raises(TopologyError, match="reserved"):
        parse_topology("name: by-netns\n" + _nodes_yaml(1))


@pytest.mark.parametrize("number", ["9" * 5000, "0x" + "f" * 5000, "-" + "1" * 4301],
                         ids=["decimal", "hex", "negative"])
def test_an_integer_of_5000_digits_is_one_line_naming_file_and_line(number: str) -> None:
    """Issue 27 item 9: Python's ``sys.set_int_max_str_digits()`` message with no line (a
    hex one was read, then raised ValueError printing it in a range error: a traceback)."""
    text = ("global:\n  retry_count: " + number + "\nnetworks: {lan0: {lnet: tcp, subnet: "
            "10.0.0.0/24}}\nnodes:\n  c1: {interfaces: [lan0], routes: [{net: tcp1, gateway: "
            "10.0.0.9@tcp, hop: " + number + "}]}\n")
    with pytest.raises(TopologyError) as info:
        parse_topology(text, source="big.yaml")
    text = str(info.value)
    assert text.startswith("big.yaml:2: YAML error: an integer of ") and "\n" not in text, text
    assert "too large" in text and "set_int_max_str_digits" not in text
