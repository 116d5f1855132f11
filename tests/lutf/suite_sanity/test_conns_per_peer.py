"""``net add|set --conns-per-peer`` reaches the socklnd (sanity-lnet 230's socket count, between
two nodes rather than a node and itself: pinging one's own NID through the LND is engine gap
E1 in docs/sanity-lnet.md).

ksocklnd with typed connections (``ksocknal_connect``) keeps one CONTROL connection and
``conns_per_peer`` each of BULK_IN and BULK_OUT with a peer NI (a BULK_IN of one side is a
BULK_OUT of the other; the accepting side refuses a type already at its own conns_per_peer, so
both nodes get the same value): ``1 + 2 * cpp`` TCP connections between the two nodes, counted
in ``h``'s namespace with ``ss``. Connections are made on demand; a type still missing after a
connection race is made on a later send (``ksnr_retry_interval``), hence a ping per poll."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.suite_sanity.sanity import reinit, run
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("pair.yaml"),
              pytest.mark.mininet_only("counts the socklnd's TCP connections (ss)")]
ACCEPTOR_PORT = 988


def _conns(node: Any) -> int:
    """Established TCP connections to or from the LNet acceptor port in ``node``'s namespace."""
    res = node.exec(["ss", "-Htn", "state", "established"])
    assert res.rc == 0, res.err
    ports = [f":{ACCEPTOR_PORT}"]
    return sum(1 for line in res.out.splitlines()
               if any(field.endswith(p) for field in line.split()[2:4] for p in ports))


@pytest.mark.parametrize("how", ["add", "set"])
def test_conns_per_peer_reaches_socklnd(topology: Any, how: str) -> None:
    h, rn = topology.node("h"), topology.node("rn")
    for node in (h, rn):
        reinit(node)
    cpp = 4
    for node in (h, rn):
        if how == "add":
            run(node, f"net add --net tcp --if eth0 --conns-per-peer {cpp}")
        else:
            run(node, "net add --net tcp --if eth0")
            run(node, f"net set --all --conns-per-peer {cpp}")
        assert f"conns_per_peer: {cpp}" in run(node, "net show -v 1").out
    rnid = rn.lctl("list_nids").out.split()[0]

    def settled() -> bool:
        run(h, f"ping {rnid}")
        return _conns(h) == 1 + 2 * cpp

    wait_for(settled, timeout=30, interval=0.5)
    assert _conns(h) == 1 + 2 * cpp
