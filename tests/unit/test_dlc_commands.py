"""Typed DLC commands (issue 12 item 4): parse(render(cmd)) == cmd, validation on receipt,
the control socket's ``dlc`` request, and the one tunable table ``lnetctl set`` uses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from rtdouble import RuntimeDouble

from nodes.daemon.control import ControlServer
from nodes.dlc import commands as C
from nodes.dlc import request as frontend
from nodes.dlc.parse import parse
from nodes.dlc.request import from_fields, handle
from nodes.dlc.tunables import TUNABLES
from nodes.lnet.nid import NID, Net
from testbed.sim import SimTestbed

ip = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
net_text = st.sampled_from(["tcp", "tcp0", "tcp1", "tcp42", "o2ib", "o2ib3"])
nid_text = st.one_of(st.builds(lambda a, n: f"{a}@{n}", ip, net_text),
                     st.builds(lambda a, n: f"{a}@{n}", st.integers(0, 2**31), st.sampled_from(
                         ["gni", "kfi", "bxi3f"])))
#: the typed fields (issue 29 item 2): a net or NID parsed where its text entered
net = net_text.map(Net.parse)
nid = nid_text.map(NID.parse)
ifname = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
opt_int = st.one_of(st.just(-1), st.integers(0, 2**31 - 1))

COMMANDS = st.one_of(
    st.builds(C.LnetConfigure, all=st.booleans(), large=st.booleans()),
    st.builds(C.LnetUnconfigure),
    st.builds(C.NetAdd, net=net, interfaces=st.lists(ifname, min_size=1, max_size=3).map(tuple),
              peer_timeout=opt_int, peer_credits=opt_int, peer_buffer_credits=opt_int,
              credits=opt_int, conns_per_peer=st.integers(-1, 127), tos=st.integers(-1, 255),
              skip_mr_route_setup=st.booleans(),
              numa=st.one_of(st.none(), st.integers(0, 7))),
    st.builds(C.NetDel, net=net, interfaces=st.lists(ifname, max_size=3).map(tuple)),
    st.builds(C.NetSet, nid=nid, health=st.integers(0, 1000),
              conns_per_peer=st.integers(-1, 127)),
    st.builds(C.PeerAdd, prim_nid=nid, nids=st.lists(nid, max_size=5).map(tuple),
              non_mr=st.booleans(), lock_prim=st.booleans()),
    st.builds(C.PeerDel, prim_nid=nid, nids=st.lists(nid, max_size=5).map(tuple),
              force=st.booleans()),
    st.builds(C.PeerSet, nid=nid, health=st.integers(-1, 1000),
              state=st.integers(-1, 2**31 - 1)),
    st.builds(C.RouteAdd, net=net, gateways=st.lists(nid, min_size=1, max_size=4).map(tuple),
              hop=st.one_of(st.just(-1), st.integers(1, 255)), priority=opt_int),
    st.builds(C.RouteDel, net=net, gateways=st.lists(nid, min_size=1, max_size=4).map(tuple)),
    st.builds(C.UdspAdd, src=st.one_of(st.none(), net_text), dst=st.one_of(st.none(), nid_text),
              priority=opt_int, idx=opt_int).filter(lambda c: c.src or c.dst),
    st.builds(C.UdspDel, idx=opt_int),
    st.builds(C.SetTunable, name=st.sampled_from(sorted(TUNABLES)),
              value=st.integers(-2**63, 2**63 - 1)).filter(
        lambda c: c.name != "routing" or c.value in (0, 1)),
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(COMMANDS)
def test_parse_of_render_is_the_command(cmd: C.Command) -> None:
    argv = cmd.argv()
    group, sub, rest = (argv[0], None, argv[1:]) if argv[0] == "set" else \
        (argv[0], argv[1], argv[2:])
    assert parse(group, sub, rest) == cmd, argv


@settings(max_examples=100, derandomize=True, deadline=None)
@given(COMMANDS)
def test_fields_round_trip(cmd: C.Command) -> None:
    assert from_fields(cmd.verb, cmd.fields()) == cmd


@pytest.mark.parametrize(("verb", "fields", "words"), [
    ("peer_add", {"prim_nid": "foo"}, "prim_nid: cannot parse NID 'foo'"),
    ("peer_add", {"prim_nid": ["1.1.1.1@tcp"]}, "prim_nid: expected a NID"),
    ("net_add", {"net": "tcpx", "interfaces": ["eth0"]}, "net: cannot parse net 'tcpx'"),
    ("net_add", {"net": ["tcp"], "interfaces": ["eth0"]}, "net: expected a net"),
    ("route_add", {"net": "tcp1", "gateways": ["1.2.3.4@tcp", "x@"]},
     "gateways: cannot parse NID 'x@'"),
    ("peer_add", {}, "missing 1 required keyword-only argument"),
    ("net_add", {"net": "tcp", "interfaces": ["eth0"], "tos": 300}, "tos: 300 not in -1..255"),
    ("net_add", {"interfaces": ["eth0"]}, "one of net, nids, ip2net is required"),
    ("route_add", {"net": "tcp1", "gateways": [1]}, "gateways: expected a list of NIDs"),
    ("set", {"name": "bogus", "value": 1}, "unknown tunable 'bogus'"),
    ("set", {"name": "retry_count", "value": True}, "value: expected an integer"),
    ("frob", {}, "unknown verb 'frob'"),
    ("udsp_del", {"idx": 0, "extra": 1}, "unknown field 'extra'"),
])
def test_bad_fields_are_one_line_errors(verb: str, fields: dict[str, Any], words: str) -> None:
    with pytest.raises(C.CommandError) as info:
        from_fields(verb, fields)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_every_command_has_a_parser_and_an_apply_branch() -> None:
    from nodes.dlc.apply import _WHERE

    assert set(C.COMMANDS.values()) - {C.SetTunable} == set(_WHERE)


TOPO = """
name: typed
networks:
  lan0: {lnet: tcp, subnet: 10.41.0.0/24}
