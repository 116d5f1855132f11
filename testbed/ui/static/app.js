// testbed ui: the page. One EventSource (/api/stream): a snapshot, then deltas
// (testbed/ui/model.py says what each holds). Graph by cytoscape.js at the server's fixed
// positions, timeline by uPlot with fault windows drawn over its plotting area.
"use strict";

const COLOURS = { red: "#e0242b", orange: "#f39c12", green: "#2ca02c" };
const SPAN = 120;            // seconds of timeline shown
const MAX_EVENT_ROWS = 400;
const ROUTE_EDGE_LIMIT = 400; // more route edges than this start hidden
const DETAIL_MS = 1000;

const ui = window.lnetUI = {
  cy: null, plot: null, selected: null, seq: -1, ready: false,
  state: { nodes: {}, nis: {}, routes: {}, faults: [], windows: {}, now: 0 },
  detail: { peer_nis: [] }, // the selected node's peer NIs (api/detail, every DETAIL_MS)
  firstPaintMs: null, lastDeltaAt: null, deltas: 0,
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function byId(list) { const o = {}; for (const x of list) o[x.id] = x; return o; }

function fmt(v) { return v === null || v === undefined ? "-" : String(v); }

// ---- graph ----------------------------------------------------------------------------

function elements(snap) {
  const els = [];
  for (const s of snap.segments) {
    els.push({ group: "nodes", data: { id: "seg:" + s.id, label: s.id + " (" + s.net + ")",
      kind: "segment" }, position: { x: s.x, y: s.y }, classes: "segment" });
  }
  for (const n of snap.nodes) {
    els.push({ group: "nodes", data: { id: "node:" + n.id, name: n.id, label: n.id,
      kind: "node" }, position: { x: n.x, y: n.y },
      classes: nodeClasses(n) });
  }
  for (const ni of snap.nis) {
    els.push({ group: "nodes", data: { id: "ni:" + ni.id, kind: "ni", name: ni.node,
      label: ni.iface, colour: COLOURS[ni.colour] }, position: { x: ni.x, y: ni.y },
      classes: "ni" });
    els.push({ group: "edges", data: { id: "own:" + ni.id, source: "node:" + ni.node,
      target: "ni:" + ni.id }, classes: "own" });
    if (ni.segment) {
      els.push({ group: "edges", data: { id: "wire:" + ni.id, source: "ni:" + ni.id,
        target: "seg:" + ni.segment }, classes: "wire" });
    }
  }
  return els;
}

function nodeClasses(n) {
  return "node" + (n.router ? " router" : "") + (n.alive ? "" : " dead");
}

function buildGraph(snap) {
  const big = snap.nis.length + snap.nodes.length > 2000;
  ui.cy = cytoscape({
    container: document.getElementById("graph"),
    elements: elements(snap),
    layout: { name: "preset", fit: true, padding: 20 },
    minZoom: 0.02, maxZoom: 4,
    textureOnViewport: big, hideEdgesOnViewport: big, pixelRatio: big ? 1 : "auto",
    style: [
      { selector: "node.segment", style: { shape: "round-rectangle", width: 150, height: 18,
        "background-color": "#90a4ae", label: "data(label)", "font-size": 11,
        "text-valign": "center", color: "#fff" } },
      { selector: "node.node", style: { shape: "round-rectangle", width: 46, height: 24,
        "background-color": "#37474f", label: "data(label)", color: "#fff",
        "text-valign": "center", "font-size": 11 } },
      { selector: "node.router", style: { shape: "diamond", width: 50, height: 34,
        "background-color": "#5e35b1" } },
      { selector: "node.dead", style: { "background-color": "#bdbdbd" } },
      { selector: "node.ni", style: { width: 12, height: 12, "background-color": "data(colour)",
        "border-width": 1, "border-color": "#333" } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#ffb300" } },
      { selector: "edge.own", style: { width: 1, "line-color": "#78909c",
        "curve-style": "haystack" } },
      { selector: "edge.wire", style: { width: 1, "line-color": "#b0bec5",
        "curve-style": "haystack" } },
      { selector: "node", style: { "min-zoomed-font-size": 7 } },
      { selector: "edge.route", style: { width: 1.5, "line-style": "dashed",
        "curve-style": "bezier", "target-arrow-shape": "triangle", "arrow-scale": 0.6,
        "line-color": "data(colour)", "target-arrow-color": "data(colour)" } },
    ],
  });
  ui.cy.on("tap", "node", (evt) => {
    const name = evt.target.data("name");
    if (name) select(name);
  });
}

function routeEdge(r) {
  return { group: "edges", data: { id: "route:" + r.id, source: "node:" + r.node,
    target: "node:" + r.gw_node, colour: r.state === "up" ? "#43a047" : COLOURS.red },
    classes: "route" };
}

function syncRoutes() {
  const cy = ui.cy;
  const show = document.getElementById("showroutes").checked;
  cy.batch(() => {
    cy.edges(".route").remove();
    if (!show) return;
    for (const r of Object.values(ui.state.routes)) {
      if (r.gw_node && ui.state.nodes[r.node] && ui.state.nodes[r.gw_node]) cy.add(routeEdge(r));
    }
  });
}

// ---- side panel -----------------------------------------------------------------------

function row(tbody, cells, cls) {
  const tr = el("tr", cls);
  for (const [v, num] of cells) tr.appendChild(el("td", num ? "num" : "", fmt(v)));
  tbody.appendChild(tr);
  return tr;
}

function renderSide() {
  const faults = document.querySelector("#faults tbody");
  faults.replaceChildren();
  for (const f of ui.state.faults) {
    row(faults, [[f.id], [f.kind], [f.node], [f.iface], [f.state], [f.since, true]],
      f.state === "active" ? "down" : "");
  }
  const name = ui.selected;
  document.getElementById("selname").textContent = name || "(click a node)";
  const nis = document.querySelector("#nitable tbody");
  const lpnis = document.querySelector("#lpnitable tbody");
  const routes = document.querySelector("#routetable tbody");
  nis.replaceChildren(); lpnis.replaceChildren(); routes.replaceChildren();
  if (!name) return;
  for (const ni of Object.values(ui.state.nis)) {
    if (ni.node !== name) continue;
    const tr = row(nis, [[ni.iface], [ni.nid], [ni.link], [ni.fatal ? "fatal" : ni.status],
      [ni.health, true], [ni.credits, true], [ni.min_credits, true], [ni.rate, true]],
      ni.colour);
    tr.dataset.ni = ni.id;
  }
  for (const p of ui.detail.peer_nis) {
    row(lpnis, [[p.nid], [p.peer], [p.state], [p.health, true], [p.credits, true],
      [p.rate, true]], p.health < 1000 || p.state !== "up" ? "orange" : "green");
  }
  for (const r of Object.values(ui.state.routes)) {
    if (r.node === name) row(routes, [[r.net], [r.gateway], [r.state]],
      r.state === "up" ? "green" : "red down");
  }
}

function refreshDetail() {
  const name = ui.selected;
  if (!name) return;
  fetch("api/detail/" + encodeURIComponent(name)).then((r) => r.json()).then((d) => {
    if (ui.selected !== name || d.error) return;
    ui.detail = d;
    renderSide();
  }).catch(() => {});
}

function select(name) {
  ui.selected = name;
  ui.detail = { peer_nis: [] };
  renderSide();
  refreshDetail();
  document.getElementById("netyaml").textContent = "asking " + name + " ...";
  document.getElementById("peeryaml").textContent = "";
  fetch("api/node/" + encodeURIComponent(name)).then((r) => r.json()).then((d) => {
    if (ui.selected !== name) return;
    document.getElementById("netyaml").textContent = d.error || d.net;
    document.getElementById("peeryaml").textContent = d.error ? "" : d.peer;
  }).catch((e) => {
    document.getElementById("netyaml").textContent = "request failed: " + e;
  });
}

// ---- timeline -------------------------------------------------------------------------

function buildPlot() {
  const box = document.getElementById("plot");
  const opts = {
    width: box.clientWidth || 600, height: (box.clientHeight || 250) - 56,
    scales: { x: { time: false }, h: { range: [0, 1000] }, n: { range: [0, 10] } },
    axes: [{ label: "seconds since bring-up" }, { label: "msg/s" },
      { scale: "h", side: 1, label: "min NI health", grid: { show: false } }],
    series: [{ label: "t" },
      { label: "messages/s", stroke: "#1e88e5", width: 1.5 },
      { label: "min NI health", scale: "h", stroke: "#43a047", width: 1.5 },
      { label: "NIs down", scale: "n", stroke: COLOURS.red, width: 1.5 }],
    hooks: { draw: [drawWindows] },
  };
  ui.points = [];
  ui.plot = new uPlot(opts, [[], [], [], []], box);
}

function drawWindows(u) {
  const over = u.over;
  for (const old of over.querySelectorAll(".fault-window")) old.remove();
  const [lo, hi] = [u.scales.x.min, u.scales.x.max];
  if (lo === null || hi === null || lo === undefined) return;
  for (const w of Object.values(ui.state.windows)) {
    const end = w.end === null ? ui.state.now : w.end;
    if (end < lo || w.start > hi) continue;
    const left = u.valToPos(Math.max(w.start, lo), "x");
    const right = u.valToPos(Math.min(end, hi), "x");
    const div = el("div", "fault-window");
    div.style.left = left + "px";
    div.style.width = Math.max(2, right - left) + "px";
    div.dataset.window = w.id;
    div.appendChild(el("span", "", w.label));
    over.appendChild(div);
  }
}

function redrawPlot() {
  const pts = ui.points;
  const data = [pts.map((p) => p[0]), pts.map((p) => p[1]), pts.map((p) => p[2]),
    pts.map((p) => p[3])];
  const now = ui.state.now;
  ui.plot.setData(data, false);
  ui.plot.setScale("x", { min: Math.max(0, now - SPAN), max: Math.max(now, 1) });
}

function addEvents(list) {
  const box = document.getElementById("events");
  const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  for (const e of list) {
    const line = e.t.toFixed(3).padStart(10) + " " + (e.node || "-").padEnd(6) + " " +
      e.kind + " " + e.text;
    box.appendChild(el("div", /fault|link_down|died|error/.test(e.kind) ? "fault" : "", line));
  }
  while (box.childElementCount > MAX_EVENT_ROWS) box.firstChild.remove();
  if (atEnd) box.scrollTop = box.scrollHeight;
}

// ---- feed -----------------------------------------------------------------------------

function applySnapshot(snap) {
  const t0 = performance.now();
  ui.seq = snap.seq;
  ui.state = { nodes: byId(snap.nodes), nis: byId(snap.nis), routes: byId(snap.routes), faults: snap.faults, windows: byId(snap.windows),
    now: snap.now, virtual: snap.virtual };
  document.getElementById("title").textContent = "testbed " + snap.testbed;
  document.getElementById("backend").textContent = "backend " + snap.backend +
    (snap.virtual ? " (virtual time)" : "");
  document.getElementById("clockctl").hidden = !snap.virtual;
  const T = ui.timings = {};
  const timed = (k, f) => { const t = performance.now(); f(); T[k] = performance.now() - t; };
  if (ui.cy) ui.cy.destroy();
  timed("graph", () => buildGraph(snap));
  document.getElementById("showroutes").checked = snap.routes.length <= ROUTE_EDGE_LIMIT;
  timed("routes", syncRoutes);
  if (!ui.plot) timed("newplot", buildPlot);
  ui.points = snap.points.slice();
  document.getElementById("events").replaceChildren();
  timed("events", () => addEvents(snap.events));
  document.getElementById("now").textContent = snap.now.toFixed(3);
  timed("plot", redrawPlot);
  timed("side", renderSide);
  requestAnimationFrame(() => {
    ui.ready = true;
    if (ui.firstPaintMs === null) ui.firstPaintMs = performance.now();
    ui.snapshotMs = performance.now() - t0;
  });
}

function applyDelta(d) {
  if (d.error) { setConn(false, d.error); return; }
  if (d.seq <= ui.seq) return; // already in the snapshot
  ui.seq = d.seq;
  ui.deltaSent = d.sent * 1000; // epoch ms, the server's clock (benchmarks/ui.py)
  ui.deltaAt = performance.timeOrigin + performance.now();
  const st = ui.state;
  const cy = ui.cy;
  let routesChanged = false;
  cy.batch(() => {
    for (const ni of d.nis || []) {
      st.nis[ni.id] = ni;
      const e = cy.getElementById("ni:" + ni.id);
      if (e.nonempty()) e.data("colour", COLOURS[ni.colour]);
    }
    for (const n of d.nodes || []) {
      if (n.gone) continue;
      st.nodes[n.id] = n;
      const e = cy.getElementById("node:" + n.id);
      if (e.nonempty()) e.classes(nodeClasses(n));
    }
  });
  for (const r of d.routes || []) {
    routesChanged = true;
    if (r.gone) delete st.routes[r.id]; else st.routes[r.id] = r;
  }
  for (const w of d.windows || []) {
    if (w.gone) delete st.windows[w.id]; else st.windows[w.id] = w;
  }
  if (d.faults) st.faults = d.faults;
  if (routesChanged) syncRoutes();
  st.now = d.now;
  document.getElementById("now").textContent = d.now.toFixed(3);
  if (d.events) addEvents(d.events);
  if (d.points) {
    ui.points.push(...d.points);
    if (ui.points.length > 600) ui.points.splice(0, ui.points.length - 600);
  }
  if (!ui.pending) { // the plot and tables once per frame, however many deltas came
    ui.pending = true;
    requestAnimationFrame(() => { ui.pending = false; redrawPlot(); renderSide(); });
  }
  ui.deltas += 1;
  ui.lastDeltaAt = performance.now();
}

function setConn(ok, text) {
  const c = document.getElementById("conn");
  c.className = ok ? "ok" : "bad";
  c.textContent = text;
}

function connect() {
  const es = new EventSource("api/stream");
  es.addEventListener("snapshot", (m) => { setConn(true, "live"); applySnapshot(JSON.parse(m.data)); });
  es.addEventListener("delta", (m) => applyDelta(JSON.parse(m.data)));
  es.onerror = () => setConn(false, "reconnecting");
  ui.source = es;
}

document.getElementById("showroutes").addEventListener("change", () => { if (ui.cy) syncRoutes(); });
for (const b of document.querySelectorAll("[data-advance]")) {
  b.addEventListener("click", () => {
    fetch("api/clock", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ op: "advance", seconds: Number(b.dataset.advance) }) });
  });
}
window.addEventListener("resize", () => {
  const box = document.getElementById("plot");
  if (ui.plot) ui.plot.setSize({ width: box.clientWidth, height: box.clientHeight - 56 });
});
setInterval(refreshDetail, DETAIL_MS);
connect();
