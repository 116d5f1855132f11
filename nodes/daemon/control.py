"""The daemon's ZeroMQ control socket: JSON requests in, JSON replies out (STYLE rule 11).

Theory of operation: a ROUTER socket on ``ipc://<rundir>/nodes/<node>.sock``; every request is
handled in its own task (a long ``lnetctl ping`` does not block ``net show``) and answered with
exactly one reply. Malformed requests get ``{"ok": false, "error": ...}``; nothing a client
sends can stop the daemon except the ``shutdown`` verb. Never pickle (pyzmq's own advice).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from typing import TYPE_CHECKING, Any

import zmq
import zmq.asyncio

from nodes.daemon import lst_verb
from nodes.daemon.eventlog import EventLog
from nodes.daemon.runtime import SRPC_RDMA_PORTAL
from nodes.dlc import request as frontend
from nodes.dlc.limits import MAX_REQUEST_BYTES
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from nodes.daemon.runtime import NodeRuntime

log = logging.getLogger("control")
MAX_INFLIGHT = 64  # PUTs or GETs of one burst in flight at once


def burst_args(req: dict[str, Any]) -> tuple[NID, int, int, NID | None, int | None] | str:
    """Check a ``put``/``get`` request's arguments: (dst, count, size, src, numa), or a
    one-line error naming the bad argument (shared by the sim backend, testbed/sim/)."""
    try:
        dst = NID.parse(str(req.get("dst", "")))
    except LNetConfigError as e:
        return f"dst: {e.descr}"
    try:
        src = NID.parse(str(req["src"])) if req.get("src") else None
    except LNetConfigError as e:
        return f"src: {e.descr}"
    count, size = req.get("count", 1), req.get("size", 4096)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 1_000_000:
        return f"count must be an integer 1..1000000, not {count!r}"
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= LNET_MTU:
        return f"size must be an integer 0..{LNET_MTU}, not {size!r}"
    numa = req.get("numa")  # NUMA node of the message memory (snd-020, emulated)
    if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int) or numa < 0):
        return f"numa must be a NUMA node number >= 0, not {numa!r}"
    return dst, count, size, src, numa


def burst_end(op: str, dst: NID, sent: int, completed: int,
              errors: dict[str, int]) -> dict[str, Any]:
    """The fields of a ``traffic_end`` event and of the burst's reply (docs/events.md §1.6):
    messages started, completed, failed, failures by final event kind and status (a burst
    cut short has started messages that are neither)."""
    return {"op": op, "dst": str(dst), "sent": sent, "completed": completed,
            "failed": sum(errors.values()), "errors": dict(errors)}


class ControlServer:
    def __init__(self, rt: NodeRuntime, node: str, sock_path: str) -> None:
        self.rt = rt
        self.node = node
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # a frame past this is dropped by ZeroMQ itself, never buffered whole (issue 11)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 4 * MAX_REQUEST_BYTES)
        self.sock.bind(f"ipc://{sock_path}")
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        # health notices and workload events -> events.jsonl (hlth-lnt-udev, issue 16)
        self.events = EventLog.from_env(node)
        if self.events is not None:
            rt.notice_sink = self.events.write

    async def serve(self) -> None:
        while not self.stopping.is_set():
            recv = asyncio.ensure_future(self.sock.recv_multipart())
            stop = asyncio.ensure_future(self.stopping.wait())
            done, _ = await asyncio.wait({recv, stop}, return_when=asyncio.FIRST_COMPLETED)
            if recv not in done:
                recv.cancel()
                break
            stop.cancel()
            frames = recv.result()
            task = asyncio.create_task(self._handle(frames))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, frames: list[bytes]) -> None:
        if len(frames) < 3:
            return  # not a REQ envelope: nothing to answer to
        ident, body = frames[0], frames[-1]
        try:
            if len(body) > MAX_REQUEST_BYTES:  # checked before any parsing (issue 11 item 2)
                raise ValueError(f"request of {len(body)} bytes is larger than "
                                 f"{MAX_REQUEST_BYTES}")
            try:
                req = json.loads(body)
            except RecursionError:  # "[" * 100000: bounded by the interpreter's depth
                raise ValueError("request nested too deeply") from None
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise ValueError("request must be a JSON object with a string 'cmd'")
            reply = await self.dispatch(req)
        except (ValueError, TypeError, KeyError) as e:
            reply = {"ok": False, "error": f"bad request: {e}"}
        except Exception as e:
            log.exception("request failed")
            reply = {"ok": False, "error": f"internal error: {e!r}"}
        await self.sock.send_multipart([ident, b"", json.dumps(reply).encode()])

    async def dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        if cmd == "hello":
            import os

            return {"ok": True, "node": self.node, "pid": os.getpid(),
                    "nids": [str(ni.nid) for ni in self.rt.engine.local_nis()]}
        if cmd in frontend.KINDS:  # lnetctl/lctl argv, typed DLC commands (nodes/dlc)
            return await frontend.handle(self.rt, req)
        if cmd in ("put", "get"):
            return await self._burst(cmd, req)
        if cmd == "flush":  # trace and recorder to their files (a reader is about to look)
            self.rt.flush_observations()
            return {"ok": True}
        if cmd in lst_verb.VERBS:  # lnet_selftest: lst and its console ioctls
            return await lst_verb.dispatch(self.rt, req)
        if cmd == "shutdown":
            self.stopping.set()
            return {"ok": True}
        raise ValueError(f"unknown cmd '{cmd}'")

    async def _burst(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        """A burst of ``count`` PUTs (ACKed) or GETs (answered with a REPLY of ``size``
        bytes) to the lnet_selftest bulk portal, at most 64 in flight; each message succeeds
        when its final event is the ACK/REPLY with status 0 (spec §4.4). 64 workers take
        messages off a counter: no task and semaphore per message (the runtime's
        ``wait_final`` is the only per-message wait; on the sim it advances virtual time)."""
        parsed = burst_args(req)
        if isinstance(parsed, str):
            return {"ok": False, "error": parsed}
        dst, count, size, src, numa = parsed
        errors: collections.Counter[str] = collections.Counter()
        engine, want = self.rt.engine, "ACK" if op == "put" else "REPLY"
        payload = bytes(size) if op == "put" else b""
        left, ok = [count], [0]

        def start() -> tuple[int, list[Any]]:
            if op == "put":
                return engine.put(self.rt.now(), dst, payload=payload,
                                  portal=SRPC_RDMA_PORTAL, src=src, numa=numa)
            return engine.get(self.rt.now(), dst, length=size, portal=SRPC_RDMA_PORTAL,
                              src=src, numa=numa)

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                final = (await self.rt.wait_final(start))[-1]
                if final.kind != want or final.status != 0:
                    errors[f"{final.kind}:{final.status}"] += 1
                else:
                    ok[0] += 1

        self._workload("traffic_start", op=op, dst=str(dst), count=count, size=size)
        try:
            await asyncio.gather(*(worker() for _ in range(min(MAX_INFLIGHT, count))))
        except BaseException as e:  # a burst cut short (shutdown) ends too, with why
            self._workload("traffic_end", **burst_end(op, dst, count - left[0], ok[0], errors),
                           error=repr(e))
            raise
        end = burst_end(op, dst, count, ok[0], errors)
        self._workload("traffic_end", **end)
        return {"ok": True, **{k: end[k] for k in ("sent", "completed", "failed", "errors")}}

    def _workload(self, kind: str, **fields: Any) -> None:
        """A workload event (docs/events.md §1.6) in the testbed event log."""
        if self.events is not None:
            self.events.write(kind, fields)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.sock.close(0)
        self.ctx.term()
