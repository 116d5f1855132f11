"""``python -m nodes.daemon.forkserver``: start node daemons by fork from one pre-imported process.

Why (issue 13 item 4): a daemon started as ``python -m nodes.daemon`` pays an interpreter start
and the daemon's whole import graph (~0.2 s of CPU each, ~20 MB of private memory); 300 of
them are a minute of CPU on a 2-core box. This server imports that graph once (``PRELOAD``),
freezes it out of the garbage collector (``gc.freeze``: the collector would otherwise write to
every inherited object and unshare its page), and forks one child per node: the children
share the imported code and objects copy-on-write with the server and with each other.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout, in order:
``{"node": N, "ns_pid": P, "argv": [...daemon options...], "log": PATH}`` ->
``{"pid": DAEMON_PID}`` or ``{"error": "..."}``; a line holding a list of requests gets the
list of their replies (every helper of the batch forked before any report is read). EOF on
stdin ends the server.

Each daemon is a real process of its own, as ``mnexec -a P python -m nodes.daemon`` made it:
the server forks a helper per ``CHUNK`` requests of a batch, which for each request enters
the network and mount namespaces of pid ``P`` (the Mininet host's holder: ``setns(2)`` on
``/proc/P/ns/{net,mnt}``, the two ``mnexec -a`` joins), forks the daemon (its own session,
stdin ``/dev/null``, stdout and stderr appended to its log, no other descriptor of the
server), and once all are forked reports their pids and exits (issue 34: a helper per
daemon was two forks of this process per node, 40 % of its time at 1,000 nodes). The daemon,
orphaned, is re-parented to the nearest child subreaper: the caller (the Mininet supervisor sets
``PR_SET_CHILD_SUBREAPER``), so the caller waits for it, signals it and reads its exit status
exactly as for a child it had spawned. The server never enters a namespace and holds no
socket: nothing of it outlives the caller (``PR_SET_PDEATHSIG``) or needs undoing at
``testbed down``; a daemon killed with ``kill -9`` is one process gone, nothing else.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import signal
import sys
from typing import Any

#: What a daemon imports to start and to serve the bring-up's lnetctl verbs: imported here
#: once and shared by every child (a module a child imports itself is private to it).
PRELOAD = ("nodes.daemon.__main__", "nodes.dlc.verbs.lnetctl_cmd", "nodes.dlc.verbs.lctl_cmd",
           "nodes.dlc.verbs.lnetctl_set", "nodes.dlc.verbs.lnetctl_export", "yaml")
#: Requests one fork helper serves, one after the other (2 helpers for 1,000 nodes would
#: leave a core idle; one per node doubled the forks of this large process).
CHUNK = 64
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
_LIBC = ctypes.CDLL(None, use_errno=True)


def _setns(pid: int, ns: str, nstype: int) -> None:
    fd = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _LIBC.setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {ns} of pid {pid}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _daemon(req: dict[str, Any]) -> int:
    """In the grandchild: become the node's daemon; returns its exit code."""
    os.closerange(3, 1 << 16)  # the server's pipes first: its reader waits for their EOF
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    # the dispositions a fresh interpreter starts with: SIGPIPE *ignored* (Python's startup
    # ignores it, so a write to a socket its peer reset fails with EPIPE; SIG_DFL here killed
    # daemons with -13 under the soak's resets), SIGINT to KeyboardInterrupt, the rest default
    for sig in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # `ps -o comm`, top and pgrep tell the daemons apart (the command line is the server's)
    _LIBC.prctl(PR_SET_NAME, f"lnetd {req.get('node')}"[:15].encode(), 0, 0, 0)
    gc.enable()
    from nodes.daemon.__main__ import main

    return main([str(a) for a in req["argv"]])


def _one(req: dict[str, Any]) -> dict[str, Any]:
    """In the helper: join the node's namespaces and fork its daemon; the reply."""
    try:
        pid = int(req["ns_pid"])
        _setns(pid, "net", CLONE_NEWNET)
        _setns(pid, "mnt", CLONE_NEWNS)
        os.chdir("/")
        child = os.fork()
    except BaseException as exc:  # reported to the caller, one line
        return {"error": f"node {req.get('node')}: {exc}"}
    if child == 0:
        rc = 1
        try:
            rc = _daemon(req)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # the daemon's crash goes to its log
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    return {"pid": child}


def _helper(reqs: list[dict[str, Any]], wfd: int) -> None:
    """In the child: each request's daemon forked in its namespaces, then every reply
    reported at once (a JSON list, in order), then exit: the daemons are orphaned."""
    code = 1
    try:
        replies = [_one(req) for req in reqs]
        os.write(wfd, json.dumps(replies).encode())
        code = 0
    finally:
        os._exit(code)


def begin(reqs: list[dict[str, Any]]) -> tuple[int, int]:
    """Fork the helper for some requests; (its pid, the read end of its report pipe)."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    helper = os.fork()
    if helper == 0:
        os.close(rfd)
        _helper(reqs, wfd)
    os.close(wfd)
    return helper, rfd


def finish(reqs: list[dict[str, Any]], helper: int, rfd: int) -> list[dict[str, Any]]:
    """The helper's report, one reply per request (it exits right after writing it)."""
    chunks = []
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(helper, 0)
    try:
        replies = json.loads(b"".join(chunks))
    except ValueError:
        replies = None
    if not isinstance(replies, list) or len(replies) != len(reqs):
        return [{"error": f"node {req.get('node')}: the fork helper died"} for req in reqs]
    return [r if isinstance(r, dict) else {"error": "bad helper reply"} for r in replies]


def spawn_all(reqs: list[Any]) -> list[dict[str, Any]]:
    """Every helper forked first (one per ``CHUNK`` valid requests), then every report read:
    on a loaded box each fork's round trip is a scheduling delay, so a batch pays it once
    per helper, not once per node."""
    replies: list[dict[str, Any] | None] = [None] * len(reqs)
    valid = []
    for i, req in enumerate(reqs):
        if isinstance(req, dict) and isinstance(req.get("argv"), list):
            valid.append(i)
        else:
            replies[i] = {"error": "request is not {node, ns_pid, argv, log}"}
    started = []
    for k in range(0, len(valid), CHUNK):
        idx = valid[k:k + CHUNK]
        try:
            started.append((idx, *begin([reqs[i] for i in idx])))
        except OSError as exc:
            for i in idx:
                replies[i] = {"error": f"node {reqs[i].get('node')}: fork: {exc}"}
    for idx, helper, rfd in started:
        for i, reply in zip(idx, finish([reqs[i] for i in idx], helper, rfd), strict=True):
            replies[i] = reply
    return [r if r is not None else {"error": "no reply"} for r in replies]


def serve(inp: Any, out: Any) -> None:
    """One reply line per request line; a line holding a list of requests (a batch) gets
    the list of their replies."""
    for line in inp:
        try:
            req = json.loads(line)
            replies = spawn_all(req if isinstance(req, list) else [req])
            reply: Any = replies if isinstance(req, list) else replies[0]
        except ValueError as exc:
            reply = {"error": f"request is not JSON: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main() -> int:
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the caller's end is ours
    if os.getppid() == 1:
        return 1
    gc.disable()
    for name in PRELOAD:
        importlib.import_module(name)
    # the option parser compiles its regexes on first use: once here, cached for every child
    sys.modules["nodes.daemon.__main__"]._parse(["--testbed", "t", "--node", "n", "--rundir", "/"])
    gc.collect()
    gc.freeze()
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    serve(sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
