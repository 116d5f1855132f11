"""The node daemons of a Mininet testbed: start one per host, wait for ``hello``, configure.

Theory of operation: each daemon is forked inside its host's namespaces by the testbed's fork
server (``nodes.daemon.forkserver``: the daemon's code imported once, not once per node) with
the testbed's owner tag in its environment and the node's LNet module parameters on its
command line (``--lnet-param``, spec §0), recorded in state.json before it starts; every wait
is bounded and a daemon that exits or stays silent fails the bring-up with its log's tail.
Configuration is the node's list of typed steps (``testbed.plan.config_steps``), the same list
the sim backend runs, sent as typed requests (``send``); at bring-up ``testbed.bringup`` runs
it in two phases over all nodes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from nodes.daemon.client import DaemonUnreachable, request
from nodes.daemon.fusefs import mount_namespace
from testbed import runstate
from testbed.base import Completed, TestbedError
from testbed.bringup import completed, run_step
from testbed.mininet.forkclient import DaemonProcess, ForkServer, ForkServerError
from testbed.mininet.netbuild import BringUpError
from testbed.plan import NodePlan, Step, config_steps
from testbed.plan import request as step_request

if TYPE_CHECKING:
    from testbed.mininet.supervisor import Supervisor

#: Seconds every daemon gets to answer its first ``hello``.
HELLO_TIMEOUT = 30.0
#: Seconds one configuration verb may take.
CONFIG_TIMEOUT = 30.0
#: Seconds the fork server gets to import the daemon's code, and to answer each request.
FORKSERVER_TIMEOUT = 30.0


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) if tail else "(empty log)"


def daemon_argv(sup: Supervisor, node: NodePlan) -> list[str]:
    """The daemon's options (``python -m nodes.daemon`` takes the same): module parameters
    (spec §0), then the recorder and message trace options (issue 16); ``--sysfs``: the
    node's /sys/module parameter files, in its own mount namespace, never in this one (the
    machine's; nodes/daemon/fusefs.py)."""
    return ["--testbed", sup.name, "--node", node.name, "--rundir", str(sup.rdir),
            f"--sysfs={mount_namespace()}"] + [
        f"--lnet-param={k}={v}" for k, v in node.module_params] + sup.observe


def start_daemon(sup: Supervisor, node: NodePlan) -> None:
    """One daemon (a restart); see :func:`start_daemons`."""
    start_daemons(sup, [node])


def start_daemons(sup: Supervisor, nodes: list[NodePlan]) -> None:
    """Start the daemons of ``nodes`` through the testbed's fork server (started on first
    use), each recorded in state.json before it starts.

    Raises:
        BringUpError: the fork server could not start a daemon.
    """
    start_forkserver(sup)
    for node in nodes:
        sup.state["created"].append({"kind": "daemon", "node": node.name})
    sup.save()
    assert sup.forkserver is not None
    try:
        started = sup.forkserver.start([
            {"node": node.name, "ns_pid": sup.hosts[node.name].pid,
             "argv": daemon_argv(sup, node),
             "log": str(runstate.node_log(sup.rdir, node.name))} for node in nodes])
    except ForkServerError as exc:
        raise BringUpError(str(exc)) from exc
    errors = []
    for node, pid in zip(nodes, started, strict=True):
        if isinstance(pid, str):
            errors.append(pid)
            continue
        sup.daemons[node.name] = DaemonProcess(pid)
        info = sup.state["nodes"][node.name]
        info["daemon_pid"] = pid
        info["sock"] = str(runstate.node_sock(sup.rdir, node.name))
        runstate.append_event(sup.rdir, "node_started", node=node.name, pid=pid)
    sup.save()
    if errors:
        raise BringUpError(f"fork server: {errors[0]}")


def start_forkserver(sup: Supervisor) -> None:
    """The testbed's fork server, recorded before it starts; it imports the daemon's code
    while the network is built (independent steps in parallel)."""
    if sup.forkserver is None:
        sup.record("forkserver")
        sup.forkserver = ForkServer(sup.env, FORKSERVER_TIMEOUT)
        sup.state["forkserver_pid"] = sup.forkserver.pid
        sup.save()


def stop_forkserver(sup: Supervisor) -> None:
    if sup.forkserver is not None:
        sup.forkserver.stop()


def wait_hello(sup: Supervisor) -> None:
    pending = [n.name for n in sup.plan.nodes]
    deadline = time.monotonic() + HELLO_TIMEOUT
    while pending:
        for node in list(pending):
            proc = sup.daemons[node]
            if proc.poll() is not None:
                raise BringUpError(
                    f"daemon of node {node} exited with rc {proc.returncode}: "
                    f"{log_tail(runstate.node_log(sup.rdir, node))}")
            sock = runstate.node_sock(sup.rdir, node)
            if not sock.exists():
                continue
            try:
                reply = request(str(sock), {"cmd": "hello"}, timeout=1.0, ctx=sup.zctx)
            except DaemonUnreachable:
                continue
            if reply.get("ok") and reply.get("node") == node:
                pending.remove(node)
        if not pending:
            break
        if time.monotonic() >= deadline:
            node = pending[0]
            raise BringUpError(
                f"daemon of node {node} did not answer hello within {HELLO_TIMEOUT:g}s: "
                f"{log_tail(runstate.node_log(sup.rdir, node))}")
        time.sleep(0.05)

def verb(sup: Supervisor, node: str, argv: list[str]) -> Completed:
    """One lnetctl command on ``node``'s daemon (bounded).

    Raises:
        BringUpError: the daemon did not answer.
    """
    sock = str(runstate.node_sock(sup.rdir, node))
    try:
        reply = request(sock, {"cmd": "lnetctl", "argv": argv}, timeout=CONFIG_TIMEOUT,
                        ctx=sup.zctx)
    except DaemonUnreachable as exc:
        raise BringUpError(f"node {node}: lnetctl {' '.join(argv)}: {exc}") from exc
    return Completed(int(reply.get("rc", 1)), str(reply.get("out", "")),
                     str(reply.get("err", "")))


def send(sup: Supervisor, node: str, step: Step) -> Completed:
    """One configuration step on ``node``'s daemon as a typed request (bounded).

    Raises:
        BringUpError: the daemon did not answer.
    """
    sock = str(runstate.node_sock(sup.rdir, node))
    try:
        reply = request(sock, step_request(step), timeout=CONFIG_TIMEOUT, ctx=sup.zctx)
    except DaemonUnreachable as exc:
        raise BringUpError(f"node {node}: lnetctl {' '.join(step.argv())}: {exc}") from exc
    return completed(reply)


def configure(sup: Supervisor, node: NodePlan) -> None:
    """One node alone, both phases (a restarted daemon: the others are up already).

    Raises:
        BringUpError: a step failed.
    """
    try:
        for step in config_steps(sup.plan, node, sup.rdir / "nodes"):
            run_step(node.name, step, lambda n, s: send(sup, n, s))
    except TestbedError as exc:
        raise BringUpError(str(exc)) from None
