"""The route_down invariant: a route goes down only when its gateway's NIs say so (spec §6.3,
§6.4).

Theory of operation: ``RouteCheck`` is fed every event (``handle``) after the ``Tracker``
(``check_state.py``); it remembers the last failure seen by each node about each peer NI
(errors, notices, health drops, failed sends by the message trace) and when each route was
last up, and for every route that goes down (but by configuration) asks for ``evidence`` that
the gateway was unusable. O(1) amortised per event.
"""

from __future__ import annotations

from typing import Any

from testbed.observe.check_state import Tracker, net_of
from testbed.observe.checktypes import Inv, Item

#: ``route_state`` reasons that are configuration, not failure
CONFIG_REASONS = ("added", "deleted", "config")


class RouteCheck:
    """A route goes down only when its gateway's NIs say so (spec §6.3, §6.4)."""

    def __init__(self, inv: Inv, tracker: Tracker) -> None:
        self.inv = inv
        self.tracker = tracker
        # (node, peer NID) -> last failure event about that peer NI seen on node
        self.failures: dict[tuple[str, str], Item] = {}
        # route -> (index, t) of the event that last showed it up
        self.up_at: dict[tuple[str, str, str], tuple[int, float | None]] = {}
        self.last_lpni: dict[tuple[str, Any], str] = {}   # (node, msg) -> lpni of last send

    def handle(self, item: Item) -> None:
        _idx, ev = item
        kind = ev["kind"]
        node = ev.get("node")
        if not isinstance(node, str):
            return
        if kind in ("lpni_error", "notify_peer_down") or (
                kind == "lpni_status" and not ev.get("healthy", True)) or (
                kind == "lpni_health" and isinstance(ev.get("new"), int)
                and isinstance(ev.get("old"), int) and ev["new"] < ev["old"]) or (
                kind == "peer_notify" and ev.get("alive") is False):
            nid = ev.get("nid") or ev.get("lpni")
            if isinstance(nid, str):
                self.failures[(node, nid)] = item
        elif kind == "msg":
            self._msg(item)
        elif kind == "route_state":
            self._route(item)

    def _msg(self, item: Item) -> None:
        _idx, ev = item
        key = (str(ev.get("node")), ev.get("msg"))
        what = ev.get("event")
        if what == "send" and isinstance(ev.get("lpni"), str):
            self.last_lpni[key] = ev["lpni"]
        elif what in ("resend", "complete"):
            lpni = self.last_lpni.get(key) if what == "resend" else self.last_lpni.pop(key, None)
            failed = what == "resend" or (isinstance(ev.get("status"), int) and ev["status"])
            if lpni is not None and failed:
                self.failures[(key[0], lpni)] = item

    def _route(self, item: Item) -> None:
        idx, ev = item
        node, net, gw = str(ev.get("node")), str(ev.get("net")), str(ev.get("gateway"))
        rkey = (node, net, gw)
        if ev.get("state") != "down":
            t = ev.get("t")
            self.up_at[rkey] = (idx, float(t) if isinstance(t, int | float) else None)
            return
        self.inv.checked += 1
        reason = str(ev.get("reason") or "")
        if any(word in reason for word in CONFIG_REASONS):
            return
        proof = self.evidence(node, net, gw, *self.up_at.get(rkey, (-1, None)))
        if proof is None:
            self.inv.flag(f"route to {net} via {gw} on {node} went down (reason "
                          f"{reason or 'none'}) with no sign that the gateway's NIs are "
                          "unusable", [item])

    def evidence(self, node: str, net: str, gw: str, since: int,
                 since_t: float | None = None) -> Item | None:
        """An event showing gateway ``gw`` unusable for ``node`` (None if there is none): a
        failure counts if it came after the route was last up (index ``since``) or in the
        same instant (``since_t``). One instant of a node is one engine call on the sim,
        whose message trace is logged before the notices drained after it, so a failed ping
        or push of the gateway can be logged before the ``route_state`` up it followed;
        and real LNet marks the routes down on any failed router discovery (router.c
        ``lnet_router_discovery_complete``: ``lp_dc_error`` set by a ping that timed out,
        peer.c ``lnet_discovery_event_unlink``, or a push that failed,
        ``lnet_peer_push_failed``), even right after a reply or push took them up (explore
        seeds 593, 630, 715, 766)."""
        tr = self.tracker
        gnode = tr.owner.get(gw)
        gw_nids = {gw}
        if gnode is not None:
            gst = tr.node(gnode)
            for n in (net, net_of(gw)):
                gw_nids |= gst.nets.get(n, set())
            for nid in gw_nids:
                found = gst.fatal.get(nid) or gst.down.get(nid)
                if found is not None:
                    return found
                # down since the route was last up, up again by now: the push or ping reply
                # that carried the down status can land after it (router.c
                # lnet_router_discovery_ping_reply reads the snapshot; explore multihop 27)
                found = gst.was_down.get(nid)
                if found is not None and (found[0] > since or (
                        since_t is not None and found[1].get("t") == since_t)):
                    return found
            if gst.routing is not None and (not gst.routing_on or gst.rte_disabled):
                return gst.routing
            if gst.dead is not None:
                return gst.dead
            if gst.cut:
                return next(iter(gst.cut.values()))
            for nids in gst.nets.values():  # a failure on any NI of the gateway counts
                gw_nids |= nids
        ast = tr.node(node)
        if ast.cut:
            return next(iter(ast.cut.values()))
        for nid in gw_nids:
            found = self.failures.get((node, nid))
            if found is not None and (found[0] > since or (
                    since_t is not None and found[1].get("t") == since_t)):
                return found
        return None
