"""The one control-server loop (``nodes/daemon/ctlloop.py``, issue 29 item 3): several ROUTER
sockets served by one ``ServeLoop`` (the node daemon's ipc and CURVE tcp sockets), each
reply on the socket its request came on, nothing sent for a request the owner does not
answer, the tick run between waits, and ``stop`` ending it with the running requests
cancelled."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from nodes.daemon.ctlloop import ServeLoop, router


def test_one_loop_serves_every_socket_and_stops(tmp_path: Path) -> None:
    async def main() -> tuple[list[bytes], int, bool]:
        ctx = zmq.asyncio.Context()
        socks = [router(ctx, linger=0, max_frame=1 << 16) for _ in range(2)]
        stop, ticks, slow = asyncio.Event(), [0], asyncio.Event()

        async def reply(frames: list[Any]) -> list[bytes] | None:
            body = frames[-1].bytes
            if body == b"quiet":
                return None
            if body == b"slow":
                await slow.wait()  # (never set: cancelled by the stop)
            return [*(f.bytes for f in frames[:-1]), b"re:" + body]

        def tick() -> float:
            ticks[0] += 1
            return 0.05

        loop = ServeLoop(socks, reply, stop=stop, tick=tick)
        for i, s in enumerate(socks):
            s.bind(f"ipc://{tmp_path}/s{i}.sock")
        serving = asyncio.ensure_future(loop.serve())
        got = []
        for i, body in ((0, b"a"), (1, b"b")):
            req = ctx.socket(zmq.REQ)
            req.connect(f"ipc://{tmp_path}/s{i}.sock")
            await req.send(body)
            got.append(await asyncio.wait_for(req.recv(), 5))
            req.close(0)
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(f"ipc://{tmp_path}/s0.sock")
        await dealer.send_multipart([b"", b"quiet"])
        await dealer.send_multipart([b"", b"slow"])
        await asyncio.sleep(0.3)
        unanswered = not await dealer.poll(100)
        running = len(loop.tasks)
        stop.set()
        await asyncio.wait_for(serving, 5)
        dealer.close(0)
        for s in socks:
            s.close(0)
        ctx.term()
        return got, ticks[0], unanswered and running == 1 and not loop.tasks

    got, ticks, quiet = asyncio.run(main())
    assert got == [b"re:a", b"re:b"]
    assert ticks >= 3  # the tick between waits (0.05 s each, 0.3 s idle)
    assert quiet  # no reply to "quiet", "slow" running until the stop cancelled it
