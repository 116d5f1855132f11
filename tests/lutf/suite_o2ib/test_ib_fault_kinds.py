"""Each IB fault kind through ``testbed fault add``, on Mininet and on the simulator (issue 28
item 3): what a user sees of it in ``lnetctl net show -v``/``peer show -v`` and ``testbed
events``.

``o2ib_mr.yaml``: c1 and s1 with two o2ib rails (ib0, ib1) and a tcp one (eth0, for the
refusal), Multi-Rail peers, health_sensitivity 100. Each fault hits rail 0; o2iblnd fails
the hit tx with the hstatus ``o2iblnd_cb.c`` gives it, LNet lowers the health of what was
hit, and the next messages avoid rail 0 (rail 1 and the tcp rail take them):

* ``rdma-error`` (s1 serves the RDMA WRITE of c1's PUT with REM_OP_ERR), ``rnr`` (s1's QP not
  ready: c1's SEND runs out of RNR retries), ``qp-error`` (c1's QP errs with a SEND in
  flight, the burst's first on rail 0, so it flushes; an error at a wall-clock instant would
  find a request outstanding or not by chance over loopback sockets):
  ``kiblnd_complete`` -> ``kiblnd_tx_complete``: -EIO, REMOTE_DROPPED, the peer NI blamed
  (its ``dropped`` counter, its health down: ``lnet_handle_remote_failure_locked``);
* ``cm-reject`` (s1 rejects every CONNREQ to its rail-0 NI, reason fatal; c1's rail-0
  connection closed by a qp-error in a first burst, health reset by hand before the next):
  ``kiblnd_rejected`` -> ``kiblnd_peer_connect_failed``: -ECONNREFUSED, REMOTE_DROPPED;
* ``port-down`` (IB_EVENT_PORT_ERR on c1's ib0: ``kiblnd_event_handler`` ->
  ``kiblnd_set_ni_fatal_on``): c1's NI fatal (``fatal_error``: 1, status down), LNet selects
  only ib1; ``fault del`` brings the port up.

``fault del`` undoes each (health reset by hand, a burst completes over rail 0 without a new
drop).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import local_nis, ok, peer_nis

pytestmark = [pytest.mark.mininet, pytest.mark.topology("o2ib_mr.yaml")]

C0, C1R1 = "10.50.0.1@o2ib", "10.51.0.1@o2ib"
S0, S1R1 = "10.50.0.2@o2ib", "10.51.0.2@o2ib"
MIB = 1 << 20


def _lpni(tb: Any) -> dict[str, dict[str, Any]]:
    return peer_nis(tb.node("c1"), S0)


def _sends(view: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {nid: int(v["statistics"]["send_count"]) for nid, v in view.items()}


def _burst(tb: Any, count: int = 8, *, all_ok: bool = True) -> dict[str, Any]:
    reply: dict[str, Any] = tb.node("c1").put(S0, count=count, size=MIB)
    assert reply["completed"] == count or not all_ok, reply
    return reply


def _setup(tb: Any) -> None:
    _burst(tb)  # both rails connected
    assert set(_sends(_lpni(tb))) >= {S0, S1R1}


def _remote_dropped(tb: Any, kind: str, before: dict[str, dict[str, Any]]) -> None:
    """REMOTE_DROPPED: s1's rail-0 peer NI counted it dropped and lost health (an
    ``lpni_health`` event says so); then the next burst goes all over rail 1."""
    after = _lpni(tb)
    hs = after[S0]["health stats"]
    assert hs["dropped"] > before[S0]["health stats"]["dropped"], (kind, hs)
    assert hs["timeout"] == before[S0]["health stats"]["timeout"], (kind, hs)
    assert hs["health value"] < 1000, (kind, hs)
    assert after[S1R1]["health stats"]["health value"] > hs["health value"], (kind, after)
    drops = [e for e in tb.events() if e["kind"] == "lpni_health" and e.get("nid") == S0]
    # a recovery ping that succeeds afterwards may already raise it again ("ok" notices)
    assert any(e["new"] < e["old"] and e["cause"] == "error" for e in drops), drops
    sent = _sends(after)
    _burst(tb)
    moved = {n: v - sent[n] for n, v in _sends(_lpni(tb)).items()}
    assert moved[S0] == 0 and moved[S1R1] >= 1 and sum(moved.values()) == 8, moved


def _undone(tb: Any) -> None:
    """After ``fault del``: health back by hand, a burst uses rail 0 again with no drop."""
    c1 = tb.node("c1")
    ok(c1, "lnetctl", "peer set --all --health 1000")
    before = _lpni(tb)
    _burst(tb, 16)
    after = _lpni(tb)
    assert after[S0]["health stats"]["dropped"] == before[S0]["health stats"]["dropped"]
    assert _sends(after)[S0] > _sends(before)[S0]


def _fault_events(tb: Any, fid: str) -> list[str]:
    return [e["kind"] for e in tb.events() if e["kind"].startswith("fault_")
            and e.get("id") == fid]


@pytest.mark.parametrize("kind", ["rdma-error", "rnr", "qp-error", "cm-reject"])
def test_ib_fault_is_remote_dropped_and_lnet_moves_to_rail1(topology: Any, kind: str) -> None:
    tb = topology
    _setup(tb)
    before = _lpni(tb)
    if kind == "qp-error":  # c1's rail-0 QP errs with the burst's first SEND in flight
        f = tb.fault.add(kind, node="c1", iface="ib0")
        _burst(tb, 8)
    elif kind == "cm-reject":  # c1's rail-0 connection closed (qp-error), its reconnect refused
        f = tb.fault.add(kind, node="s1", iface="ib0", reason="fatal")
        qp = tb.fault.add("qp-error", node="c1", iface="ib0")
        _burst(tb, all_ok=False)
        tb.fault.delete(qp["id"])
        ok(tb.node("c1"), "lnetctl", "peer set --all --health 1000")
        before = _lpni(tb)  # what the refused reconnects do, not the qp-error's drop
        _burst(tb, all_ok=False)  # ib1 -> s1's rail-0 NID has no path: -EHOSTUNREACH
    else:
        f = tb.fault.add(kind, node="s1", iface="ib0", **({"ms": 2000} if kind == "rnr"
                                                          else {}))
        _burst(tb)
    assert f["spec"]["iface"] == "ib0"
    _remote_dropped(tb, kind, before)
    tb.fault.delete(f["id"])
    assert _fault_events(tb, f["id"])[:2] == ["fault_added", "fault_applied"]
    assert _fault_events(tb, f["id"])[-2:] == ["fault_reverted", "fault_deleted"]
    _undone(tb)


def test_port_down_makes_the_ni_fatal_and_del_brings_it_up(topology: Any) -> None:
    tb = topology
    c1 = tb.node("c1")
    _setup(tb)
    f = tb.fault.add("port-down", node="c1", iface="ib0")
    tb.advance(1.0)  # (Mininet: linkwatch sees the carrier go)
    ni = local_nis(c1)[C0]
    assert (ni["status"], ni["health stats"]["fatal_error"]) == ("down", 1), ni
    assert local_nis(c1)[C1R1]["status"] == "up"
    sent = {nid: v["statistics"]["send_count"] for nid, v in local_nis(c1).items()}
    _burst(tb, all_ok=False)  # ib1 -> s1's rail-0 NID has no path: some end -EHOSTUNREACH
    moved = {nid: v["statistics"]["send_count"] - sent[nid]
             for nid, v in local_nis(c1).items()}
    assert moved[C0] == 0 and moved[C1R1] >= 1, moved
    assert any(e["kind"] == "link_down" and e.get("iface") == "ib0" for e in tb.events())
    tb.fault.delete(f["id"])
    tb.advance(1.0)
    ni = local_nis(c1)[C0]
    assert (ni["status"], ni["health stats"]["fatal_error"]) == ("up", 0), ni
    assert _fault_events(tb, f["id"]) == ["fault_added", "fault_applied", "fault_reverted",
                                          "fault_deleted"]


@pytest.mark.parametrize("kind", ["qp-error", "rnr", "rdma-error", "port-down", "cm-reject"])
def test_ib_fault_on_a_tcp_ni_is_one_line(topology: Any, kind: str) -> None:
    from testbed.base import TestbedError

    with pytest.raises(TestbedError) as exc:
        topology.fault.add(kind, node="c1", iface="eth0")
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.endswith(f"{kind}: node c1 interface eth0 is not an o2ib NI (10.52.0.1@tcp); "
                        "IB faults act on an o2ib NI's ib* interface"), msg
    assert topology.fault.list() == []
