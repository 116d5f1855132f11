"""``testbed ui``'s web server: the page, its files, a snapshot, and server-sent events.

Theory of operation: one aiohttp application around one ``Feed``. Background tasks poll the
feed in worker threads (its event log every 50 ms, its recorder files every ``period``
seconds) and put each delta on every connected page's
queue; ``GET /api/stream`` sends a page the snapshot first (with the ``seq`` of the last delta
it includes, so the page drops deltas it already has) and then the deltas as server-sent
events (``EventSource`` reconnects by itself, and a page too slow to keep up is dropped and
gets a fresh snapshot when it reconnects). ``GET /api/node/NODE`` is the node's ``lnetctl net
show -v`` and ``peer show``, ``GET /api/detail/NODE`` its peer NIs and routes as the feed has
them (the page asks every second while the node is selected); ``POST /api/clock`` advances
a sim testbed's virtual clock.

Who may ask: bound to loopback (the default) every local user may, as with the testbed's own
sockets' owner, but only under a loopback host name (a page of another site that renamed
itself to 127.0.0.1 by DNS cannot read it: the ``Host`` check), and a POST must come from the
page itself (``Origin``). Bound to any other address a token is required: given in the URL
once (``?token=``), then kept in a strict same-site cookie, compared in constant time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from testbed.base import TestbedError
from testbed.ui.feed import Feed

log = logging.getLogger("testbed.ui")
STATIC = Path(str(resources.files("testbed.ui") / "static"))
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
COOKIE = "testbed_ui_token"
#: deltas a page may fall behind by before it is dropped (it reconnects to a snapshot)
QUEUE_LIMIT = 200
#: how often the event log is read (the recorder files: ``--period``)
EVENT_PERIOD = 0.05
#: a comment line this often keeps proxies and the browser from closing an idle stream
KEEPALIVE = 15.0
#: longest ``clock advance`` the page may ask for at once, virtual seconds
MAX_ADVANCE = 3600.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FEED: web.AppKey[Feed] = web.AppKey("feed", Feed)


class Hub:
    """The connected pages' queues and the poll task."""

    def __init__(self, feed: Feed, period: float) -> None:
        self.feed = feed
        self.period = period
        self.queues: set[asyncio.Queue[dict[str, Any]]] = set()
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ui-poll")
        #: deltas are sent in ``seq`` order: the two polls may finish in either order
        self._next = feed.model.seq + 1
        self._held: dict[int, dict[str, Any]] = {}

    async def run(self) -> None:
        """The event log every ``EVENT_PERIOD`` (a read that finds nothing new is one
        ``fstat``), the recorder files and the clock every ``period``, side by side: a slow
        flush of a busy sim never holds back a link or fault event."""
        await asyncio.gather(self._poll(self.feed.poll_events, min(EVENT_PERIOD, self.period)),
                             self._poll(self.feed.poll_records, self.period))

    async def _poll(self, step: Callable[[], dict[str, Any] | None], period: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                delta = await loop.run_in_executor(self.pool, step)
            except (TestbedError, OSError) as exc:  # the testbed went down: say so
                delta = {"error": str(exc)}
            if delta:
                self.push(delta)
            await asyncio.sleep(period)

    def push(self, delta: dict[str, Any]) -> None:
        if "seq" not in delta:  # an error
            self._send(delta)
            return
        self._held[delta["seq"]] = delta
        while self._next in self._held:
            self._send(self._held.pop(self._next))
            self._next += 1

    def _send(self, delta: dict[str, Any]) -> None:
        delta["sent"] = time.time()  # (the page measures its lag from it)
        for q in list(self.queues):
            try:
                q.put_nowait(delta)
            except asyncio.QueueFull:  # too slow: it starts again from a snapshot
                self.queues.discard(q)
                while not q.empty():
                    q.get_nowait()
                q.put_nowait({"drop": True})


HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)


def make_app(feed: Feed, *, token: str | None = None, loopback: bool = True,
             period: float = 0.25) -> web.Application:
    app = web.Application(middlewares=[_guard(token, loopback)])
    app[FEED] = feed
    app[HUB] = hub = Hub(feed, period)
    app.router.add_get("/", _index)
    app.router.add_get("/api/snapshot", _snapshot)
    app.router.add_get("/api/stream", _stream)
    app.router.add_get("/api/node/{node}", _node)
    app.router.add_get("/api/detail/{node}", _detail)
    app.router.add_post("/api/clock", _clock)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)

    async def start(app: web.Application) -> Any:
        task = asyncio.create_task(hub.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        hub.pool.shutdown(wait=False, cancel_futures=True)

    app.cleanup_ctx.append(start)
    return app


def _guard(token: str | None, loopback: bool) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") \
            else request.host
        if loopback and host not in LOOPBACK_HOSTS:
            raise web.HTTPForbidden(text=f"host {host!r} is not a loopback name\n")
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and origin != f"{request.scheme}://{request.host}":
                raise web.HTTPForbidden(text="cross-origin request refused\n")
        if token is not None:
            given = request.query.get("token") or request.cookies.get(COOKIE) or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                raise web.HTTPUnauthorized(text="a token is required: open the URL "
                                           "`testbed ui` printed\n")
        response = await handler(request)
        if token is not None and request.query.get("token"):
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return response
    return guard


async def _index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def _snapshot(request: web.Request) -> web.StreamResponse:
    feed = request.app[FEED]
    snap = await asyncio.get_running_loop().run_in_executor(None, feed.snapshot)
    return web.json_response(snap)


async def _stream(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-store"})
    await resp.prepare(request)
    q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE_LIMIT)
    hub.queues.add(q)
    try:
        snap = await asyncio.get_running_loop().run_in_executor(None, hub.feed.snapshot)
        await resp.write(_sse("snapshot", snap))
        while True:
            try:
                item = await asyncio.wait_for(q.get(), KEEPALIVE)
            except TimeoutError:
                await resp.write(b": keepalive\n\n")
                continue
            if item.get("drop"):
                break
            await resp.write(_sse("delta", item))
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        hub.queues.discard(q)
    return resp


async def _node(request: web.Request) -> web.StreamResponse:
    feed = request.app[FEED]
    name = request.match_info["node"]
    try:
        out = await asyncio.get_running_loop().run_in_executor(None, feed.node_yaml, name)
    except TestbedError as exc:
        return web.json_response({"error": str(exc)}, status=404)
    return web.json_response({"node": name, **out})


async def _detail(request: web.Request) -> web.StreamResponse:
    try:
        return web.json_response(request.app[FEED].detail(request.match_info["node"]))
    except TestbedError as exc:
        return web.json_response({"error": str(exc)}, status=404)


async def _clock(request: web.Request) -> web.StreamResponse:
    feed = request.app[FEED]
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"error": "the body must be JSON"}, status=400)
    op = body.get("op", "show") if isinstance(body, dict) else None
    seconds = body.get("seconds", 0) if isinstance(body, dict) else None
    if op not in ("show", "advance") or isinstance(seconds, bool) \
            or not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_ADVANCE:
        return web.json_response({"error": "clock: op show|advance, seconds 0.."
                                  f"{MAX_ADVANCE:g}"}, status=400)
    try:
        out = await asyncio.get_running_loop().run_in_executor(
            None, feed.clock, op, float(seconds))
    except TestbedError as exc:
        return web.json_response({"error": str(exc)}, status=409)
    return web.json_response(out)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
