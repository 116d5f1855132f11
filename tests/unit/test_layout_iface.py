"""Layout proofs of the interface walk (issue 29 item 2, "typed values end to end"): an
interface from topology YAML to the socket bind, its net parsed once per process.

* ``nodes/dlc/apply.py`` parses no net or NID (``Net.parse``, ``NID.parse``, ``parse_net``,
  ``parse_nid``): every command reaches it typed. The one exception, named: the rules of
  ``net add --ip2net`` are a string until the node resolves them against its own addresses
  (``lnet_parse_ip2nets`` runs in the kernel too), so a rule's net is parsed there, once;
* every net and NID field of the DLC commands is typed (``Net``, ``NID``, tuples of
  ``NID``), and so are the plan's segment and interface nets (``SegmentPlan.net``,
  ``IfacePlan.net``) and its routes and static peers;
* the simulator never builds a ``{"cmd": "dlc", ...}`` request to itself: no such dict in
  ``testbed/sim``, and a bring-up on the simulator never reaches ``from_fields``;
* counted: the net of an interface is parsed once on the orchestrator's side (the validator)
  and once in the daemon (``request.from_fields``, the wire edge), never again; a peer's NID
  made from the plan's typed parts is parsed only at the wire edge.

The static ones read the sources (``ast``), so they hold for compiled modules too.
"""

from __future__ import annotations

import ast
import asyncio
import typing
from pathlib import Path
from typing import Any

import pytest
from rtdouble import RuntimeDouble

from nodes.dlc import commands as C
from nodes.dlc import request as frontend
from nodes.lnet import nid as nidmod
from nodes.lnet.nid import NID, Net
from testbed.plan import config_steps, model, parse_topology, request

ROOT = Path(__file__).resolve().parents[2]
PARSERS = {"parse_net", "parse_nid"}
#: (function, source of the argument) of the parse calls apply.py may make (module doc)
APPLY_PARSES = {("_net_add", "rule.net")}


def _parse_calls(path: Path) -> set[tuple[str, str]]:
    """``(enclosing function, argument source)`` of every net/NID parse call in ``path``."""
    tree = ast.parse(path.read_text())
    found: set[tuple[str, str]] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            parse = (isinstance(f, ast.Name) and f.id in PARSERS) or (
                isinstance(f, ast.Attribute) and (f.attr in PARSERS or (
                    f.attr == "parse" and isinstance(f.value, ast.Name)
                    and f.value.id in ("Net", "NID"))))
            if parse:
                arg = ast.unparse(node.args[0]) if node.args else ""
                found.add((fn.name, arg))
    return found


def test_apply_parses_no_net_or_nid() -> None:
    assert _parse_calls(ROOT / "nodes/dlc/apply.py") <= APPLY_PARSES


def _typed(hint: Any) -> set[Any]:
    """The types a field's hint allows (``X | None`` -> {X, None}; tuple[X, ...] -> {tuple[X]})."""
    if typing.get_origin(hint) is tuple:
        return {("tuple", typing.get_args(hint)[0])}
    return set(typing.get_args(hint)) or {hint}


@pytest.mark.parametrize("cls", list(C.COMMANDS.values()), ids=lambda c: c.verb)
def test_command_nets_and_nids_are_typed(cls: type[C.Command]) -> None:
    """A field named for a net holds a ``Net``, one named for a NID a ``NID``, a NID list a
    tuple of ``NID`` (UDSP's ``src``/``dst``/``rte`` are expressions, not NIDs)."""
    hints = C.field_types(cls)
    for name, hint in hints.items():
        if name == "net":
            assert _typed(hint) - {type(None)} == {Net}, (cls.verb, name, hint)
        elif name in ("nid", "prim_nid"):
            assert _typed(hint) - {type(None)} == {NID}, (cls.verb, name, hint)
        elif name in ("nids", "gateways"):
            assert _typed(hint) == {("tuple", NID)}, (cls.verb, name, hint)
    if cls is C.NetAdd:
        assert hints["net"] == Net | None


def test_plan_nets_are_typed() -> None:
    hints = {c: typing.get_type_hints(c) for c in (model.SegmentPlan, model.IfacePlan,
                                                    model.RoutePlan, model.PeerPlan)}
    assert hints[model.SegmentPlan]["net"] is Net
    assert hints[model.IfacePlan]["net"] is Net
    assert hints[model.RoutePlan]["net"] is Net and hints[model.RoutePlan]["gateway"] is NID
    assert hints[model.PeerPlan]["prim_nid"] is NID
    assert hints[model.PeerPlan]["nids"] == tuple[NID, ...]


