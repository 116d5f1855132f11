"""Swarm testing: one seed -> a swarm of options -> one concrete schedule.

Theory of operation (issue 17 item 1; "swarm testing", Groce et al. 2012): rather than every
fault kind at a low rate in every run, each seed first draws a *swarm*: which fault kinds are
on at all, how often each strikes (mean gap of a Poisson process), how long each lasts, its
parameters (loss rate, delay, LNet drop rule classes ``-e``...), which tunables move away from
the topology's values and to what, and the workload's shape. Runs then differ in kind, not only
in detail, and rare interleavings (two faults of different kinds on one node) come up often
enough. ``swarm(topo, seed)`` draws the options and ``expand(swarm, topo, time)`` the concrete
``Schedule``; both take their randomness from ``random.Random(f"explore:{seed}")`` (a str seed
is hashed with SHA-512, not ``hash()``: the same under every PYTHONHASHSEED).

Tunables are drawn from their real ranges (spec §0) and made consistent the way LNet insists
(``retry_count`` 0 when ``health_sensitivity`` is 0, ``transaction_timeout`` > ``retry_count``);
``recovery_interval`` is deprecated and does nothing in today's LNet, so it is not drawn;
``alive_router_check_interval`` stays > 0 (0 disables the router checker, and then a route
marked down after the faults is not expected back: no liveness bound holds).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from testbed.explore.bound import MAX_RULE_LATENCY
from testbed.explore.model import Fault, Schedule, Stream
from testbed.explore.topo import Topo

#: fault kinds a swarm may switch on (network, process, LNet rules)
KINDS = ("loss", "delay", "blackhole", "partition", "flap", "carrier", "kill",
         "lnet_drop", "lnet_delay")
#: tunable -> values drawn (each within its real range, spec §0)
TUNABLES: dict[str, tuple[int, ...]] = {
    "retry_count": (0, 1, 2, 3, 5),
    "transaction_timeout": (5, 10, 30, 50, 150),
    "health_sensitivity": (0, 10, 30, 100, 100, 250, 300, 500, 700, 1000),
    "recovery_limit": (0, 0, 10, 60, 300),
    "max_recovery_ping_interval": (4, 16, 60, 300, 900),
    "alive_router_check_interval": (5, 10, 30, 60),
    "router_ping_timeout": (2, 5, 10, 50),
    "discovery": (0, 1),
}
#: health statuses an LNet drop rule's ``-e`` may simulate (spec §8.1)
HSTATUS = ("local_interrupt", "local_dropped", "local_aborted", "local_no_route",
           "local_error", "local_timeout", "remote_error", "remote_dropped",
           "remote_timeout", "network_timeout")
GAPS = (15.0, 40.0, 120.0)              # mean seconds between two faults of one kind
DURATIONS = ((1.0, 6.0), (5.0, 30.0), (20.0, 120.0))
SIZES = (0, 4096, 65536, 1 << 20)
EVERY = (0.1, 0.5, 1.0, 2.0, 5.0)
#: the faults' and streams' window ends this far before the safety phase does
TAIL = 10.0


@dataclass(frozen=True)
class KindOpts:
    """How one enabled fault kind behaves in this swarm."""

    kind: str
    gap: float
    durations: tuple[float, float]
    params: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        extra = "".join(f" {k}={_fmt(v)}" for k, v in self.params.items())
        lo, hi = self.durations
        return f"{self.kind} (every ~{self.gap:g} s, {lo:g}-{hi:g} s{extra})"


@dataclass(frozen=True)
class Swarm:
    """The options one seed draws (``render`` prints them)."""

    seed: int
    kinds: tuple[KindOpts, ...]
    tunables: dict[str, int]
    streams: int
    routed: float          # share of streams to a routed peer
    gets: float            # share of GETs

    def render(self) -> list[str]:
        tun = ", ".join(f"{k}={v}" for k, v in sorted(self.tunables.items()))
        return [f"seed {self.seed}: faults " + ("; ".join(k.render() for k in self.kinds)
                                                 or "none"),
                f"  tunables: {tun or 'as the topology sets them'}",
                f"  workload: {self.streams} streams, {self.routed:.0%} routed, "
                f"{self.gets:.0%} GETs"]


def rng_of(seed: int, what: str = "") -> random.Random:
    return random.Random(f"explore:{seed}{':' + what if what else ''}")


def swarm(topo: Topo, seed: int) -> Swarm:
    """The swarm of ``seed`` on ``topo`` (module doc)."""
    rng = rng_of(seed)
    on = [k for k in KINDS if rng.random() < 0.45] or [rng.choice(KINDS)]
    kinds = tuple(KindOpts(k, rng.choice(GAPS), rng.choice(DURATIONS), _params(rng, k))
                  for k in on)
    tunables = {name: rng.choice(values) for name, values in TUNABLES.items()
                if rng.random() < 0.5}
    return Swarm(seed, kinds, _consistent(topo, tunables), rng.randint(2, 6),
                 rng.choice((0.0, 0.3, 0.6)), rng.choice((0.0, 0.3)))


def _params(rng: random.Random, kind: str) -> dict[str, Any]:
    if kind == "loss":
        return {"rate": rng.choice((0.05, 0.2, 0.5, 0.9))}
    if kind == "delay":
        return {"delay": rng.choice((50.0, 500.0, 2000.0)), "rate": rng.choice((0.5, 1.0))}
    if kind == "flap":
        return {"style": rng.choice(("carrier", "blackhole")),
                "down": rng.choice((0.5, 2.0, 8.0)), "up": rng.choice((0.5, 2.0, 8.0))}
    if kind == "lnet_drop":
        classes = rng.sample(HSTATUS, rng.randint(1, 3)) if rng.random() < 0.7 else []
        return {"rate": rng.choice((1, 2, 5)), "e": classes}
    if kind == "lnet_delay":
        return {"rate": rng.choice((1, 2, 5)), "latency": rng.randint(1, MAX_RULE_LATENCY)}
    return {}


def _consistent(topo: Topo, tun: dict[str, int]) -> dict[str, int]:
    """LNet's own cross-checks (tunables.py): sensitivity 0 -> retry_count 0; tt > rc."""
    out = dict(tun)
    eff = topo.effective(out)
    sens = min(v["health_sensitivity"] for v in eff.values())
    rc = max(v["retry_count"] for v in eff.values())
    if sens == 0 and rc:
        out["retry_count"] = rc = 0
    tt = min(v["transaction_timeout"] for v in eff.values())
    if tt <= rc:
        out["transaction_timeout"] = max(TUNABLES["transaction_timeout"][1], rc + 1)
    return out


