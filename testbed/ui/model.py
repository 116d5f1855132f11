"""What ``testbed ui`` shows, as plain data: the topology and its live state (no I/O).

Theory of operation: the model starts from a testbed's ``status`` reply (segments, nodes, each
interface's NID, segment and link state: the same on every backend) and then only applies
what the run directory says happened: events (docs/events.md §1) through ``apply_event`` and
recorder rows (§3) through ``apply_row``. Each change marks the object it touched; ``delta``
returns the marked objects (and the new events, fault windows and plot points) once, which the
server sends to every page as one server-sent event, and ``snapshot`` the whole state for a
page that just connected; peer NIs are kept out of both (they grow with nodes x peers) and
given per node by ``peers_of``. Times are seconds from ``t0`` (bring-up: ``eventlog.origin``).

What sets what (the page colours an NI red when ``link`` or ``status`` is down or it is
``fatal``, orange below health 1000):

* NI: ``link_down``/``link_up`` (the supervisor's ``testbed link`` or a carrier fault; the
  sim fabric's), ``ni_link`` (``fatal``), ``ni_status``, ``ni_health``, ``ni_error``, and the
  recorder's ``ni`` rows (state, health, credits, message rate);
* peer NI: ``lpni_health``/``lpni_status``/``lpni_error`` and ``lpni`` rows;
* route: ``route_state`` and ``route`` rows; router: ``routing`` and ``node`` rows;
* node: ``node_died``/``node_started``/``node_restarted``;
* fault windows (docs/events.md §1.2): ``fault_applied`` → ``fault_reverted`` of the same
  ``id`` and ``activation``, and a ``link_down`` not made by a fault → its ``link_up``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from testbed.ui.layout import place

#: events kept for the timeline list, windows kept, plot points kept
MAX_EVENTS = 400
MAX_WINDOWS = 200
MAX_POINTS = 600
#: a message rate computed at a recorder row holds this long (rows are written only when a
#: counter moved, so no row for a while means no messages)
RATE_HOLD = 3.0
#: longest summary of an event's fields in the timeline
TEXT_LIMIT = 160

Obj = dict[str, Any]


class LiveModel:
    """One testbed's view state; see the module docstring."""

    def __init__(self, status: dict[str, Any], t0: float = 0.0) -> None:
        self.t0 = t0
        self.name = str(status.get("name", ""))
        self.backend = str(status.get("backend", "mininet"))
        self.segments: dict[str, Obj] = {
            s: {"id": s, "net": info.get("lnet"), "subnet": info.get("subnet")}
            for s, info in status.get("segments", {}).items()}
        self.nodes: dict[str, Obj] = {}
        self.nis: dict[str, Obj] = {}
        self.nid_ni: dict[tuple[str, str], str] = {}  # (node, nid) -> NI id
        self.nid_node: dict[str, str] = {}
        for name, info in status.get("nodes", {}).items():
            self.nodes[name] = {"id": name, "alive": bool(info.get("alive", True)),
                                "router": False, "rate": 0.0}
            for iface, d in info.get("interfaces", {}).items():
                ni_id = f"{name}:{iface}"
                nid = str(d.get("nid", ""))
                self.nis[ni_id] = {"id": ni_id, "node": name, "iface": iface, "nid": nid,
                                   "segment": d.get("segment"), "link": d.get("state", "up"),
                                   "status": "up", "fatal": False, "health": 1000,
                                   "credits": None, "min_credits": None, "rate": 0.0}
                self.nid_ni[(name, nid)] = ni_id
                self.nid_node[nid] = name
        self.peer_nis: dict[str, Obj] = {}  # "node|nid" -> peer NI
        self.routes: dict[str, Obj] = {}  # "node|net|gateway" -> route
        self.faults: dict[str, Obj] = {}
        self.windows: dict[str, Obj] = {}
        self.events: deque[Obj] = deque(maxlen=MAX_EVENTS)
        self.points: deque[list[float]] = deque(maxlen=MAX_POINTS)
        self.now = 0.0
        self.seq = 0  # deltas handed out so far
        #: (table, id) -> (t, messages) of the object's last recorder row
        self._rate_at: dict[tuple[str, str], tuple[float, int]] = {}
        self._dirty: dict[str, set[str]] = {k: set() for k in
                                            ("nodes", "nis", "peer_nis", "routes", "windows")}
        self._new_events: list[Obj] = []
        self._new_points: list[list[float]] = []
        self._faults_changed = False
        self._links: dict[str, str] = {}  # NI id -> its open link window
        self._link_seq = 0

    # ---- inputs ----------------------------------------------------------------------

    def apply_event(self, ev: dict[str, Any]) -> None:
        """One event of the log (docs/events.md §1)."""
        kind, node = str(ev["kind"]), ev.get("node")
        t = float(ev["t"]) - self.t0
        self.now = max(self.now, t)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, ev, t, node if isinstance(node, str) else "")
        text = ", ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "kind", "node"))
        item = {"t": round(t, 6), "kind": kind, "node": node or "",
                "text": text[:TEXT_LIMIT]}
        self.events.append(item)
        self._new_events.append(item)

    def apply_row(self, node: str, row: dict[str, object]) -> None:
        """One recorder row of ``node`` (docs/events.md §3)."""
        kind, ident, t = row["kind"], str(row["id"]), float(row["t"]) - self.t0  # type: ignore[arg-type]
        gone = row["state"] == "gone"
        if kind == "ni":
            ni_id = self.nid_ni.get((node, ident))
            if ni_id is None:
                return
            self._set("nis", ni_id, credits=row["credits"], min_credits=row["min_credits"],
                      rate=self._rate("nis", ni_id, t, row))
            if not gone:
                self._set("nis", ni_id, health=row["health"],
                          fatal=row["state"] == "fatal",
                          status="down" if row["state"] == "down" else "up")
        elif kind == "lpni":
            key = f"{node}|{ident}"
            if gone:
                self.peer_nis.pop(key, None)
                self._dirty["peer_nis"].add(key)
                return
            self._peer(node, ident, str(row["peer"] or ""))
            self._set("peer_nis", key, state=row["state"], health=row["health"],
                      credits=row["credits"], rate=self._rate("peer_nis", key, t, row))
        elif kind == "route":
            net, _, gw = ident.partition(" via ")
            self._route(node, net, gw, "gone" if gone else str(row["state"]))
        elif kind == "node" and node in self.nodes:
            self._set("nodes", node, router=row["state"] in ("enabled", "starting"),
                      rate=self._rate("nodes", node, t, row))

    def tick(self, now: float | None = None) -> None:
        """The clock moved to ``now`` (absolute, the log's clock): expire rates that no row
        renewed, add one plot point (total message rate, lowest NI health, NIs down)."""
        if now is not None:
            self.now = max(self.now, now - self.t0)
        for (table, ident), (t, _n) in self._rate_at.items():
            obj = getattr(self, table).get(ident)
            if self.now - t > RATE_HOLD and obj is not None and obj.get("rate"):
                self._set(table, ident, rate=0.0)
        total = sum(n["rate"] for n in self.nodes.values())
        healths = [n["health"] for n in self.nis.values() if isinstance(n["health"], int)]
        down = sum(1 for n in self.nis.values() if ni_colour(n) == "red")
        point = [round(self.now, 3), round(total, 1), min(healths, default=1000), down]
        self.points.append(point)
        self._new_points.append(point)

    # ---- outputs ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole state, for a page that just connected."""
        pos = place(self.nodes, self.segments, self.nis)
        return {"testbed": self.name, "backend": self.backend, "now": round(self.now, 6),
                "seq": self.seq,
                "nodes": [{**n, **pos[n["id"]]} for n in self.nodes.values()],
                "segments": [{**s, **pos[f"seg:{s['id']}"]} for s in self.segments.values()],
                "nis": [{**n, "colour": ni_colour(n), **pos[f"ni:{n['id']}"]}
                        for n in self.nis.values()],
                "routes": list(self.routes.values()),
                "faults": list(self.faults.values()), "windows": list(self.windows.values()),
                "events": list(self.events), "points": list(self.points)}

    def delta(self) -> dict[str, Any] | None:
        """What changed since the last call (None: nothing)."""
        out: dict[str, Any] = {}
        self._dirty["peer_nis"].clear()  # (a node's own: ``peers_of``, asked per node)
        for table, ids in self._dirty.items():
            if ids:
                objs = getattr(self, table)
                out[table] = [objs.get(i) or {"id": i, "gone": True} for i in sorted(ids)]
                ids.clear()
        for ni in out.get("nis", []):
            ni["colour"] = ni_colour(ni)
        if self._faults_changed:
            out["faults"] = list(self.faults.values())
            self._faults_changed = False
        if self._new_events:
            out["events"], self._new_events = self._new_events, []
        if self._new_points:
            out["points"], self._new_points = self._new_points, []
        if not out:
            return None
        self.seq += 1
        out["now"], out["seq"] = round(self.now, 6), self.seq
        return out

    def peers_of(self, node: str) -> list[Obj]:
        """The peer NIs ``node`` knows, as its recorder and notices say (per node, not in
        the stream: 1,000 nodes that each talk to 4 routers of 4 NIs hold 16,000)."""
        return [p for p in self.peer_nis.values() if p["node"] == node]

    # ---- helpers ---------------------------------------------------------------------

    def _set(self, table: str, ident: str, **fields: Any) -> None:
        obj = getattr(self, table)[ident]
        for k, v in fields.items():
            if obj.get(k) != v:
                obj[k] = v
                self._dirty[table].add(ident)

    def _rate(self, table: str, ident: str, t: float, row: dict[str, object]) -> float:
        """Messages (sends + receives) per second between this row and the object's last."""
        count = sum(v for v in (row.get("sends"), row.get("recvs")) if isinstance(v, int))
        prev = self._rate_at.get((table, ident))
        self._rate_at[(table, ident)] = (t, count)
        if prev is None or t <= prev[0] or count < prev[1]:
            return 0.0
        return round((count - prev[1]) / (t - prev[0]), 1)

    def _peer(self, node: str, nid: str, primary: str) -> str:
        key = f"{node}|{nid}"
        if key not in self.peer_nis:
            self.peer_nis[key] = {"id": key, "node": node, "nid": nid, "peer": primary,
                                  "state": "up", "health": 1000, "credits": None, "rate": 0.0}
            self._dirty["peer_nis"].add(key)
        return key

    def _route(self, node: str, net: str, gw: str, state: str) -> None:
        key = f"{node}|{net}|{gw}"
        if state in ("gone", "deleted"):
            if self.routes.pop(key, None) is not None:
                self._dirty["routes"].add(key)
            return
        if key not in self.routes:
            self.routes[key] = {"id": key, "node": node, "net": net, "gateway": gw,
                                "gw_node": self.nid_node.get(gw, ""), "state": state}
            self._dirty["routes"].add(key)
        self._set("routes", key, state=state)

    def _window(self, key: str, label: str, node: str, t: float, end: bool) -> None:
        win = self.windows.get(key)
        if end:
            if win is not None and win["end"] is None:
                win["end"] = round(t, 6)
                self._dirty["windows"].add(key)
            return
        self.windows[key] = {"id": key, "label": label, "node": node, "start": round(t, 6),
                             "end": None}
        self._dirty["windows"].add(key)
        while len(self.windows) > MAX_WINDOWS:
            old = next(iter(self.windows))
            del self.windows[old]
            self._dirty["windows"].add(old)

    def _ni_of(self, node: str, ev: dict[str, Any]) -> str | None:
        iface = ev.get("iface")
        if isinstance(iface, str) and f"{node}:{iface}" in self.nis:
            return f"{node}:{iface}"
        return self.nid_ni.get((node, str(ev.get("nid"))))


