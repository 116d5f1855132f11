"""testbed/plan/verbs.py: the verb list that configures a node on both backends (contract B).

A ``peers:`` entry naming a ``multi_rail: false`` node is added with ``--non_mr``, as an
admin adds a downrev peer (``lnetctl peer add --non_mr``): ``lnet_add_peer_ni`` keeps a peer
configured as Multi-Rail MR even when its ping reply lacks the MULTI_RAIL bit (bck-025).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.plan import config_verbs, parse_topology
from testbed.sim import SimTestbed

TOPO = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp1, subnet: 10.11.0.0/24}
nodes:
  c1: {interfaces: [lan0, lan1], peers: [s1, s2]}
  s1: {interfaces: [lan0, lan1]}
  s2: {interfaces: [lan0, lan1], multi_rail: false}
"""
S1 = ("10.10.0.2@tcp", "10.11.0.2@tcp1")
S2 = ("10.10.0.3@tcp", "10.11.0.3@tcp1")


def test_peer_verbs_mark_a_downrev_peer_non_mr(tmp_path: Path) -> None:
    """The MR peer is added as MR, the downrev one with ``--non_mr``; the downrev node itself
    gets ``set multi_rail 0`` before ``lnet configure``."""
    plan = parse_topology(TOPO)
    peer_verbs = [v for v in config_verbs(plan, plan.node("c1"), tmp_path) if v[0] == "peer"]
    assert peer_verbs == [
        ["peer", "add", "--prim_nid", S1[0], "--nid", S1[1]],
        ["peer", "add", "--prim_nid", S2[0], "--nid", S2[1], "--non_mr"],
    ]
    assert config_verbs(plan, plan.node("s2"), tmp_path)[:2] == [
        ["set", "multi_rail", "0"], ["lnet", "configure"]]


@pytest.fixture()
def sim(tmp_path: Path) -> Iterator[Any]:
    path = tmp_path / "compat-peers.yaml"
    path.write_text(TOPO)
    tb = SimTestbed.up(path)
    yield tb
    tb.down()


@pytest.mark.requirement("bck-025")
def test_configured_downrev_peer_is_used_on_the_addressed_nid_only(sim: Any) -> None:
    """bck-025 (seed 000): a static downrev peer stays non-MR after discovery and every PUT
    to its primary goes to that NID (``lnet_handle_send_case_locked``: a non-MR destination
    is sent to the NID it is addressed by), none to its other NID."""
    c1 = sim.node("c1")
    assert c1.put(S2[0], count=8)["completed"] == 8
    peer = {p["primary nid"]: p for p in yaml.safe_load(c1.lnetctl("peer show -v 3").out)
            ["peer"]}[S2[0]]
    assert peer["Multi-Rail"] is False
    sends = {x["nid"]: x["statistics"]["send_count"] for x in peer["peer ni"]}
    assert sends[S2[0]] >= 8 and sends.get(S2[1], 0) == 0
