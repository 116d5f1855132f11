"""Bring-up sends typed commands (issue 12 item 4): every step of every shipped topology is a
typed DLC command whose request fields rebuild it (what the daemon does on receipt) and whose
lnetctl rendering parses back to it (render is for logs, export and this test only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.dlc import commands as C
from nodes.dlc.parse import parse
from nodes.dlc.request import from_fields
from testbed.plan import config_steps, load_topology, parse_topology, request
from testbed.plan.verbs import ImportFile

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yaml"))
EXTRA = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp1, subnet: 10.11.0.0/24}
global: {retry_count: 1, transaction_timeout: 20, lnet_health_sensitivity: 50}
nodes:
  c1:
    interfaces: [lan0, {lan1: {numa: 1}}]
    peers: [{prim_nid: 10.10.0.9@tcp, nids: [10.11.0.9@tcp1], lock_prim: true}]
    udsp: [{src: tcp1, priority: 1}, {dst: 10.10.0.2@tcp, idx: 0}]
    routes: [{net: tcp9, gateway: r1, hop: 2, priority: 3}]
    lnet: {global: {discovery: 0}}
  r1: {interfaces: [lan0, lan1], routing: true, buffers: {tiny: 512}}
  s1: {interfaces: [lan1], multi_rail: false}
"""


def _parsed(argv: list[str]) -> object:
    group, sub, rest = (argv[0], None, argv[1:]) if argv[0] == "set" else \
        (argv[0], argv[1], argv[2:])
    return parse(group, sub, rest)


@pytest.mark.parametrize("source", [*TOPOLOGIES, "extra"], ids=lambda p: getattr(p, "stem", p))
def test_every_step_is_typed_and_round_trips(source: Path | str, tmp_path: Path) -> None:
    plan = parse_topology(EXTRA) if source == "extra" else load_topology(source)
    kinds = set()
    for node in plan.nodes:
        for step in config_steps(plan, node, tmp_path):
            req = request(step)
            if isinstance(step, ImportFile):
                assert req == {"cmd": "lnetctl", "argv": ["import", step.path]}
                assert Path(step.path).is_file()
                kinds.add("import")
                continue
            assert isinstance(step, C.Command) and "argv" not in req
            assert req["cmd"] == "dlc" and req["verb"] == step.verb
            fields = {k: v for k, v in req.items() if k not in ("cmd", "verb")}
            assert from_fields(req["verb"], fields) == step  # the daemon's receipt
            assert _parsed(step.argv()) == step  # rendering is lnetctl's words for it
            kinds.add(step.verb)
    if source == "extra":
        assert kinds == {"lnet_configure", "net_add", "set", "peer_add", "route_add",
                         "udsp_add", "import"}
