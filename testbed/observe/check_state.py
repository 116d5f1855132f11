"""The state the invariant checker follows through a log.

Theory of operation: ``Tracker`` keeps, per node, what the log has said so far about its local
NIs (fatal = link down per ``ni_link``/``ni_status``; status down), its routing switch, its
health sensitivity, whether its process is alive, and which node owns each NID (learnt from
every event in which a node names one of its own NIs); ``lnd_timeout``/``attempt_timeout``
date a message's deadline from the tunables the log gave. The invariants read it:
``check_health.py`` (health values, spec §3) and ``check_route.py`` (a route down only with
its gateway's NIs unusable, spec §6.3-6.4), fed event by event (``handle``) by
``testbed.observe.check`` after the tracker; each method is O(1) amortised per event, so a
log is checked in linear time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodes.lnet.tunables import attempt_timeout as engine_attempt_timeout
from nodes.lnet.tunables import derived_lnd_timeout
from testbed.observe.checktypes import Item

#: events whose nid field is a local NI of the event's node
LOCAL_NID_KINDS = frozenset({"ni_link", "ni_status", "ni_error", "ni_health", "ni_add",
                             "ni_del"})
#: fault kinds that cut a node off the network or stop its process
CUTTING_FAULTS = frozenset({"blackhole", "carrier", "port-down", "flap", "partition", "kill",
                            "stop", "stall"})


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
