"""setup_router_test / config_routes / check_route_aliveness of sanity-lnet.sh, on the
``routed*.yaml`` nodes: this host ``l`` (tcp), routers ``r``/``r2`` (tcp and tcp1), remote
peer ``p`` (tcp1)."""

from __future__ import annotations

from typing import Any

from lutf.lnet_views import advance_until
from lutf.suite_sanity.sanity import REMOTE_NET, fails, ni_status, route_states, run

LOCAL_NET = "tcp"
#: 2 * (alive_router_check_interval + router_ping_timeout) of the topologies (5 + 5)
ALIVE_WAIT = 20.0


class Routed:
    def __init__(self, tb: Any, routers: tuple[str, ...] = ("r",)) -> None:
        self.tb, self.routers = tb, routers
        self.l, self.p = tb.node("l"), tb.node("p")
        for name in ("l", *routers, "p"):
            node = tb.node(name)
            run(node, "lnet unconfigure")
            run(node, "lnet configure")
        for r in routers:
            run(tb.node(r), f"net add --net {LOCAL_NET} --if eth0")
            run(tb.node(r), f"net add --net {REMOTE_NET} --if eth1")
        run(self.p, f"net add --net {REMOTE_NET} --if eth0")
        run(self.l, f"net add --net {LOCAL_NET} --if eth0")
        self.rnids = {r: tb.node(r).lctl("list_nids").out.split() for r in routers}
        self.lnid = self.l.lctl("list_nids").out.split()[0]
        self.pnid = self.p.lctl("list_nids").out.split()[0]

    def route_l(self, r: str = "r") -> None:
        run(self.l, f"route add --net {REMOTE_NET} --gateway {self.rnids[r][0]}")

    def route_p(self, r: str = "r") -> None:
        run(self.p, f"route add --net {LOCAL_NET} --gateway {self.rnids[r][1]}")

    def routing(self, on: bool = True) -> None:
        for r in self.routers:
            run(self.tb.node(r), f"set routing {int(on)}")

    def alive(self, node: Any, expect: str) -> None:
        """``check_route_aliveness NODE EXPECT``: lctl, lnetctl and debugfs agree."""
        want = (expect, expect, expect)
        advance_until(self.tb, lambda: route_states(node) == want, ALIVE_WAIT,
                      f"routes {expect} on all three views")

    def router_nis(self, local: str, remote: str, r: str = "r") -> None:
        """``check_router_ni_status`` (waits chk_intvl + timeout)."""
        node = self.tb.node(r)
        advance_until(self.tb, lambda: (ni_status(node, LOCAL_NET),
                                        ni_status(node, REMOTE_NET)) == (local, remote),
                      10.0, f"router NIs {local}/{remote}")

    def config_routes(self) -> None:
        self.routing()
        for r in self.routers:
            self.route_l(r)
            self.route_p(r)
        self.alive(self.l, "up")
        self.alive(self.p, "up")

    def basic(self) -> None:
        """``do_basic_rtr_test``."""
        self.config_routes()
        run(self.l, f"ping {self.pnid}")
        run(self.p, f"ping {self.lnid}")

    def aarf_enabled(self) -> None:
        """``do_aarf_enabled_test``: a route comes up only when both router NIs are up."""
        self.routing()
        self.router_nis("down", "down")
        fails(self.l, f"ping {self.pnid}")
        fails(self.p, f"ping {self.lnid}")
        self.route_l()
        self.router_nis("up", "down")
        self.alive(self.l, "down")
        fails(self.l, f"ping {self.pnid}")
        fails(self.p, f"ping {self.lnid}")
        self.route_p()
        self.router_nis("up", "up")
        self.alive(self.l, "up")
        self.alive(self.p, "up")
        run(self.l, f"ping {self.pnid}")
        run(self.p, f"ping {self.lnid}")
        run(self.l, "lnet unconfigure")
        self.router_nis("down", "up")
        self.alive(self.p, "down")
        fails(self.p, f"ping {self.lnid}")

    def aarf_disabled(self) -> None:
        """``do_aarf_disabled_test``: a route is up as soon as its gateway answers, whatever
        the router's far side; it stays up for the peer when this host stops LNet."""
        self.routing()
        self.router_nis("down", "down")
        self.route_l()
        self.router_nis("up", "down")
        self.alive(self.l, "up")
        self.route_p()
        self.router_nis("up", "up")
        self.alive(self.l, "up")
        self.alive(self.p, "up")
        run(self.l, f"ping {self.pnid}")
        run(self.p, f"ping {self.lnid}")
        run(self.l, "lnet unconfigure")
        self.router_nis("down", "up")
        self.alive(self.p, "up")
