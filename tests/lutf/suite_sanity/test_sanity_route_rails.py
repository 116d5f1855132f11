"""sanity-lnet.sh test 550: with discovery disabled, a failure on one local rail keeps the
route up while the gateway is reachable through another local NI; the gateway going away
takes it down, at lustre-release c881f8ebcb. Nodes: ``routed-dd-mr.yaml``
(``setup_router_test lnet_peer_discovery_disabled=1`` and this host's second interface,
INTERFACES[1]).

This host gets a second NI on LOCAL_NET and is made a Multi-Rail peer everywhere (``peer add
--prim LNIDS[0] --nid LNIDS[1]`` on every node, this one too). A ping from the second NI
makes path selection prefer it; then every send from it fails with ``local_error`` (LNet drop
rules) and ``fail_loc=0x8000e020`` (CFS_FAIL_ONCE | CFS_FAIL_SOCK_CONN: socklnd_cb.c
``ksocknal_process_transmit`` closes the connection on the simulated error, so the LND tells
LNet the gateway's NI is dead, ``lnet_notify``). The ping fails; the route must not go down
within ``check_route_aliveness``'s wait and no "has gone from up to down" line may follow the
marker: the dead notification came through a local NI that another NI of the net supersedes
(router.c ``lnet_notify``, ``lnet_local_ni_superseded``). Stopping LNet on the router then
takes the route down."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import advance_until
from lutf.suite_sanity.routers import ALIVE_WAIT, LOCAL_NET, Routed
from lutf.suite_sanity.sanity import REMOTE_NET, fails, route_states, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed-dd-mr.yaml")]


def test_sanity_550_dd_off_route_up_while_gw_reachable_via_another_ni(
        module_topology: Any) -> None:
    tb = module_topology
    t = Routed(tb)
    me, r = t.l, tb.node("r")
    run(me, f"net add --net {LOCAL_NET} --if eth1")
    lnids = me.lctl("list_nids").out.split()
    assert len(lnids) == 2
    for node in (r, t.p, me):
        run(node, f"peer add --prim {lnids[0]} --nid {lnids[1]}")
    t.config_routes()
    run(me, f"ping --source {lnids[1]} {t.pnid}")
    t.alive(me, "up")
    mark = len(me.log())
    try:
        for net in (REMOTE_NET, LOCAL_NET):
            res = me.lctl(f"net_drop_add -s {lnids[1]} -d *@{net} -e local_error -r 1")
            assert res.rc == 0, res
        assert me.lctl("set_param fail_loc=0x8000e020").rc == 0
        fails(me, f"ping {t.pnid}")
        # check_route_aliveness ... down true: it must not get there within its wait
        waited = 0.0
        while waited <= ALIVE_WAIT:
            assert route_states(me) != ("down", "down", "down"), "route went down"
            tb.advance(1.0)
            waited += 1.0
        assert "has gone from up to down" not in me.log()[mark:]
        t.alive(me, "up")
    finally:
        me.lctl("set_param fail_loc=0")
        me.lctl("net_drop_del -a")
    run(r, "lnet unconfigure")
    advance_until(tb, lambda: route_states(me) == ("down", "down", "down"), ALIVE_WAIT,
                  "route down once the gateway stopped LNet")
