"""Bring-up in the order a real cluster comes up, the same on every backend.

Theory of operation: on a real cluster LNet is up on the routers and servers (their NIs
configured, their acceptors listening) before clients add routes and peers. Configuring node
by node instead lets a client add a route whose gateway has no acceptor yet: the router
checker's first ping is refused (ECONNREFUSED, the peer NI's health drops, ``dropped: 1``),
the gateway is marked down, and the next check comes ``alive_router_check_interval`` (60 s by
default) later, so a routed ping fails for a minute after ``testbed up`` returned. So:

1. phase 1 on every node (``plan.local_steps``): ``lnet configure``, ``net add``, tunables (the
   daemon got its module parameters at start; the sim applies them first);
2. phase 2 on every node (``plan.remote_steps``): peers, routes, UDSP rules, raw imports;
3. ``wait_routes``: until every route whose gateway is a forwarding node of the testbed is
   ``up`` in ``lnetctl route show -v`` (the router checker's first round), bounded; a route
   still down is reported with its gateway peer NI's state and health (``peer show``).

A backend supplies ``send(node, step) -> Completed`` (one configuration step of
``testbed.plan.verbs``: a daemon's backend sends the typed request ``verbs.request(step)``,
fields, never argv the daemon parses again; the simulator hands the typed command to the
front end in-process), ``verb(node, argv) -> Completed`` (an lnetctl query: ``route show``,
``peer show``), ``advance(seconds)`` (sleep on Mininet, virtual time on the sim) and ``now()``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from nodes.echo import listed
from testbed.base import Completed, TestbedError
from testbed.plan import Plan
from testbed.plan.verbs import Step, awaited_routes, local_steps, remote_steps

Verb = Callable[[str, list[str]], Completed]
Send = Callable[[str, Step], Completed]
#: Bound on the wait for routes: a first router-checker round takes one monitor tick (1 s)
#: plus a ping; more than this means the ping failed and the next check is a check
#: interval away (then ``up`` reports which routes are down and why, and returns).
ROUTE_WAIT = 10.0
ROUTE_POLL = 0.25


def completed(reply: dict[str, Any]) -> Completed:
    """A daemon's reply as a command's result (a request refused on receipt: rc 1, why)."""
    return Completed(int(reply.get("rc", 1)), str(reply.get("out", "")),
                     str(reply.get("err", "") or reply.get("error", "")))


def run_step(node: str, step: Step, send: Send) -> None:
    """Send one step; a failure names the node and the step as lnetctl words.

    Raises:
        TestbedError: the step failed.
    """
    res = send(node, step)
    if res.rc != 0:
        raise TestbedError(f"node {node}: lnetctl {' '.join(step.argv())} failed with rc "
                           f"{res.rc}: {' '.join((res.out + res.err).split())}")


def configure(plan: Plan, send: Send, lnet_dir: Path,
              progress: Callable[[str], None] | None = None, parallel: int = 1) -> None:
    """Phase 1 on every node, then phase 2 on every node; within a phase the nodes are
    independent, so ``parallel`` of them at a time (each node's steps in order) where the
    backend's ``send`` may be called from several threads.

    Raises:
        TestbedError: a verb failed (names the node, the verb and its output).
    """
    def phase(steps: Callable[[Any], list[Step]]) -> None:
        def one(node: Any) -> None:
            for step in steps(node):
                run_step(node.name, step, send)
        if parallel <= 1:
            for node in plan.nodes:
                one(node)
            return
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            for _ in pool.map(one, plan.nodes):
                pass

    if progress is not None:
        progress("configuring NIs: " + listed(n.name for n in plan.nodes))
    phase(local_steps)
    if progress is not None:
        progress("configuring peers, routes, UDSPs")
    phase(lambda node: remote_steps(plan, node, lnet_dir))


def _route_states(node: str, verb: Verb) -> dict[tuple[str, str], str]:
    res = verb(node, ["route", "show", "-v"])
    if res.rc != 0:
        return {}
    doc = yaml.safe_load(res.out) or {}
    return {(str(r.get("net")), str(r.get("gateway"))): str(r.get("state"))
            for r in doc.get("route") or []}


def _why(node: str, gateway: str, verb: Verb) -> str:
    """What ``node`` knows of ``gateway``: its peer NI's state and health."""
    res = verb(node, ["peer", "show", "--nid", gateway, "-v", "3"])
    try:
        peers: list[dict[str, Any]] = (yaml.safe_load(res.out) or {}).get("peer") or []
        ni = next(p for peer in peers for p in peer["peer ni"] if p["nid"] == gateway)
    except (yaml.YAMLError, StopIteration, KeyError, TypeError, AttributeError):
        return "no peer entry for the gateway"
    health = ni.get("health stats", {})
    return (f"gateway peer NI state {ni.get('state')}, health {health.get('health value')}, "
            f"dropped {health.get('dropped')}, timeout {health.get('timeout')}")


def wait_routes(plan: Plan, verb: Verb, *, advance: Callable[[float], None],
                now: Callable[[], float], timeout: float = ROUTE_WAIT) -> list[str]:
    """Wait (bounded) until every awaited route is up; returns one line per route that is
    not (``[]``: all up)."""
    pending = {(node, net, gw): gwnode for node, routes in awaited_routes(plan).items()
               for net, gw, gwnode in routes}
    deadline = now() + timeout
    states: dict[tuple[str, str, str], str] = {}
    while pending:
        for node in sorted({k[0] for k in pending}):
            seen = _route_states(node, verb)
            for key in [k for k in pending if k[0] == node]:
                states[key] = seen.get((key[1], key[2]), "missing")
                if states[key] == "up":
                    del pending[key]
        if not pending or now() >= deadline:
            break
        advance(ROUTE_POLL)
    return [f"node {node}: route to {net} via {gw} ({gwnode}) is {states.get((node, net, gw))} "
            f"after {timeout:g}s: {_why(node, gw, verb)}"
            for (node, net, gw), gwnode in sorted(pending.items())]
