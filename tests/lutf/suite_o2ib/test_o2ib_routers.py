"""o2iblnd between fabrics (issue 28): clients on o2ib, servers on tcp, two routers.

Runs on Mininet (the node daemons' o2iblnd over sockets between ``ib*`` addresses, port 987)
and on the simulator. Real LNet: o2iblnd (lnet/klnds/o2iblnd) carries LNet messages on the IB
side, ksocklnd on the Ethernet side, the routers forward (seed 002 mixed-net routing).
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import delta, lnet_error, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("o2ib-tcp-routers")]

KEY = "2828"
C1, S1 = "10.40.0.1@o2ib", "10.10.0.3@tcp"
MIB = 1 << 20


def lst(tb: Any, *argv: str) -> str:
    r = tb.node("c1").exec(["env", f"LST_SESSION={KEY}", "lst", *argv], timeout=120)
    assert (r.rc, r.err) == (0, ""), (argv, r)
    return str(r.out)


def o2ib_connections(tb: Any, node: str) -> int:
    """The node's o2iblnd connections: port 987 sockets on Mininet, the sim's o2iblnd."""
    fabric = getattr(tb, "fabric", None)
    if fabric is not None:
        lnd = fabric.o2ib.lnds.get(node)
        return 0 if lnd is None else sum(len(p.conns) for p in lnd.peers.values())
    out = tb.node(node).exec(["cat", "/proc/net/tcp"]).out
    return sum(1 for line in out.splitlines()[1:]
               if line.split()[3] == "01" and ":03DB" in line.split()[1] + line.split()[2])


def test_lst_brw_client_to_server_through_the_routers(topology: Any) -> None:
    """lst brw write of 1 MiB from c1 (o2ib) to s1 (tcp): no brw errors, the bulk went
    through the routers (their route counts grew by at least the bytes moved)."""
    tb = topology
    before = {r: stats(tb.node(r)) for r in ("r1", "r2")}
    lst(tb, "new_session", "o2")
    lst(tb, "add_group", "clients", C1)
    lst(tb, "add_group", "servers", S1)
    lst(tb, "add_batch", "b")
    lst(tb, "add_test", "--batch", "b", "--loop", "16", "--concurrency", "2", "--from",
        "clients", "--to", "servers", "brw", "write", "size=1M")
    lst(tb, "run", "b")
    end = tb.now + 120
    while lst(tb, "query", "b") != "b [0] is stopped\n":
        assert tb.now < end, "batch still running"
        tb.advance(0.5)
    assert lst(tb, "show_error", "clients", "servers") == (
        "clients:\nTotal 0 error nodes in clients\nservers:\nTotal 0 error nodes in servers\n")
    routed = sum(delta(stats(tb.node(r)), before[r])["route_length"] for r in ("r1", "r2"))
    assert routed >= 16 * MIB
    assert o2ib_connections(tb, "c1") >= 1
    lst(tb, "end_session")


def test_o2ib_net_on_an_eth_interface_is_one_line(topology: Any) -> None:
    r = topology.node("s1").exec(["lnetctl", "net", "add", "--net", "o2ib1", "--if", "eth0"])
    assert r.rc != 0
    assert lnet_error(r)["descr"] == ("cannot add network: o2ib1 needs an IPoIB interface "
                                      "(ib*), not eth0")


def test_port_down_on_one_router_moves_traffic_to_the_other(topology: Any) -> None:
    """IB port down on r1 (its ib0 carrier gone): r1's o2ib NI goes fatal, c1's route through
    r1 goes down once its router checks fail, and later traffic all goes through r2."""
    tb = topology
    assert tb.node("c1").put(S1, count=8, size=MIB)["completed"] == 8
    tb.link("r1", "ib0", "down")
    end = tb.now + 60
    while True:
        routes = {r["gateway"]: r["state"] for r in
                  tb.node("c1").yaml("route show -v")["route"]}
        if routes.get("10.40.0.3@o2ib") == "down":
            break
        assert tb.now < end, routes
        tb.advance(1.0)
    assert routes["10.40.0.4@o2ib"] == "up"
    before = {r: stats(tb.node(r)) for r in ("r1", "r2")}
    assert tb.node("c1").put(S1, count=16, size=MIB)["completed"] == 16
    moved = {r: delta(stats(tb.node(r)), before[r])["route_count"] for r in ("r1", "r2")}
    assert moved["r1"] == 0 and moved["r2"] >= 16, moved