def expand(sw: Swarm, topo: Topo, time: float) -> Schedule:
    """The concrete schedule of ``sw`` over a safety phase of ``time`` seconds."""
    rng = rng_of(sw.seed, "schedule")
    window = max(time - TAIL, 1.0)
    faults: list[Fault] = []
    for k in sw.kinds:
        t = rng.expovariate(1.0 / k.gap)
        while t < window:
            dur = min(round(rng.uniform(*k.durations), 1), window - t)
            if dur >= 0.5:
                faults.append(_fault(rng, topo, k, round(t, 1), dur))
            t += rng.expovariate(1.0 / k.gap)
    faults.sort(key=lambda f: f.at)
    streams = [_stream(rng, topo, sw, window) for _ in range(sw.streams)]
    streams.sort(key=lambda s: s.at)
    return Schedule(sw.seed, time, dict(sw.tunables), tuple(faults),
                    tuple(s for s in streams if s is not None))


def _fault(rng: random.Random, topo: Topo, k: KindOpts, at: float, dur: float) -> Fault:
    node = rng.choice(topo.nodes)
    seed = rng.randrange(2**31)
    if k.kind in ("lnet_drop", "lnet_delay"):
        return _rule(rng, topo, k, node, at, dur)
    spec: dict[str, Any] = {"kind": k.kind}
    if k.kind == "partition":
        other = rng.choice([n for n in topo.nodes if n != node])
        spec.update(a=[node], b=[other], oneway=rng.random() < 0.5)
    else:
        spec["node"] = node
        if k.kind in ("carrier", "flap") or (k.kind != "kill" and rng.random() < 0.6):
            spec["iface"] = rng.choice(topo.ifaces(node))
        if k.kind in ("loss", "delay", "blackhole"):
            spec["direction"] = rng.choice(("out", "in", "both"))
    if k.kind == "flap":
        spec.update(style=k.params["style"], down=k.params["down"], up=k.params["up"])
        cycle = k.params["down"] + k.params["up"]
        spec["count"] = max(1, int(dur // cycle))
        dur = round(spec["count"] * cycle, 1)
    else:
        spec.update({p: v for p, v in k.params.items()})
        spec["duration"] = dur
    spec["seed"] = seed
    return Fault(at=at, kind=k.kind, duration=dur, spec=spec)


def _rule(rng: random.Random, topo: Topo, k: KindOpts, node: str, at: float,
          dur: float) -> Fault:
    """An LNet rule on ``node`` (spec §8.1-8.3): a drop rule with ``-e`` simulates a health
    error on what ``node`` sends to DST (TX side); one without drops, silently, what ``node``
    receives from SRC (RX side); a delay rule holds what ``node`` sends to DST. DST/SRC is one
    NID of a peer ``node`` talks to, or ``*``."""
    peers = topo.mr_peers(node) + topo.routed_peers(node)
    peer = rng.choice(topo.dst_nids(node, rng.choice(peers))) if peers and rng.random() < 0.8 \
        else "*"
    cmd = "net_drop" if k.kind == "lnet_drop" else "net_delay"
    rx = k.kind == "lnet_drop" and not k.params["e"]
    src, dst = (peer, "*") if rx else ("*", peer)
    add = [f"{cmd}_add", "-s", src, "-d", dst, "-r", str(k.params["rate"])]
    if k.kind == "lnet_drop":
        for cls in k.params["e"]:
            add += ["-e", cls]
    else:
        add += ["-l", str(k.params["latency"])]
    return Fault(at=at, kind=k.kind, duration=dur, node=node, add=tuple(add),
                 delete=(f"{cmd}_del", "-s", src, "-d", dst))


def _stream(rng: random.Random, topo: Topo, sw: Swarm, window: float) -> Stream | None:
    node = rng.choice(topo.endpoints)
    routed = topo.routed_peers(node) if rng.random() < sw.routed else []
    peers = routed or topo.mr_peers(node)
    if not peers:
        return None
    dst = rng.choice(topo.dst_nids(node, rng.choice(peers)))
    every = rng.choice(EVERY)
    at = round(rng.uniform(0.0, window * 0.8), 1)
    length = min(rng.uniform(5.0, 120.0), window - at)
    return Stream(at=at, node=node, op="get" if rng.random() < sw.gets else "put", dst=dst,
                  every=every, count=max(1, min(int(length / every) + 1, 600)),
                  size=rng.choice(SIZES))


def _fmt(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(v) or "(none)"
    return f"{v:g}" if isinstance(v, float) else str(v)