def _dlc_dicts(path: Path) -> list[int]:
    """Lines of ``path`` building a dict with ``"cmd": "dlc"`` (a literal or ``dict(cmd=...)``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
            if any(isinstance(k, ast.Constant) and k.value == "cmd" and
                   isinstance(v, ast.Constant) and v.value == "dlc" for k, v in pairs):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "dict" and any(
                    k.arg == "cmd" and isinstance(k.value, ast.Constant)
                    and k.value.value == "dlc" for k in node.keywords):
            lines.append(node.lineno)
    return lines


def test_the_simulator_builds_no_dlc_request() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "testbed/sim").glob("*.py"))
             if (lines := _dlc_dicts(p))}
    assert found == {}


TOPO = """
name: ifacewalk
networks:
  lan0: {lnet: tcp1, subnet: 10.42.0.0/24}
nodes:
  a: {interfaces: [lan0]}
  b: {interfaces: [lan0], peers: [a]}
"""


def test_a_simulator_bring_up_never_decodes_a_request(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """The simulator hands its typed steps to the front end in-process
    (``request.apply_command``): the wire's decoder is never called, and the NIs come up."""
    from testbed.sim import SimTestbed

    def refuse(*_a: Any, **_k: Any) -> C.Command:
        raise AssertionError("the simulator sent itself a dlc request")

    monkeypatch.setattr(frontend, "from_fields", refuse)
    topo = tmp_path / "ifacewalk.yaml"
    topo.write_text(TOPO)
    tb = SimTestbed.up(topo, seed=3)
    try:
        assert "10.42.0.1@tcp1" in tb.node("a").lnetctl("net", "show").out
        assert tb.node("b").lnetctl("peer", "show").rc == 0
    finally:
        tb.down()


class _Runtime(RuntimeDouble):
    """A runtime whose ``net_add`` adds the NI to its engine (no LND), recording the net."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[tuple[Net, str]] = []

    async def net_add(self, net: Net, interface: str, *, address: str | None = None,
                      **kw: Any) -> NID:
        self.added.append((net, interface))
        nid = NID(net, 0x0A2A0002)  # b: 10.42.0.2
        self.engine.net_add(net, interface, nid, **kw)
        return nid


def test_nets_and_nids_are_parsed_once_per_process(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """Every parse of a net's or a NID's text counted (``parse_net``, ``parse_nid``, which
    ``Net.parse`` and ``NID.parse`` call; a NID's own net part not counted apart): the
    orchestrator's side (YAML -> plan -> steps -> requests) parses ``tcp1`` once and no NID
    (node ``b``'s peer NID is made from the plan's typed parts), the daemon's side (requests
    -> commands -> apply -> runtime) each net and NID of the requests once."""
    if not str(nidmod.__file__).endswith(".py"):
        pytest.skip("nodes/lnet/nid.py runs compiled: its module globals are not patchable")
    seen: list[str] = []
    real_net, real_nid = nidmod.parse_net, nidmod.parse_nid
    inside = [False]

    def counting_net(text: str) -> Net | None:
        if not inside[0]:
            seen.append(text)
        return real_net(text)

    def counting_nid(text: str) -> NID | None:
        seen.append(text)
        inside[0] = True
        try:
            return real_nid(text)
        finally:
            inside[0] = False

    from testbed.plan import nodes as plannodes
    from testbed.plan import schema
    for module in (nidmod, schema, plannodes):
        for name, fn in (("parse_net", counting_net), ("parse_nid", counting_nid)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fn)

    plan = parse_topology(TOPO)
    reqs = [request(step) for step in config_steps(plan, plan.node("b"), tmp_path)]
    assert seen == ["tcp1"], seen  # the validator's, and nothing after it on this side
    seen.clear()
    rt = _Runtime()
    for req in reqs:
        assert asyncio.run(frontend.handle(rt, req)) == {"rc": 0, "out": "", "err": ""}
    assert [(str(net), iface) for net, iface in rt.added] == [("tcp1", "eth0")]
    # from_fields, at the wire edge: net add's net, peer add's NID; apply parses nothing
    assert seen == ["tcp1", "10.42.0.1@tcp1"], seen
