"""The IB fault kinds on the simulator (issue 28): each one's hstatus, the health change it
causes and where LNet sends next. Two o2ib rails between c1 and s1 (Multi-Rail), so LNet has
somewhere to go: a fault on rail 0 must show as the hstatus o2iblnd_cb.c gives it, lower the
health LNet keeps for the NI or peer NI it hit (health_sensitivity 100), and the next
messages must go over rail 1 (selection prefers the healthier one, spec §2).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import testbed
from nodes.lnet.nid import NID
from nodes.o2ib import ibfaults
from nodes.o2ib import msg as M
from testbed.sim import SimTestbed

C0, C1R1 = "10.50.0.1@o2ib", "10.51.0.1@o2ib"
S0, S1R1 = "10.50.0.2@o2ib", "10.51.0.2@o2ib"
MIB = 1 << 20
MR = textwrap.dedent("""\
    name: o2mr
    global: {health_sensitivity: 100, retry_count: 2, transaction_timeout: 10}
    networks:
      rail0: {lnet: o2ib, subnet: 10.50.0.0/24}
      rail1: {lnet: o2ib, subnet: 10.51.0.0/24}
    nodes:
      c1: {interfaces: [rail0, rail1], peers: [s1]}
      s1: {interfaces: [rail0, rail1], peers: [c1]}
    """)


@pytest.fixture
def mr(tmp_path: Path) -> SimTestbed:
    (tmp_path / "o2mr.yaml").write_text(MR)
    tb = testbed.up(str(tmp_path / "o2mr.yaml"), backend="sim", seed=7)
    assert isinstance(tb, SimTestbed)
    assert tb.node("c1").put(S0, count=8, size=MIB)["completed"] == 8  # both rails connected
    return tb


def after(tb: SimTestbed, start: int, kind: str, node: str = "c1") -> list[dict]:
    return [e for e in tb.events()[start:] if e["kind"] == kind and e["node"] == node]


def run_fault(tb: SimTestbed, inject: Callable[[], None], *, count: int = 4) -> int:
    """``inject`` 2.5 ms into a burst of ``count`` 1 MiB PUTs from c1 to s1; LNet's resends
    complete them all."""
    fab = tb.fabric
    start = len(tb.events())
    fab.at(fab.now + 0.0025, inject)
    assert tb.node("c1").put(S0, count=count, size=MIB)["completed"] == count
    return start


def next_sends_on_rail1(tb: SimTestbed, start: int, *, field: str = "lpni") -> None:
    """What LNet sent once the first failure came back (the resends, while the hit peer NI's
    health is down) avoids what the fault hit: s1's rail-0 peer NI, or c1's rail-0 NI
    (``field="ni"``: it is down)."""
    evs = [e for e in tb.events()[start:] if e["node"] == "c1"]
    first = next(i for i, e in enumerate(evs) if e["kind"] == "tx_done" and e["rc"])
    used = {e[field] for e in evs[first:] if e["kind"] == "send"}
    assert used == ({S1R1} if field == "lpni" else {C1R1}), used


def lpni_health_dropped(tb: SimTestbed, start: int, nid: str) -> None:
    drops = [e for e in after(tb, start, "lpni_health") if e["nid"] == nid]
    assert drops and drops[0]["new"] < drops[0]["old"], drops


def failures(tb: SimTestbed, start: int) -> set[tuple[int, str]]:
    return {(e["rc"], e["hstatus"]) for e in after(tb, start, "tx_done") if e["rc"]}


def _qp_error(o2: Any) -> None:
    o2.run("c1", ibfaults.qp_error(o2.lnds["c1"], NID.parse(C0)))


def _rdma_error(o2: Any) -> None:
    ibfaults.fail_next_rdma(o2.lnds["s1"], 1, NID.parse(S0))


def _rnr(o2: Any) -> None:
    ibfaults.rnr(o2.lnds["s1"], 1.0, NID.parse(S0))


@pytest.mark.parametrize("inject", [_qp_error, _rdma_error, _rnr], ids=["qp-error",
                                                                       "rdma-error", "rnr"])
def test_ib_fault_is_remote_dropped_and_lnet_moves_to_rail1(
        mr: SimTestbed, inject: Callable[[Any], None]) -> None:
    """Mid-burst on rail 0, each ends the hit txs as kiblnd_tx_complete does (-EIO,
    REMOTE_DROPPED): qp-error flushes c1's posted WRs (WR_FLUSH_ERR); rdma-error has s1
    fail the RDMA WRITE of c1's PUT (REM_OP_ERR, the PUT_DONE flushed); rnr has s1's QP not
    ready for 1 s, so c1's SEND retries every 10 ms 6 times (rnr_retry_count), then
    RNR_RETRY_EXC_ERR. s1's rail-0 peer NI loses health and the resends go over rail 1."""
    tb = mr
    start = run_fault(tb, lambda: inject(tb.fabric.o2ib))
    assert failures(tb, start) == {(-5, "REMOTE_DROPPED")}
    lpni_health_dropped(tb, start, S0)
    next_sends_on_rail1(tb, start)


def test_cm_reject_fatal_is_remote_dropped_on_reconnect(mr: SimTestbed) -> None:
    """s1 rejects every CONNREQ to its rail-0 NI (FATAL); c1's rail-0 connection is gone
    (a qp-error took the first SEND of a burst; health then reset by hand), so the next
    burst's rail-0 txs wait for a connection that is refused:
    kiblnd_peer_connect_failed(-ECONNREFUSED):
    REMOTE_DROPPED, lnet_notify(dead)."""
    tb = mr
    o2 = tb.fabric.o2ib
    o2.lnds["s1"].forced_reject = M.RejectReason.FATAL
    o2.lnds["s1"].forced_reject_ni = NID.parse(S0)
    o2.run("c1", ibfaults.qp_error(o2.lnds["c1"], NID.parse(C0)))
    tb.node("c1").put(S0, count=4, size=MIB)
    assert not [c for c in o2.lnds["c1"].streams.values() if c.peer == NID.parse(S0)]
    assert tb.node("c1").lnetctl("peer set --all --health 1000").rc == 0
    tb.advance(1.0)
    start = len(tb.events())
    tb.node("c1").put(S0, count=4, size=MIB)
    assert failures(tb, start) == {(-111, "REMOTE_DROPPED")}
    assert o2.lnds["s1"].rejects_sent[int(M.RejectReason.FATAL)] >= 1
    assert [(e["lpni"], e["alive"]) for e in after(tb, start, "peer_notify")][:1] == [
        (S0, False)]
    next_sends_on_rail1(tb, start)


def test_port_down_makes_the_ni_fatal_and_lnet_moves_to_rail1(mr: SimTestbed) -> None:
    """c1's ib0 loses its link (IB_EVENT_PORT_ERR): its QPs stop (the burst's rail-0 txs
    flush: -EIO, REMOTE_DROPPED), the NI goes down (ni_fatal_error_on) and LNet sends on
    rail 1 only."""
    tb = mr
    start = run_fault(tb, lambda: tb.link("c1", "ib0", "down"))
    assert failures(tb, start) <= {(-5, "REMOTE_DROPPED")}
    nis = {ni["nid"]: ni["status"] for net in tb.node("c1").lnetctl_yaml("net show")["net"]
           for ni in net["local NI(s)"]}
    assert nis[C0] == "down" and nis[C1R1] == "up"
    next_sends_on_rail1(tb, start, field="ni")