def ni_colour(ni: Obj) -> str:
    """red: link, NI status down or fatal; orange: health below 1000; else green."""
    if ni.get("link") == "down" or ni.get("status") == "down" or ni.get("fatal"):
        return "red"
    health = ni.get("health")
    return "orange" if isinstance(health, int) and health < 1000 else "green"


def _on_link(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    ni_id = m._ni_of(node, ev)
    if ni_id is None:
        return
    down = ev["kind"] == "link_down"
    m._set("nis", ni_id, link="down" if down else "up")
    if ev.get("by") == "fault":
        return  # the fault's own window covers it
    if down and ni_id not in m._links:
        m._link_seq += 1
        m._links[ni_id] = key = f"link:{ni_id}#{m._link_seq}"
        m._window(key, f"link {ni_id} down", node, t, end=False)
        m.faults[f"link:{ni_id}"] = {"id": f"link:{ni_id}", "kind": "link down",
                                     "node": node, "iface": m.nis[ni_id]["iface"],
                                     "state": "active", "since": round(t, 6)}
        m._faults_changed = True
    elif not down and ni_id in m._links:
        m._window(m._links.pop(ni_id), "", node, t, end=True)
        m.faults.pop(f"link:{ni_id}", None)
        m._faults_changed = True


def _on_ni(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    ni_id = m.nid_ni.get((node, str(ev.get("nid"))))
    if ni_id is None:
        return
    kind = ev["kind"]
    if kind == "ni_link":
        m._set("nis", ni_id, fatal=ev.get("link") == "down")
    elif kind == "ni_status":
        m._set("nis", ni_id, status=ev.get("status"))
        if "fatal_error" in ev:
            m._set("nis", ni_id, fatal=bool(ev["fatal_error"]))
    health = ev.get("new", ev.get("health"))
    if isinstance(health, int):
        m._set("nis", ni_id, health=health)


def _on_lpni(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    if not node or not isinstance(ev.get("nid"), str):
        return
    key = m._peer(node, ev["nid"], str(ev.get("peer", "")))
    health = ev.get("new", ev.get("health"))
    if isinstance(health, int):
        m._set("peer_nis", key, health=health)
    if ev["kind"] == "lpni_status":
        m._set("peer_nis", key, state="up" if ev.get("healthy") else "degraded")


def _on_route(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    m._route(node, str(ev.get("net")), str(ev.get("gateway")), str(ev.get("state")))


def _on_routing(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    if node in m.nodes:
        m._set("nodes", node, router=bool(ev.get("enabled")))


def _on_node(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    if node in m.nodes:
        m._set("nodes", node, alive=ev["kind"] != "node_died")


def _on_fault(m: LiveModel, ev: dict[str, Any], t: float, node: str) -> None:
    fid, kind = str(ev.get("id")), ev["kind"]
    raw = ev.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if kind == "fault_added":
        m.faults[fid] = {"id": fid, "kind": spec.get("kind"), "node": spec.get("node"),
                         "iface": spec.get("iface"), "state": "added", "since": round(t, 6)}
    elif kind == "fault_deleted":
        m.faults.pop(fid, None)
    elif fid in m.faults:
        m.faults[fid]["state"] = {"fault_applied": "active", "fault_reverted": "waiting",
                                  "fault_failed": "failed"}.get(kind, m.faults[fid]["state"])
    m._faults_changed = True
    if kind in ("fault_applied", "fault_reverted"):
        label = f"{fid} {ev.get('fault_kind') or spec.get('kind')} {spec.get('node') or ''}"
        m._window(f"{fid}#{ev.get('activation')}", label.strip(), str(spec.get("node") or ""),
                  t, end=kind == "fault_reverted")


_HANDLERS = {
    "link_down": _on_link, "link_up": _on_link,
    "ni_link": _on_ni, "ni_status": _on_ni, "ni_health": _on_ni, "ni_error": _on_ni,
    "lpni_health": _on_lpni, "lpni_status": _on_lpni, "lpni_error": _on_lpni,
    "route_state": _on_route, "routing": _on_routing,
    "node_died": _on_node, "node_started": _on_node, "node_restarted": _on_node,
    "fault_added": _on_fault, "fault_applied": _on_fault, "fault_reverted": _on_fault,
    "fault_deleted": _on_fault, "fault_failed": _on_fault,
}