nodes:
  a: {interfaces: [lan0]}
"""


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    topo = tmp_path / "typed.yaml"
    topo.write_text(TOPO)
    return SimTestbed.up(topo, seed=4)


def _request(tb: SimTestbed, req: dict[str, Any]) -> dict[str, Any]:
    from testbed.sim.runtime import run_sync

    rt = tb.node("a").rt
    with tb.lock:
        return run_sync(handle(rt, req))  # type: ignore[no-any-return]


def test_dlc_requests_configure_like_lnetctl(tb: SimTestbed) -> None:
    """The orchestrator's form: fields, validated on receipt; the same effect and output as
    the lnetctl words."""
    reply = _request(tb, {"cmd": "dlc", "verb": "peer_add", "prim_nid": "9.9.9.9@tcp",
                          "nids": ["9.9.9.8@tcp"]})
    assert reply == {"rc": 0, "out": "", "err": ""}
    peers = yaml.safe_load(tb.node("a").lnetctl("peer", "show").out)["peer"]
    assert [n["nid"] for n in peers[0]["peer ni"]] == ["9.9.9.9@tcp", "9.9.9.8@tcp"]
    dup = _request(tb, {"cmd": "dlc", "verb": "set", "name": "retry_count", "value": -1})
    same = tb.node("a").lnetctl("set", "retry_count", "-1")
    assert (dup["rc"], dup["err"]) == (same.rc, same.err) and dup["rc"] != 0
    bad = _request(tb, {"cmd": "dlc", "verb": "peer_add", "prim_nid": 5})
    assert bad == {"ok": False, "error": "dlc peer_add: prim_nid: expected a NID, not 5"}
    assert _request(tb, {"cmd": "lnetctl", "argv": ["net", 5]})["ok"] is False


class _BrokenEngine:
    """An engine that fails inside a verb (a bug)."""

    configured = True

    @staticmethod
    def view(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("boom")


def test_an_internal_error_reaches_the_client_on_err() -> None:
    """Issue 11 item 8: a failure inside the daemon keeps rc/out/err, so ``testbed lnetctl``
    (which prints err) shows it instead of rc 1 and an empty stderr."""
    server = ControlServer.__new__(ControlServer)
    rt = RuntimeDouble()
    rt.engine = _BrokenEngine()  # type: ignore[assignment]
    server.rt = rt  # type: ignore[assignment]
    server.frontend = frontend  # what the daemon's entry point hands it
    reply = asyncio.run(server.dispatch({"cmd": "lnetctl", "argv": ["net", "show"]}))
    assert reply["rc"] == 1 and "internal error: RuntimeError('boom')" in reply["err"]
