"""State the invariant checker follows through a log, and the two state invariants.

Theory of operation: ``Tracker`` keeps, per node, what the log has said so far about its local
NIs (fatal = link down per ``ni_link``/``ni_status``; status down), its routing switch, its
health sensitivity, whether its process is alive, and which node owns each NID (learnt from
every event in which a node names one of its own NIs). ``HealthCheck`` checks health values
against spec §3.1/§3.2/§3.5 arithmetic; ``RouteCheck`` asks, for every route that goes down,
for evidence that the gateway's NIs are unusable (spec §6.3-6.4). Both are fed event by event
(``handle``) by ``testbed.observe.check``; each method is O(1) amortised per event, so a log is
checked in linear time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodes.lnet.tunables import attempt_timeout as engine_attempt_timeout
from nodes.lnet.tunables import derived_lnd_timeout
from testbed.observe.checktypes import Inv, Item

MAX_HEALTH = 1000  # LNET_MAX_HEALTH_VALUE (spec §0)
#: events whose nid field is a local NI of the event's node
LOCAL_NID_KINDS = frozenset({"ni_link", "ni_status", "ni_error", "ni_health", "ni_add",
                             "ni_del"})
#: fault kinds that cut a node off the network or stop its process
CUTTING_FAULTS = frozenset({"blackhole", "carrier", "port-down", "flap", "partition", "kill",
                            "stop", "stall"})
CONFIG_REASONS = ("added", "deleted", "config")


@dataclass
class NodeState:
    fatal: dict[str, Item] = field(default_factory=dict)    # nid -> event that made it fatal
    unfatal: dict[str, float] = field(default_factory=dict)  # nid -> when it last stopped
    down: dict[str, Item] = field(default_factory=dict)     # nid -> ni_status down event
    was_down: dict[str, Item] = field(default_factory=dict)  # nid -> last down, kept on up
    nets: dict[str, set[str]] = field(default_factory=dict)  # net -> known local NIDs
    routing: Item | None = None          # last routing event (enabled or not)
    routing_on: bool = False
    rte_disabled: bool = True            # its ping buffer says RTE_DISABLED (spec §6.2)
    sensitivity: int | None = None
    sens_from: str = ""                  # "event", "tunable", "inferred at #N"
    transaction_timeout: float | None = None  # last ``tunable`` event (launch = deadline - it)
    retry_count: int | None = None            # last ``tunable`` event
    incarnation: int = 0
    dead: Item | None = None             # died / killed / stopped (and not back)
    pid: int | None = None               # the process node_started announced
    cut: dict[str, Item] = field(default_factory=dict)  # fault id -> fault_applied


def lnd_timeout(st: NodeState) -> float | None:
    """The node's LND timeout as LNet derives it (``lnet_set_lnd_timeout``: max((tt - 1) /
    (retry_count + 1), 1)), if the log gave both tunables; the transaction timeout, which it
    never exceeds, if only that."""
    tt, rc = st.transaction_timeout, st.retry_count
    if tt is None:
        return None
    return tt if rc is None else float(derived_lnd_timeout(int(tt), rc))


def attempt_timeout(st: NodeState, retry_count: int | None) -> float | None:
    """How far past its commit a message's deadline is (lib-msg.c ``get_msg_deadline``: the
    LND timeout x (retry_count + 1) + 1), if the log gave the node's transaction timeout;
    the transaction timeout itself when the retry count is unknown. ``retry_count``: the
    message's own (its first send record), else the node's last ``tunable`` event. Not in the
    log: a caller's shorter timeout (003: the commit dated earlier than it was, which only
    excuses more) and an NI's own ``--lnd-timeout`` (dated by the derived one)."""
    rc = retry_count if retry_count is not None else st.retry_count
    if st.transaction_timeout is None:
        return None
    if rc is None:
        return st.transaction_timeout
    return float(engine_attempt_timeout(derived_lnd_timeout(int(st.transaction_timeout), rc),
                                        rc))


def net_of(nid: str) -> str:
    return nid.rsplit("@", 1)[-1]


