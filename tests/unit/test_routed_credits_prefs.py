"""Two engine behaviours the sanity-lnet 256 and 550 ports rest on, checked fast on the
in-process sim: router.c ``lnet_peer_buffer_credits`` (the ``peer_buffer_credits`` module
parameter gives each peer NI its router buffer credits), and lib-move.c
``lnet_handle_spec_router_dst`` / ``lnet_handle_any_router_nmr_dst`` (a routed send to a
non-MR peer keeps the local NI its first send used)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testbed.sim import SimTestbed

SUITE = Path(__file__).resolve().parents[1] / "lutf" / "suite_sanity"


def _ok(node: Any, cmd: str) -> str:
    res = node.lnetctl(cmd)
    assert res.rc == 0, (cmd, res)
    return str(res.out)


def _routed(topo: str) -> tuple[Any, Any, Any, list[str], str]:
    """setup_router_test + config_routes on ``routed*.yaml`` as brought up: (host, router,
    peer, host's NIDs, peer's NID)."""
    tb = SimTestbed.up(SUITE / topo, seed=3)
    host, r, p = (tb.node(n) for n in ("l", "r", "p"))
    _ok(r, "set routing 1")
    rnids = r.lctl("list_nids").out.split()
    pnid = p.lctl("list_nids").out.split()[0]
    gw_tcp1 = next(n for n in rnids if n.endswith("@tcp1"))
    _ok(host, f"route add --net tcp1 --gateway {rnids[0]}")
    _ok(p, f"route add --net tcp --gateway {gw_tcp1}")
    tb.advance(20)
    return host, r, p, host.lctl("list_nids").out.split(), pnid


def test_peer_buffer_credits_module_parameter() -> None:
    for topo, want in (("routed-pbc.yaml", 1024), ("routed.yaml", 8)):
        host, r, _p, lnids, pnid = _routed(topo)
        _ok(host, f"ping {pnid}")
        doc = yaml.safe_load(_ok(r, f"peer show -v --nid {lnids[0]}"))
        (lpni,) = [ni for peer in doc["peer"] for ni in peer["peer ni"]
                   if ni["nid"] == lnids[0]]
        assert (lpni["max_ni_tx_credits"], lpni["available_rtr_credits"]) == (8, want), topo


def _sent(node: Any, nid: str) -> int:
    doc = yaml.safe_load(_ok(node, "net show -v 2"))
    return next(int(ni["statistics"]["send_count"]) for n in doc["net"]
                for ni in n["local NI(s)"] if ni["nid"] == nid)


def test_routed_non_mr_destination_keeps_its_local_ni() -> None:
    host, _r, _p, lnids, pnid = _routed("routed-dd-mr.yaml")
    assert len(lnids) == 2  # the topology configures both of this host's interfaces
    _ok(host, f"ping --source {lnids[1]} {pnid}")
    before = [_sent(host, n) for n in lnids]
    for _ in range(4):
        _ok(host, f"ping {pnid}")
    after = [_sent(host, n) for n in lnids]
    assert after[0] == before[0] and after[1] >= before[1] + 4, (before, after)
