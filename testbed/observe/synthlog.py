"""A realistic synthetic event log that keeps every invariant: for ``benchmarks/check.py`` (a
million events) and the checker's tests (a clean log of any size, to break on purpose).

Theory of operation: a routed Multi-Rail cluster (clients and servers with two NIs each, two
routers) in the shape of ``topologies/routed.yaml``, driven by a seeded RNG. Clients PUT to
servers through a router; a send fails now and then (resend with the peer NI's health
decremented by the sensitivity, then success, health creeping back by ``ok`` steps); client
rails flap (``ni_link`` down/up, traffic moves to the other rail while one is fatal); a
router's far-side NI fails now and then and the clients' routes through it go down and up.
The events follow docs/events.md and TRACE-SCHEMA.md field for field.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

SENS = 100
RETRY = 2
DEADLINE = 151.0
Event = dict[str, Any]


class _Gen:
    def __init__(self, clients: int, servers: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.t = 0.0
        self.msg_id: dict[str, int] = {}
        self.clients = [f"c{i}" for i in range(1, clients + 1)]
        self.servers = [f"s{i}" for i in range(1, servers + 1)]
        self.routers = ["r1", "r2"]
        self.nis: dict[str, list[str]] = {}
        for i, c in enumerate(self.clients):
            self.nis[c] = [f"10.10.{k}.{i + 10}@tcp" for k in (0, 1)]
        for i, s in enumerate(self.servers):
            self.nis[s] = [f"10.20.{k}.{i + 10}@tcp1" for k in (0, 1)]
        for i, r in enumerate(self.routers):
            self.nis[r] = [f"10.10.0.{i + 1}@tcp", f"10.20.0.{i + 1}@tcp1"]
        self.fatal: set[str] = set()
        self.lpni_health: dict[tuple[str, str], int] = {}
        self.far_down: dict[str, bool] = dict.fromkeys(self.routers, False)

    def ev(self, kind: str, node: str, **fields: Any) -> Event:
        return {"t": round(self.t, 6), "kind": kind, "node": node, **fields}

    def next_msg(self, node: str) -> int:
        self.msg_id[node] = self.msg_id.get(node, 0) + 1
        return self.msg_id[node]

    def setup(self) -> Iterator[Event]:
        yield {"t": 0.0, "kind": "up", "testbed": "synth", "seconds": 0.0}
        for node in self.nis:
            yield self.ev("tunable", node, name="health_sensitivity", value=SENS)
        for r in self.routers:
            yield self.ev("routing", r, enabled=True)

    def put(self) -> Iterator[Event]:
        c = self.rng.choice(self.clients)
        s = self.rng.choice(self.servers)
        alive = [r for r in self.routers if not self.far_down[r]] or self.routers[:1]
        r = self.rng.choice(alive)
        ups = [n for n in self.nis[c] if n not in self.fatal]
        if not ups:
            return
        src, dst, gw = self.rng.choice(ups), self.rng.choice(self.nis[s]), self.nis[r][0]
        m = self.next_msg(c)
        base = {"msg": m, "type": "PUT", "src": src, "dst": dst}
        yield self.ev("msg", c, event="send", ni=src, lpni=gw, attempt=0, fixed_ni=False,
                      forwarded=False, deadline=round(self.t + DEADLINE, 6), retry_count=RETRY,
                      **base)
        key = (c, gw)
        if self.rng.random() < 0.05:
            self.t += 0.0005
            old = self.lpni_health.get(key, 1000)
            new = max(old - SENS, 0)
            self.lpni_health[key] = new
            yield self.ev("lpni_health", c, nid=gw, old=old, new=new, cause="error")
            yield self.ev("msg", c, event="resend", attempt=1, hstatus="REMOTE_DROPPED",
                          health={"ni": 1000, "lpni": new}, **base)
            yield self.ev("msg", c, event="send", ni=src, lpni=gw, attempt=1, fixed_ni=False,
                          forwarded=False, **base)
        self.t += 0.0002
        yield from self.forward(r, m, src, dst)
        yield self.ev("msg", c, event="complete", hstatus="OK", status=0, forwarded=False,
                      **base)
        old = self.lpni_health.get(key, 1000)
        if old < 1000:
            self.lpni_health[key] = min(old + SENS, 1000)
            yield self.ev("lpni_health", c, nid=gw, old=old, new=self.lpni_health[key],
                          cause="ok")

    def forward(self, r: str, m: int, src: str, dst: str) -> Iterator[Event]:
        fm = self.next_msg(r)
        fwd = {"msg": fm, "type": "PUT", "src": src, "dst": dst}
        yield self.ev("msg", r, event="send", ni=self.nis[r][1], lpni=dst, attempt=0,
                      fixed_ni=True, forwarded=True, deadline=None, retry_count=RETRY, **fwd)
        self.t += 0.0002
        yield self.ev("msg", r, event="complete", hstatus="OK", status=0, forwarded=True, **fwd)
        server = next(n for n, nis in self.nis.items() if dst in nis)
        am = self.next_msg(server)
        ack = {"msg": am, "type": "ACK", "src": dst, "dst": src}
        yield self.ev("msg", server, event="send", ni=dst, lpni=self.nis[r][1], attempt=0,
                      fixed_ni=True, forwarded=False, deadline=round(self.t + DEADLINE, 6),
                      retry_count=RETRY, **ack)
        yield self.ev("msg", server, event="complete", hstatus="OK", status=0,
                      forwarded=False, **ack)
        bm = self.next_msg(r)  # the ACK goes back through the router
        back = {"msg": bm, "type": "ACK", "src": dst, "dst": src}
        yield self.ev("msg", r, event="send", ni=self.nis[r][0], lpni=src, attempt=0,
                      fixed_ni=True, forwarded=True, deadline=None, retry_count=RETRY, **back)
        yield self.ev("msg", r, event="complete", hstatus="OK", status=0, forwarded=True,
                      **back)

    def flap(self) -> Iterator[Event]:
        c = self.rng.choice(self.clients)
        nid = self.rng.choice(self.nis[c])
        down = nid not in self.fatal
        if down and all(n in self.fatal for n in self.nis[c] if n != nid):
            return
        (self.fatal.add if down else self.fatal.discard)(nid)
        yield self.ev("ni_link", c, nid=nid, link="down" if down else "up", cause="carrier")
        yield self.ev("ni_status", c, nid=nid, status="down" if down else "up", healthy=True,
                      health=1000, fatal_error=int(down))

    def router_far_side(self) -> Iterator[Event]:
        r = self.rng.choice(self.routers)
        far = self.nis[r][1]
        down = not self.far_down[r]
        self.far_down[r] = down
        yield self.ev("ni_link", r, nid=far, link="down" if down else "up", cause="carrier")
        self.t += 0.001
        for c in self.clients:
            yield self.ev("route_state", c, net="tcp1", gateway=self.nis[r][0],
                          state="down" if down else "up",
                          reason="gateway NI on remote net down" if down else "ping reply")


def generate(count: int, *, clients: int = 8, servers: int = 4, seed: int = 1
             ) -> list[Event]:
    """At least ``count`` events (whole messages), time-ordered, keeping every invariant."""
    g = _Gen(clients, servers, seed)
    out = list(g.setup())
    while len(out) < count:
        g.t += g.rng.expovariate(2000.0)
        roll = g.rng.random()
        if roll < 0.002:
            out.extend(g.flap())
        elif roll < 0.0025:
            out.extend(g.router_far_side())
        else:
            out.extend(g.put())
    return out
