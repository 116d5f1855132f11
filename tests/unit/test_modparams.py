"""The kernel's parsers of ``networks=``, ``ip2nets=``, ``routes=`` (nodes/dlc/modparams.py) and
``lnet configure --all`` / ``lctl net up`` from them on a simulated node (issue 14, E14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodes.dlc.modparams import match_ip2nets, parse_networks, parse_routes
from nodes.lnet.errors import LNetConfigError

TOPO = Path(__file__).parents[1] / "lutf" / "suite_sanity" / "single.yaml"


def _nets(text: str) -> list[tuple[str, list[str]]]:
    return [(str(n), i) for n, i in parse_networks(text)]


def test_networks_merge_a_net_named_twice_and_skip_lo() -> None:
    """``lnet_net_alloc`` returns the net already listed; ``lo`` is implicit; CPT lists."""
    assert _nets("tcp(eth0[0]), lo, tcp1 ,tcp(eth1)[0-1]") == [
        ("tcp", ["eth0", "eth1"]), ("tcp1", [])]


@pytest.mark.parametrize(("text", "rest"), [
    ("tcp(eth0", "eth0"), ("tcp(eth0,)", ")"), ("tcp:x", ":x"), ("tcp(eth0)[x]", "[x]"),
    ("foo(eth0)", "foo(eth0)")])
def test_networks_syntax_errors_name_the_string_and_where(text: str, rest: str) -> None:
    with pytest.raises(LNetConfigError) as e:
        parse_networks(text)
    assert f"Error parsing 'networks=\"{text}\"' here: '{rest}'" in e.value.descr
    assert "\n" not in e.value.descr


def test_ip2nets_rules_in_order_and_a_rule_matching_nothing_left_out() -> None:
    ips = ["10.60.0.1", "10.61.0.1"]
    assert match_ip2nets("tcp(eth0) 10.60.0.1; o2ib 192.168.*.*; tcp1(eth1) 10.61.0.1 # x",
                         ips) == "tcp(eth0),tcp1(eth1)"
    assert match_ip2nets("tcp(eth0,eth1) [10,10].[60,61].[0,0].[1,1]", ips[:1]) == \
        "tcp(eth0,eth1)"
    with pytest.raises(LNetConfigError, match="does not match any local IP"):
        match_ip2nets("tcp 192.168.0.1", ips)
    with pytest.raises(LNetConfigError, match=r"here: 'tcp\(eth1\) 10.60.0.1'"):
        match_ip2nets("tcp(eth0),tcp(eth1) 10.60.0.1", ips)  # a net twice in one rule


def test_routes_expand_pdsh_ranges_hops_and_priority() -> None:
    got = [(str(n), h, str(g), p) for n, h, g, p in
           parse_routes("o2ib 2 10.0.[1-2].[4-8/4]@tcp:3; tcp2 [1,3].1.1.1@tcp")]
    assert got == [("o2ib", 2, "10.0.1.4@tcp", 3), ("o2ib", 2, "10.0.1.8@tcp", 3),
                   ("o2ib", 2, "10.0.2.4@tcp", 3), ("o2ib", 2, "10.0.2.8@tcp", 3),
                   ("tcp2", -1, "1.1.1.1@tcp", 0), ("tcp2", -1, "3.1.1.1@tcp", 0)]


@pytest.mark.parametrize(("text", "rest"), [
    ("o2ib", "o2ib"), ("o2ib 1.2.3.[4-]@tcp", "1.2.3.[4-]@tcp"), ("o2ib 1.2.3.4@tcp:x", "x"),
    ("lo 1.2.3.4@tcp", "lo 1.2.3.4@tcp"), ("o2ib 0@lo", "0@lo"), ("o2ib [3-1].0.0.1@tcp",
                                                                  "[3-1].0.0.1@tcp")])
def test_routes_syntax_errors(text: str, rest: str) -> None:
    with pytest.raises(LNetConfigError) as e:
        parse_routes(text)
    assert e.value.descr == f"Error parsing 'routes=\"{text}\"' here: '{rest}'"


@pytest.fixture
def sim() -> Any:
    from testbed.sim import SimTestbed

    tb = SimTestbed.up(TOPO, name="modparams-unit")
    yield tb
    tb.down()


def test_bad_networks_leaves_the_node_up_and_lnet_down(sim: Any) -> None:
    """The string is kept at "module load"; ``lctl net up`` fails in one line naming it; a
    plain ``lnet configure`` ignores the parameters (``NLM_F_EXCL``)."""
    sim.reload_modules("s", {"lnet": {"networks": "tcp(eth0"}})
    s = sim.node("s")
    res = s.lctl("net up")
    assert res.rc != 0
    assert res.err == "LNET configure error 22: Error parsing 'networks=\"tcp(eth0\"' here: " \
        "'eth0'\n"
    assert s.lctl("list_nids").rc != 0
    res = s.lnetctl("lnet configure --all")
    assert res.rc != 0 and "LNet configure error: Error parsing" in res.err
    assert s.lnetctl("lnet configure").rc == 0
    assert s.lctl("list_nids").out == ""


def test_local_gateway_makes_the_node_a_router(sim: Any) -> None:
    """``im_a_router``: a route through one of the node's own NIDs is not added, and routing
    comes on unless ``forwarding=`` was given."""
    sim.reload_modules("s", {"lnet": {"networks": "tcp(eth0)", "routes": "o2ib 10.60.0.1@tcp"}})
    s = sim.node("s")
    assert s.lctl("net up").rc == 0
    assert s.yaml("routing show")["routing"][-1]["enable"] == 1
    assert not (s.yaml("route show") or {}).get("route")
    sim.reload_modules("s", {"lnet": {"networks": "tcp(eth0)", "routes": "o2ib 10.60.0.1@tcp",
                                      "forwarding": "disabled"}})
    s = sim.node("s")
    assert s.lctl("net up").rc == 0
    shown = (s.yaml("routing show") or {}).get("routing") or [{"enable": 0}]
    assert shown[-1]["enable"] == 0


def test_reload_refuses_an_unknown_module_in_one_line(sim: Any) -> None:
    """``testbed/modload.py``: only modules whose parameters the plan carries; the node is
    left as it was."""
    from testbed.base import TestbedError

    with pytest.raises(TestbedError, match=r"^reload: no parameters of module 'ko2iblnd'"):
        sim.reload_modules("s", {"ko2iblnd": {"peer_credits": "8"}})
    assert sim.node("s").lctl("list_nids").rc == 0
