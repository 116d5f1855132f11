"""sanity-lnet.sh tests 236 (a local NI's state reaches the router), 237 and 238 (MR
forwarding, and no MR forwarding for a non-MR source, under fail_loc CFS_FAIL_RTR_HEALTH_INC
on the router), at lustre-release c881f8ebcb. Nodes: ``routed.yaml``; ``setup_router_test
-m`` adds LOCAL_NET2 (tcp2) on the router and this host and REMOTE_NET2 (tcp3) on the router
and the remote peer. sanity-lnet's nodes have one interface each, every net on it; here the
router's tcp/tcp2 are on its interface on this host's segment (eth0) and tcp1/tcp3 on the
remote peer's (eth1).

``do_mr_forwarding_test``: this host discovers the remote peer; on the router fail_loc 0xe004
(a received message does not reset a router's peer NI to full health, lib-msg.c
``lnet_health_check``), health_sensitivity 0 and the remote peer's first NI at health 0;
50 pings from this host's first NID to that NI. A router forwarding for a Multi-Rail source
picks the peer's healthier NI (lib-move.c ``lnet_select_pathway``: the final destination's
best peer NI when the source is MR), so the second NI's ``send_count`` grows by at least 50;
for a non-MR source (discovery off on this host, test 238) it must not."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import advance_until
from lutf.suite_sanity.routers import LOCAL_NET, Routed
from lutf.suite_sanity.sanity import REMOTE_NET, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed.yaml")]
LOCAL_NET2, REMOTE_NET2 = "tcp2", "tcp3"


def _nids(node: Any) -> list[str]:
    return list(node.lctl("list_nids").out.split())


class RoutedMR(Routed):
    """``setup_router_test -m``."""

    def __init__(self, tb: Any) -> None:
        super().__init__(tb)
        r = tb.node("r")
        run(r, f"net add --net {LOCAL_NET2} --if eth0")
        run(r, f"net add --net {REMOTE_NET2} --if eth1")
        run(self.p, f"net add --net {REMOTE_NET2} --if eth0")
        run(self.l, f"net add --net {LOCAL_NET2} --if eth0")
        self.rnids = {"r": _nids(r)}
        self.pnids = _nids(self.p)


def _send_counts(r: Any, nid: str) -> list[int]:
    """``peer show -v --nid NID | awk '/send_count/{print $NF}'``."""
    out = run(r, f"peer show -v --nid {nid}").out
    return [int(line.split()[-1]) for line in out.splitlines()
            if line.strip().startswith("send_count:")]


def _mr_forwarding(t: RoutedMR, expect_mr_forwarding: bool) -> None:
    """``do_mr_forwarding_test``."""
    r = t.tb.node("r")
    run(t.l, f"discover {t.pnids[0]}")
    sens = yaml.safe_load(run(r, "global show").out)["global"]["health_sensitivity"]
    try:
        assert r.lctl("set_param fail_loc=0xe004").rc == 0
        run(r, "set health_sensitivity 0")
        run(r, f"peer set --health 0 --nid {t.pnids[0]}")
        pre = _send_counts(r, t.pnids[0])
        for _ in range(50):
            run(t.l, f"ping --source {t.lnid} {t.pnids[0]}")
        post = _send_counts(r, t.pnids[0])
    finally:
        assert r.lctl("set_param fail_loc=0").rc == 0
        run(r, f"set health_sensitivity {sens}")
    assert len(pre) == 2 and len(post) == 2, (pre, post)
    if expect_mr_forwarding:
        assert post[1] - pre[1] >= 50, (pre, post)
    else:
        assert post[1] - pre[1] < 50, (pre, post)


def test_sanity_237_mr_forwarding(module_topology: Any) -> None:
    t = RoutedMR(module_topology)
    t.basic()
    _mr_forwarding(t, True)


def test_sanity_238_mr_forwarding_skipped_for_non_mr_source(module_topology: Any) -> None:
    t = RoutedMR(module_topology)
    run(t.l, "set discovery 0")
    try:
        t.basic()
        shown = yaml.safe_load(run(t.tb.node("r"), f"peer show --nid {t.lnid}").out)
        assert [p["Multi-Rail"] for p in shown["peer"]] == [False]
        _mr_forwarding(t, False)
    finally:
        run(t.l, "set discovery 1")


def _ni_status(node: Any, nid: str) -> str:
    """``check_ni_status``: the status line after the NID in ``net show``."""
    for net in yaml.safe_load(node.lnetctl("net show").out)["net"]:
        for ni in net["local NI(s)"]:
            if ni["nid"] == nid:
                return str(ni["status"])
    return ""


def _remote_peer_ni_state(node: Any, nid: str) -> str:
    """``check_remote_peer_ni_status``: the ``state`` of peer NI ``nid`` on ``node``."""
    shown = yaml.safe_load(node.lnetctl(f"peer show --nid {nid}").out or "{}") or {}
    return " ".join(str(ni.get("state")) for peer in shown.get("peer", [])
                    for ni in peer["peer ni"] if ni["nid"] == nid)


def test_sanity_236_local_ni_state_propagates_to_routers(module_topology: Any) -> None:
    tb = module_topology
    t = Routed(tb)
    t.basic()
    r = tb.node("r")
    run(t.l, f"net add --net {REMOTE_NET2} --if eth0")
    run(r, f"net add --net {REMOTE_NET2} --if eth0")
    nid1, nid2 = _nids(t.l)[0], _nids(t.l)[-1]
    assert (_ni_status(t.l, nid1), _ni_status(t.l, nid2)) == ("up", "up")

    def remote(nid: str, expect: str) -> None:
        advance_until(tb, lambda: _remote_peer_ni_state(r, nid) == expect, 60,
                      f"{nid} {expect} on the router")

    remote(nid1, "up")
    remote(nid2, "up")
    try:
        assert t.l.lctl(f"net_drop_add -s {nid1} -d {nid1} -r 1 -e local_timeout").rc == 0
        run(t.l, f"net set --health 0 --nid {nid1}")
        assert (_ni_status(t.l, nid1), _ni_status(t.l, nid2)) == ("down", "up")
        remote(nid1, "down")
        remote(nid2, "up")
    finally:
        t.l.lctl("net_drop_del -a")
    run(t.l, f"net set --health 900 --nid {nid1}")
    advance_until(tb, lambda: _ni_status(t.l, nid1) == "up", 60, "NI status up")
    remote(nid1, "up")
    remote(nid2, "up")
    assert LOCAL_NET in nid1 and REMOTE_NET not in nid1
