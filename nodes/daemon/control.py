"""The daemon's ZeroMQ control socket: JSON requests in, JSON replies out (STYLE rule 11).

Theory of operation: a ROUTER socket on ``ipc://<rundir>/nodes/<node>.sock``; every request is
handled in its own task (a long ``lnetctl ping`` does not block ``net show``) and answered with
exactly one reply. Malformed requests get ``{"ok": false, "error": ...}``; nothing a client
sends can stop the daemon except the ``shutdown`` verb. Never pickle (pyzmq's own advice).
The loop is the one every control socket of the project runs (``ctlloop.py`` ``ServeLoop``,
a testbed's ``ctl.sock`` too); this module is the daemon's request check and its verbs.

Networked control (a node in a VM, a container or on another host, testbed/vagrant/): a second
ROUTER on ``tcp://ADDR:PORT`` with CURVE (:class:`CurveServer`): the daemon is a CURVE server
with its own key pair, and a ZAP handler (pyzmq's ``AsyncioAuthenticator``) admits only the
client public keys in one directory, so a client without CURVE, with another key, or with a
wrong idea of the server's key never gets a request through. ADDR is the management address
of the guest or host; a listener made in another network namespace can be handed over as an
inherited descriptor (``ZMQ_USE_FD``), so the daemon runs in its node's namespace while its
control port lives on the management network only. Same JSON protocol on both sockets.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import zmq
import zmq.asyncio

from nodes.burst import MAX_INFLIGHT, Burst, burst_args
from nodes.daemon.ctlloop import ServeLoop, router
from nodes.daemon.eventlog import EventLog
from nodes.daemon.runtime import NodeRuntime
from nodes.limits import MAX_REQUEST_BYTES

if TYPE_CHECKING:
    from nodes.lnet.actions import MDEvent

log = logging.getLogger("control")


#: ZAP domain of the CURVE control sockets (logged by the authenticator on refusals).
ZAP_DOMAIN = "lnet-testbed"


@dataclass(frozen=True)
class CurveServer:
    """A CURVE-protected TCP control endpoint.

    ``endpoint`` is ``tcp://ADDR:PORT`` (ADDR: the management address, never a wildcard when
    the orchestrator starts the daemon); ``secret_key``/``public_key`` the daemon's Z85 key
    pair; ``clients_dir`` holds the admitted clients' public keys (``zmq.auth`` certificate
    files, ``*.key``); ``fd`` an already listening TCP socket to use (``ZMQ_USE_FD``).
    """

    endpoint: str
    public_key: bytes
    secret_key: bytes
    clients_dir: Path
    fd: int | None = None


#: Test-only: seconds added to every time ``events`` reports, standing in for a host whose clock
#: is wrong (testbed/vagrant/ merges several hosts' logs on one clock; containers share ours).
ENV_CLOCK_SKEW = "LNET_TESTBED_CLOCK_SKEW"
#: Most bytes of event log one ``events`` reply carries.
EVENTS_CHUNK = 1 << 20


def read_events(offset: Any) -> dict[str, Any]:
    """``events``: whole lines of this host's event log after byte ``offset``, and the time.

    The orchestrator of a testbed spread over hosts (testbed/vagrant/) asks one daemon per host
    for the log its daemons share (``$LNET_TESTBED_RUNDIR/events.jsonl``) and reads the host's
    clock from the same reply (one round trip: its offset is known within half of it).
    """
    import os
    import time

    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError("'offset' must be an integer >= 0")
    skew = float(os.environ.get(ENV_CLOCK_SKEW) or 0.0)
    rundir = os.environ.get("LNET_TESTBED_RUNDIR")
    chunk = b""
    if rundir:
        try:
            with open(Path(rundir) / "events.jsonl", "rb") as f:
                f.seek(offset)
                chunk = f.read(EVENTS_CHUNK)
        except OSError:
            chunk = b""
    chunk = chunk[:chunk.rfind(b"\n") + 1]
    lines = []
    for raw in chunk.splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("t"), int | float):
            event["t"] += skew
            lines.append(event)
    return {"ok": True, "events": lines, "offset": offset + len(chunk),
            "time": time.time() + skew}


class FrontEnd(Protocol):
    """The node's lnetctl/lctl/dlc/lst request handler (``nodes/dlc/request.py``), handed
    over by the daemon's entry point (``__main__``): this package imports nothing of
    ``nodes/dlc``."""

    KINDS: Sequence[str]

    def handle(self, rt: Any, req: dict[str, Any]) -> Coroutine[Any, Any, dict[str, Any]]: ...


class ControlServer:
    def __init__(self, rt: NodeRuntime, node: str, sock_path: str, frontend: FrontEnd,
                 curve: CurveServer | None = None) -> None:
        self.rt = rt
        self.frontend = frontend
        self.node = node
        self.ctx = zmq.asyncio.Context()
        # a frame past this is dropped by ZeroMQ itself, never buffered whole (issue 11)
        self.sock = router(self.ctx, linger=0, max_frame=4 * MAX_REQUEST_BYTES)
        self.sock.bind(f"ipc://{sock_path}")
        self.socks = [self.sock]
        self.auth: Any = None
        if curve is not None:
            self.socks.append(self._bind_curve(curve))
        self.stopping = asyncio.Event()
        self.loop: ServeLoop | None = None  # (while serving)
        # health notices and workload events -> events.jsonl (hlth-lnt-udev, issue 16)
        self.events = EventLog.from_env(node)
        if self.events is not None:
            rt.notice_sink = self.events.write

    def _bind_curve(self, curve: CurveServer) -> zmq.asyncio.Socket:
        """The TCP ROUTER: CURVE server, ZAP admits only the keys in ``clients_dir``."""
        from zmq.auth.asyncio import AsyncioAuthenticator

        self.auth = AsyncioAuthenticator(self.ctx)
        self.auth.start()
        self.auth.configure_curve(domain=ZAP_DOMAIN, location=str(curve.clients_dir))
        sock = router(self.ctx, linger=0)
        sock.curve_server = True
        sock.curve_publickey = curve.public_key
        sock.curve_secretkey = curve.secret_key
        sock.zap_domain = ZAP_DOMAIN.encode()
        if curve.fd is not None:
            sock.setsockopt(zmq.USE_FD, curve.fd)
        sock.bind(curve.endpoint)
        return sock

    async def serve(self) -> None:
        """Serve every socket until ``shutdown`` or a signal (``ServeLoop``: a request per
        task; a client that goes away cancels its requests, nodes/daemon/clientwatch.py)."""
        self.loop = ServeLoop(self.socks, self._handle, stop=self.stopping)
        await self.loop.serve()

    async def _handle(self, frames: list[Any]) -> list[bytes] | None:
        """One request's frames -> its reply's (None: not a REQ envelope, nothing to
        answer to); bounded before any parsing, every refusal one line."""
        if len(frames) < 3:
            return None
        ident, body = frames[0].bytes, frames[-1].bytes
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
        return [ident, b"", json.dumps(reply).encode()]

    async def dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        if cmd == "hello":
            import os

            return {"ok": True, "node": self.node, "pid": os.getpid(),
                    "nids": [str(ni.nid) for ni in self.rt.engine.local_nis()]}
        if cmd in self.frontend.KINDS:  # lnetctl/lctl argv, typed DLC commands, lst
            return await self.frontend.handle(self.rt, req)
        if cmd in ("put", "get"):
            return await self._burst(cmd, req)
        if cmd == "flush":  # trace and recorder to their files (a reader is about to look)
            self.rt.flush_observations()
            return {"ok": True}
        if cmd == "shutdown":
            self.stopping.set()
            return {"ok": True}
        if cmd == "events":
            return read_events(req.get("offset", 0))
        if cmd == "ib_fault":  # an IB fault kind from the supervisor (faults/ibspec.py)
            return self.rt.o2ib.ib_fault(str(req["kind"]), str(req["nid"]),
                                         dict(req["params"]), bool(req["on"]))
        raise ValueError(f"unknown cmd '{cmd}'")

    async def _burst(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        """A burst of ``count`` PUTs (ACKed) or GETs (answered with a REPLY of ``size``
        bytes) to the lnet_selftest bulk portal, at most 64 in flight; each message succeeds
        when its final event is the ACK/REPLY with status 0 (spec §4.4). What a burst is,
        its counts and its totals, is ``nodes/burst.py``'s ``Burst`` (the simulator's node
        runs the same); how time moves while it runs is this loop's.

        Pipelined on callbacks (issue 13 item 2: "no per-message task/semaphore/future where
        a counter does"): each MD's final event counts the result and frees a slot; one
        ``call_soon`` per loop iteration refills every free slot, so the next messages start
        after the batch that completed the last ones (as a woken worker would), and one
        future ends the burst. A runtime whose ``wait_final`` runs the clock itself (the
        simulator's, unpaced) takes the messages off a counter with 64 workers instead."""
        parsed = burst_args(req)
        if isinstance(parsed, str):
            return {"ok": False, "error": parsed}
        rt: Any = self.rt  # (tests hand the verb the simulator's runtime)
        burst = Burst(rt.engine, op, *parsed)
        if not isinstance(rt, NodeRuntime):
            return await self._run_burst(burst, self._burst_workers(burst))
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        refilling = [False]  # a refill scheduled

        def on_event(ev: MDEvent) -> None:
            if not burst.final(ev):
                return
            if burst.started < burst.count:
                if not refilling[0]:
                    refilling[0] = True
                    loop.call_soon(refill)
            elif burst.inflight == 0 and not done.done():
                done.set_result(None)

        def refill() -> None:
            refilling[0] = False
            if done.done():
                return  # cut short
            rt.driver.hold()  # the refill's actions carried out as one batch
            try:
                try:
                    now = rt.now()  # (one instant for the whole refill)
                    while burst.room():
                        handle, actions = burst.start(now)
                        rt.driver.watch(handle, on_event)
                        rt.execute(actions)
                finally:
                    rt.driver.release()
            except Exception as e:  # ends the burst with it, as a failing worker did
                if not done.done():
                    done.set_exception(e)

        async def run() -> None:
            try:
                refill()
                await done
            finally:
                if not done.done():  # a burst cut short (shutdown)
                    done.cancel()

        return await self._run_burst(burst, run())

    async def _burst_workers(self, burst: Burst) -> None:
        """``_burst`` through ``wait_final``: 64 workers take messages off the burst."""
        async def worker() -> None:
            while burst.started < burst.count:
                # wait_final calls ``start`` at once: the message is counted before the wait
                start = functools.partial(burst.start, self.rt.now())
                burst.final((await self.rt.wait_final(start))[-1])

        await asyncio.gather(*(worker() for _ in range(min(MAX_INFLIGHT, burst.count))))

    async def _run_burst(self, burst: Burst, run: Coroutine[Any, Any, None]) -> dict[str, Any]:
        """The burst's workload events around ``run`` (docs/events.md §1.6), its reply."""
        self._workload("traffic_start", op=burst.op, dst=str(burst.dst), count=burst.count,
                       size=burst.size)
        try:
            if burst.count > 0:
                await run
            else:
                run.close()
        except BaseException as e:  # a burst cut short (shutdown) ends too, with why
            self._workload("traffic_end", **burst.end(burst.started), error=repr(e))
            raise
        self._workload("traffic_end", **burst.end())
        return burst.reply()

    def _workload(self, kind: str, **fields: Any) -> None:
        """A workload event (docs/events.md §1.6) in the testbed event log."""
        if self.events is not None:
            self.events.write(kind, fields)

    async def close(self) -> None:
        if self.auth is not None:
            self.auth.stop()
        for sock in self.socks:
            sock.close(0)
        self.ctx.term()
