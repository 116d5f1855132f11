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

from nodes.daemon import lctl_cmd, lnetctl_cmd
from nodes.daemon.eventlog import EventLog
from nodes.daemon.runtime import SRPC_RDMA_PORTAL
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from nodes.daemon.runtime import NodeRuntime

log = logging.getLogger("control")
MAX_PUT_INFLIGHT = 64


class ControlServer:
    def __init__(self, rt: NodeRuntime, node: str, sock_path: str) -> None:
        self.rt = rt
        self.node = node
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(f"ipc://{sock_path}")
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        events = EventLog.from_env(node)  # health notices -> events.jsonl (hlth-lnt-udev)
        if events is not None:
            rt.notice_sink = events.write

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
            req = json.loads(body)
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
        if cmd in ("lnetctl", "lctl"):
            argv = req.get("argv")
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ValueError("'argv' must be a list of strings")
            module = lnetctl_cmd if cmd == "lnetctl" else lctl_cmd
            rc, out, err = await module.run(self.rt, argv)
            self.rt.flush_notices()  # e.g. `lnetctl net set --health`: status changes
            return {"rc": rc, "out": out, "err": err}
        if cmd == "put":
            return await self._put(req)
        if cmd == "shutdown":
            self.stopping.set()
            return {"ok": True}
        raise ValueError(f"unknown cmd '{cmd}'")

    async def _put(self, req: dict[str, Any]) -> dict[str, Any]:
        """A burst of PUTs to the lnet_selftest bulk portal, at most 64 in flight."""
        try:
            dst = NID.parse(str(req["dst"]))
        except LNetConfigError as e:
            return {"ok": False, "error": e.descr}
        count, size = int(req.get("count", 1)), int(req.get("size", 4096))
        if not 0 < count <= 1_000_000 or not 0 <= size <= LNET_MTU:
            return {"ok": False, "error": "count must be 1..1000000 and size 0..1048576"}
        src = NID.parse(req["src"]) if req.get("src") else None
        numa = req.get("numa")  # NUMA node of the message memory (snd-020, emulated)
        if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int)
                                 or numa < 0):
            return {"ok": False, "error": f"numa must be a NUMA node number >= 0, not {numa!r}"}
        sem = asyncio.Semaphore(MAX_PUT_INFLIGHT)
        errors: collections.Counter[str] = collections.Counter()
        payload = bytes(size)

        async def one() -> None:
            async with sem:
                events = await self.rt.wait_final(lambda: self.rt.engine.put(
                    self.rt.now(), dst, payload=payload, portal=SRPC_RDMA_PORTAL, src=src,
                    numa=numa))
                final = events[-1]
                if final.kind != "ACK" or final.status != 0:
                    errors[f"{final.kind}:{final.status}"] += 1

        await asyncio.gather(*(one() for _ in range(count)))
        failed = sum(errors.values())
        return {"ok": True, "sent": count, "completed": count - failed, "failed": failed,
                "errors": dict(errors)}

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.sock.close(0)
        self.ctx.term()
