"""``lctl set_route`` (portals.c ``jt_ptl_notify_router``: ``lnet_notify`` from userspace) and
``lctl get_param routers`` (lnet_debugfs.c ``proc_lnet_routers``: ``lnet_is_gateway_alive``),
on the sim's node daemon verbs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.sim import SimTestbed

R1, R1_FAR = "10.46.0.2@tcp", "10.47.0.1@tcp1"


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    topo = tmp_path / "routed.yaml"
    topo.write_text(
        "name: setroute\nglobal: {alive_router_check_interval: 5, router_ping_timeout: 5}\n"
        "networks:\n  lan0: {lnet: tcp, subnet: 10.46.0.0/24}\n"
        "  lan1: {lnet: tcp1, subnet: 10.47.0.0/24}\n"
        "nodes:\n  c: {interfaces: [lan0], routes: [{net: tcp1, gateway: r, hop: 1}]}\n"
        "  r: {interfaces: [lan0, lan1], routing: true}\n"
        "  s: {interfaces: [lan1], routes: [{net: tcp, gateway: r, hop: 1}]}\n")
    return SimTestbed.up(topo, seed=1)


def _routers(tb: SimTestbed) -> str:
    res = tb.node("c").lctl("get_param", "-n", "routers")
    assert res.rc == 0, res.err
    return res.out


def _state(tb: SimTestbed, nid: str) -> str:
    view = tb.node("c").yaml("peer show -v")
    return next(p["state"] for peer in view["peer"] for p in peer["peer ni"] if p["nid"] == nid)


def test_lnet_is_gateway_alive_in_get_param_routers(tb: SimTestbed) -> None:
    """``proc_lnet_routers`` prints ``lnet_is_gateway_alive``: ``lp_alive`` and an alive peer
    NI on every net of the gateway, not its routes' state. A userspace notice that r's NI is
    dead takes r down; saying it alive again brings it back (``lp_alive`` was never cleared:
    no reset); a route down on its own flag leaves the gateway up; ``lp_alive`` cleared takes
    it down whatever its NIs say."""
    assert _routers(tb).splitlines()[1].split() == ["1", "1", "up", R1]
    c = tb.node("c")
    assert c.lctl("set_route", R1, "down").rc == 0
    assert _state(tb, R1) == "down"
    assert _routers(tb).splitlines()[1].split()[2] == "down"
    assert c.lctl("set_route", R1, "up").rc == 0
    assert _state(tb, R1) == "up" and _state(tb, R1_FAR) == "up"
    assert _routers(tb).splitlines()[1].split()[2] == "up"
    table = tb.runtimes["c"].engine.router.table
    (route,) = table.all_routes()
    route.alive = False  # the route's own lr_alive: not the gateway's aliveness
    assert tb.node("c").yaml("route show -v")["route"][0]["state"] == "down"
    assert _routers(tb).splitlines()[1].split()[2] == "up"
    (gw,) = table.gateways()
    gw.alive = False  # lp_alive cleared (as a failed router ping does): down whatever NIs say
    assert _routers(tb).splitlines()[1].split()[2] == "down"


@pytest.mark.parametrize(("argv", "err"), [
    ([], "usage: set_route targetNID <up/down> [<time>]\n"),
    (["10.46.0.2@tcp"], "usage: set_route targetNID <up/down> [<time>]\n"),
    (["nonsense", "up"], "Can't parse target NID \"nonsense\"\n"),
    (["10.46.0.2@tcp", "maybe"], "Can't parse boolean maybe\n"),
    (["10.46.0.2@tcp", "up", "soon"], "Can't parse time soon\n Please specify either "
     "'YYYY-MM-DD-HH:MM:SS'\n or an absolute unix time in seconds\n"),
])
def test_set_route_refuses_bad_input_in_one_line(tb: SimTestbed, argv: list[str],
                                                  err: str) -> None:
    res = tb.node("c").lctl("set_route", *argv)
    assert res.err == err


def test_set_route_time_in_the_future_refused_older_than_the_last_notice_ignored(
        tb: SimTestbed) -> None:
    """``jt_ptl_notify_router`` refuses a time in the future; ``lnet_notify`` ignores a notice
    older than the last one it had about that peer NI (``lpni_timestamp``: here the socklnd's
    birth notice at bring-up, seconds ago)."""
    c = tb.node("c")
    future = str(int(time.time()) + 3600)
    res = c.lctl("set_route", R1, "down", future)
    assert (res.rc, res.err) == (1, f"{future} specifies a time in the future\n")
    assert _state(tb, R1) == "up"
    assert c.lctl("set_route", R1, "off", str(int(time.time()) - 3600)).rc == 0
    assert _state(tb, R1) == "up"  # out of date
    assert c.lctl("set_route", R1, "off").rc == 0
    assert _state(tb, R1) == "down"