class Tracker:
    """What the log has said so far about nodes, NIs, NID owners and faults."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.owner: dict[str, str] = {}
        self.state_events = 0

    def node(self, name: str) -> NodeState:
        st = self.nodes.get(name)
        if st is None:
            st = self.nodes[name] = NodeState()
        return st

    def learn_ni(self, node: str, nid: str) -> None:
        if self.owner.get(nid) != node:
            self.owner[nid] = node
        self.node(node).nets.setdefault(net_of(nid), set()).add(nid)

    def handle(self, item: Item, on_restart: Any) -> None:
        idx, ev = item
        kind = ev["kind"]
        node = ev.get("node")
        if kind in LOCAL_NID_KINDS and isinstance(node, str) and isinstance(ev.get("nid"), str):
            self.learn_ni(node, ev["nid"])
        if kind == "ni_link" and isinstance(node, str):
            self.state_events += 1
            self._fatal(node, ev["nid"], ev.get("link") == "down", item)
        elif kind == "ni_status" and isinstance(node, str):
            self.state_events += 1
            st = self.node(node)
            if "fatal_error" in ev:
                self._fatal(node, ev["nid"], bool(ev["fatal_error"]), item)
            if ev.get("status") == "down":
                st.down[ev["nid"]] = st.was_down[ev["nid"]] = item
            else:
                st.down.pop(ev["nid"], None)
        elif kind in ("ni_add", "ni_del") and isinstance(node, str):
            self.state_events += 1  # a deleted NI is unusable; a re-added one starts up
            st = self.node(node)
            st.fatal.pop(ev["nid"], None)
            if kind == "ni_del":
                st.down[ev["nid"]] = item
            else:
                st.down.pop(ev["nid"], None)
        elif kind == "routing" and isinstance(node, str):
            st = self.node(node)
            st.routing, st.routing_on = item, bool(ev.get("enabled"))
            st.rte_disabled = bool(ev.get("rte_disabled", not st.routing_on))
        elif kind == "tunable" and isinstance(node, str) and isinstance(ev.get("value"), int):
            st = self.node(node)
            if ev.get("name") in ("health_sensitivity", "lnet_health_sensitivity"):
                st.sensitivity, st.sens_from = ev["value"], f"tunable event #{idx}"
            elif ev.get("name") == "transaction_timeout":
                st.transaction_timeout = float(ev["value"])
            elif ev.get("name") == "retry_count":
                st.retry_count = ev["value"]
        elif kind == "node_restarted" and isinstance(node, str) and \
                self.node(node).dead is None and ev.get("pid") is not None and \
                ev.get("pid") == self.node(node).pid:
            pass  # the end of a restart: node_started named this process, since configured
            # (the sim's node_restarted has no pid: always a new engine, a new incarnation)
        elif kind in ("node_started", "node_restarted", "node_died") and isinstance(node, str):
            st = self.node(node)
            st.pid = ev.get("pid") if kind != "node_died" else None
            st.incarnation += 1
            st.fatal.clear()
            st.down.clear()
            st.was_down.clear()
            st.dead = item if kind == "node_died" else None
            if kind != "node_died":
                st.routing, st.routing_on = None, False
            on_restart(node)
        elif kind in ("fault_applied", "fault_reverted"):
            self._fault(item)

    def _fatal(self, node: str, nid: str, fatal: bool, item: Item) -> None:
        st = self.node(node)
        if fatal:
            st.fatal.setdefault(nid, item)
        elif st.fatal.pop(nid, None) is not None and isinstance(item[1].get("t"), int | float):
            st.unfatal[nid] = float(item[1]["t"])

    def _fault(self, item: Item) -> None:
        _idx, ev = item
        spec = ev.get("spec") if isinstance(ev.get("spec"), dict) else {}
        kind = ev.get("fault_kind") or spec.get("kind")
        if kind not in CUTTING_FAULTS:
            return
        targets = [spec.get("node"), *list(spec.get("a") or []), *list(spec.get("b") or [])]
        for name in [t for t in targets if isinstance(t, str)]:
            st = self.node(name)
            key = str(ev.get("id"))
            if ev["kind"] == "fault_applied":
                st.cut[key] = item
                if kind in ("kill", "stop"):
                    st.dead = item
            else:
                st.cut.pop(key, None)
                if kind in ("kill", "stop") and st.dead is not None \
                        and st.dead[1].get("id") == ev.get("id"):
                    st.dead = None


# ---------------------------------------------------------------------------- health
class HealthCheck:
    """Health values in 0..1000 moving by the sensitivity and recovery rules (spec §3)."""

    def __init__(self, inv: Inv, tracker: Tracker) -> None:
        self.inv = inv
        self.tracker = tracker
        self.last: dict[tuple[str, str, str], Item] = {}  # (node, ni|lpni, nid) -> event
        self.steps = 0

    def handle(self, item: Item) -> None:
        _idx, ev = item
        kind = ev["kind"]
        if kind in ("ni_health", "lpni_health"):
            self._step(item)
        elif kind in ("ni_error", "lpni_error", "ni_status", "lpni_status"):
            self._range(item, ev.get("health"), kind)
        elif kind == "msg" and isinstance(ev.get("health"), dict):
            for side, value in ev["health"].items():
                self._range(item, value, f"msg health.{side}")

    def _range(self, item: Item, value: Any, what: str) -> None:
        if not isinstance(value, int):
            return
        self.inv.checked += 1
        if not 0 <= value <= MAX_HEALTH:
            self.inv.flag(f"{what} health {value} outside 0..{MAX_HEALTH}", [item])

    def _step(self, item: Item) -> None:
        idx, ev = item
        node, nid = str(ev.get("node")), str(ev.get("nid"))
        side = "ni" if ev["kind"] == "ni_health" else "lpni"
        old, new, cause = ev.get("old"), ev.get("new"), ev.get("cause")
        self.inv.checked += 1
        self.steps += 1
        if not isinstance(old, int) or not isinstance(new, int):
            self.inv.flag(f"{side} {nid} on {node}: health change without integer old/new",
                          [item])
            return
        if not (0 <= old <= MAX_HEALTH and 0 <= new <= MAX_HEALTH):
            self.inv.flag(f"{side} {nid} on {node}: health {old} -> {new} outside "
                          f"0..{MAX_HEALTH}", [item])
            return
        key = (node, side, nid)
        prev = self.last.get(key)
        self.last[key] = item
        # a NI or peer NI made afresh starts at 1000; 0@lo at 0 after each `lnet configure`
        # (api-ni.c lnet_startup_lndni skips the LOLND's ni_healthv, E17)
        fresh = MAX_HEALTH if nid != "0@lo" else 0
        if prev is not None and prev[1].get("new") != old and old not in (MAX_HEALTH, fresh):
            self.inv.flag(f"{side} {nid} on {node}: health was {prev[1].get('new')}, the next "
                          f"change starts from {old}", [prev, item])
        st = self.tracker.node(node)
        if isinstance(ev.get("sensitivity"), int):
            st.sensitivity, st.sens_from = ev["sensitivity"], "the events' sensitivity field"
        why = self._rule(side, old, new, str(cause), st, idx)
        if why:
            self.inv.flag(f"{side} {nid} on {node}: {cause} moved health {old} -> {new}: {why}",
                          [item])

    @staticmethod
    def _rule(side: str, old: int, new: int, cause: str, st: NodeState, idx: int) -> str:
        """Why ``old -> new`` breaks the rule of ``cause`` ('' if it does not)."""
        if cause == "manual":
            return ""
        if cause == "reset":
            return "" if new == MAX_HEALTH else f"a reset sets {MAX_HEALTH}"
        if cause not in ("error", "ok", "recovery"):
            return f"unknown cause {cause!r} (error, ok, recovery, manual, reset)"
        down = cause == "error"
        if down and new >= old:
            return "an error must lower health"
        if not down and new <= old:
            return f"{cause} must raise health"
        if not down and side == "lpni" and new == MAX_HEALTH:
            return ""  # router rule / never-heard peer NI set straight to 1000 (spec §3.1)
        step = old - new if down else new - old
        ambiguous = new == (0 if down else MAX_HEALTH)
        if st.sensitivity is None:
            if ambiguous:
                return ""
            st.sensitivity, st.sens_from = step, f"inferred from event #{idx}"
            return ""
        s = st.sensitivity
        want = max(old - s, 0) if down else min(old + s, MAX_HEALTH)
        if new != want:
            return (f"expected {want} with health_sensitivity {s} "
                    f"({st.sens_from})")
        return ""


# ---------------------------------------------------------------------------- routes
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
