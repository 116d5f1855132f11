"""The bare asyncio request/response reference of the LND benchmarks (``lnd_bench.asyncio_ref``).

Theory of operation: the reference a careful asyncio program sets against LNet on the same
link, run as a script inside the two namespaces: ``ref-server IP PORT REQ RESP`` answers each
``REQ``-byte request with ``RESP`` bytes; ``ref-client IP PORT REQ RESP COUNT INFLIGHT`` keeps
``INFLIGHT`` requests outstanding on one TCP connection, in order, and prints the seconds
``COUNT`` of them took. Both ends receive into one reused buffer (``BufferedProtocol``, no
copy) and respect the transport's flow control, so the figure is what asyncio itself can do.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable


class _RefProto(asyncio.BufferedProtocol):
    """One end of the reference: receives fixed-size units into one reused buffer (no copy,
    nothing kept) and calls ``on_unit`` per whole unit; sends ``msg`` ``owed`` times,
    respecting the transport's flow control (``pause_writing``), as a careful asyncio
    program does."""

    def __init__(self, unit: int, msg: bytes, on_unit: Callable[[_RefProto], None]) -> None:
        self.unit, self.msg, self.on_unit, self.left = unit, msg, on_unit, unit
        self.buf = memoryview(bytearray(1 << 20))
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.owed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        while nbytes:
            take = min(nbytes, self.left)
            nbytes -= take
            self.left -= take
            if not self.left:
                self.left = self.unit
                self.on_unit(self)

    def send(self, n: int = 1) -> None:
        self.owed += n
        while self.owed and not self.paused and self.transport is not None:
            self.owed -= 1
            self.transport.write(self.msg)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.send(0)


async def _ref_serve(ip: str, port: int, req_bytes: int, resp_bytes: int) -> None:
    resp = bytes(resp_bytes)
    srv = await asyncio.get_running_loop().create_server(
        lambda: _RefProto(req_bytes, resp, lambda p: p.send()), ip, port)
    print("listening", flush=True)
    async with srv:
        await srv.serve_forever()


async def _ref_client(ip: str, port: int, req_bytes: int, resp_bytes: int, count: int,
                      inflight: int) -> float:
    """Seconds for ``count`` requests with ``inflight`` outstanding, in order on one stream."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    state = {"sent": 0, "got": 0}

    def on_resp(p: _RefProto) -> None:
        state["got"] += 1
        if state["got"] == count:
            done.set_result(None)
        elif state["sent"] < count:
            state["sent"] += 1
            p.send()

    proto = _RefProto(resp_bytes, bytes(req_bytes), on_resp)
    await loop.create_connection(lambda: proto, ip, port)
    t0 = time.perf_counter()
    state["sent"] = min(inflight, count)
    proto.send(state["sent"])
    await done
    elapsed = time.perf_counter() - t0
    assert proto.transport is not None
    proto.transport.close()
    return elapsed


def main(argv: list[str]) -> int:
    """Script entry: the reference server and client, run inside the namespaces."""
    if argv[:1] == ["ref-server"]:
        asyncio.run(_ref_serve(argv[1], *map(int, argv[2:5])))
        return 0
    if argv[:1] == ["ref-client"]:
        ip, port, req, resp, count, inflight = argv[1], *map(int, argv[2:7])
        print(asyncio.run(_ref_client(ip, port, req, resp, count, inflight)))
        return 0
    print("usage: asyncio_ref.py ref-server IP PORT REQ RESP | "
          "ref-client IP PORT REQ RESP COUNT INFLIGHT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
