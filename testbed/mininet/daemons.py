"""The node daemons of a Mininet testbed: start one per host, wait for ``hello``, configure.

Theory of operation: each daemon is started inside its host's namespace (``mnexec -a``) with
the testbed's owner tag in its environment and the node's LNet module parameters on its
command line (``--lnet-param``, spec §0), recorded in state.json before it starts; every wait
is bounded and a daemon that exits or stays silent fails the bring-up with its log's tail.
Configuration is the node's list of typed steps (``testbed.plan.config_steps``), the same list
the sim backend runs, sent as typed requests (``send``); at bring-up ``testbed.bringup`` runs
it in two phases over all nodes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nodes.daemon.client import DaemonUnreachable, request
from testbed import runstate
from testbed.base import Completed, TestbedError
from testbed.bringup import completed, run_step
from testbed.mininet.netbuild import BringUpError
from testbed.plan import NodePlan, Step, config_steps
from testbed.plan import request as step_request

if TYPE_CHECKING:
    from testbed.mininet.supervisor import Supervisor

#: Seconds every daemon gets to answer its first ``hello``.
HELLO_TIMEOUT = 30.0
#: Seconds one configuration verb may take.
CONFIG_TIMEOUT = 30.0


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) if tail else "(empty log)"


def daemon_argv(sup: Supervisor, node: NodePlan) -> list[str]:
    # module parameters (spec §0), then the recorder and message trace options (issue 16)
    return [sys.executable, "-m", "nodes.daemon", "--testbed", sup.name,
            "--node", node.name, "--rundir", str(sup.rdir)] + [
                f"--lnet-param={k}={v}" for k, v in node.module_params] + sup.observe

def start_daemon(sup: Supervisor, node: NodePlan) -> None:
    host = sup.hosts[node.name]
    argv = daemon_argv(sup, node)
    sup.record("daemon", node=node.name)
    with open(runstate.node_log(sup.rdir, node.name), "ab") as log:
        proc = host.popen(argv, mncmd=["mnexec", "-a", str(host.pid)], env=sup.env,
                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                          cwd="/", start_new_session=True)
    sup.daemons[node.name] = proc
    info = sup.state["nodes"][node.name]
    info["daemon_pid"] = proc.pid
    info["sock"] = str(runstate.node_sock(sup.rdir, node.name))
    sup.save()
    runstate.append_event(sup.rdir, "node_started", node=node.name, pid=proc.pid)

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
                reply = request(str(sock), {"cmd": "hello"}, timeout=1.0)
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
        reply = request(sock, {"cmd": "lnetctl", "argv": argv}, timeout=CONFIG_TIMEOUT)
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
        reply = request(sock, step_request(step), timeout=CONFIG_TIMEOUT)
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
