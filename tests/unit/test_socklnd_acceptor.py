"""One acceptor per local address, shared by its NIs (``lnet_acceptor``/``lnet_accept``).

Real LNet runs one acceptor for every NI; the connreq's NID picks the NI, and a connreq for a
NID no NI has is refused ("No matching NI", -EPERM, closed without a reply). Two nets on one
interface (tcp and tcp7 on the same IP) must therefore both accept connections, and removing
one must leave the other's acceptor open (cfg-020, cfg-060). Loopback TCP, a free port per test.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket

import pytest
from test_socklnd import free_port, make_node, put, run, wait_for

from nodes.lnd import wire
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

IP_A, IP_B, IP_C = "127.0.0.2", "127.0.0.3", "127.0.0.5"
A_TCP, A_TCP7 = NID.parse(f"{IP_A}@tcp"), NID.parse(f"{IP_A}@tcp7")
B_TCP, B_TCP7 = NID.parse(f"{IP_B}@tcp"), NID.parse(f"{IP_B}@tcp7")


async def _refused(ip: str, port: int, nid: NID) -> bytes:
    """A raw connreq + hello for ``nid``: what the acceptor answers before closing."""
    r, w = await asyncio.open_connection(ip, port)
    hello = wire.KsockHello(B_TCP, nid, 12345, 12345, 1, 0)
    w.write(wire.pack_connreq(nid) + wire.pack_hello(hello))
    try:
        return await asyncio.wait_for(r.read(), 5)
    finally:
        w.close()


@pytest.mark.requirement("cfg-020")
def test_two_nets_on_one_address_share_the_acceptor() -> None:
    """tcp and tcp7 on one IP: both start (no EADDRINUSE), each incoming connection lands on
    the NI its connreq names, and the acceptor lives until the last NI on the address goes."""
    async def main() -> None:
        port = free_port()
        a, b = make_node(port, inc=1), make_node(port, inc=2)
        for nid in (A_TCP, A_TCP7):
            await a.lnd.startup_ni(nid, IP_A)
        for nid in (B_TCP, B_TCP7):
            await b.lnd.startup_ni(nid, IP_B)
        b.lnd.send(1, B_TCP, A_TCP, put(B_TCP, A_TCP, b"on tcp"), b"on tcp")
        b.lnd.send(2, B_TCP7, A_TCP7, put(B_TCP7, A_TCP7, b"on tcp7"), b"on tcp7")
        await wait_for(lambda: len(a.rx) == 2 and len(b.done) == 2)
        assert {(m.ni, m.peer_nid, m.payload) for m in a.rx} == {
            (A_TCP, B_TCP, b"on tcp"), (A_TCP7, B_TCP7, b"on tcp7")}
        assert b.done == {1: [(0, HStatus.OK)], 2: [(0, HStatus.OK)]}
        # passive side: each connection belongs to the NI its connreq named
        assert sorted((c[1], c[2]) for c in a.conns if c[0] == "up") == [
            (A_TCP, B_TCP), (A_TCP7, B_TCP7)]

        await a.lnd.shutdown_ni(A_TCP)
        # the acceptor stays for tcp7: a new peer connects to it...
        c_nid = NID.parse(f"{IP_C}@tcp7")
        c = make_node(port, inc=3)
        await c.lnd.startup_ni(c_nid, IP_C)
        c.lnd.send(3, c_nid, A_TCP7, put(c_nid, A_TCP7, b"still"), b"still")
        await wait_for(lambda: 3 in c.done and len(a.rx) == 3)  # done = in the kernel
        assert c.done[3] == [(0, HStatus.OK)]
        assert a.rx[-1].ni == A_TCP7 and a.rx[-1].payload == b"still"
        # ...while a connreq for the removed NI is refused without a reply
        assert await _refused(IP_A, port, A_TCP) == b""

        await a.lnd.shutdown_ni(A_TCP7)  # last NI on the address: the acceptor closes
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(IP_A, port)
        for n in (a, b, c):
            await n.lnd.close()
    run(main)


@pytest.mark.requirement("cfg-020")
def test_connreq_for_unknown_nid_is_refused_like_lnet_accept(
        caplog: pytest.LogCaptureFixture) -> None:
    """``lnet_accept``: a connreq for a NID no local NI has (right net wrong address, or a
    net we do not have) is refused with "No matching NI" and the socket closed, no hello."""
    async def main() -> None:
        port = free_port()
        a = make_node(port)
        await a.lnd.startup_ni(A_TCP, IP_A)
        for nid in (NID.parse("127.0.0.9@tcp"), A_TCP7):
            assert await _refused(IP_A, port, nid) == b""
        await a.lnd.close()
    with caplog.at_level(logging.ERROR, logger="lnet.socklnd"):
        run(main)
    refusals = [r.getMessage() for r in caplog.records if "No matching NI" in r.getMessage()]
    assert len(refusals) == 2, refusals
    assert f"for {A_TCP7}: No matching NI" in refusals[1]
    assert all(m.startswith("socklnd: Refusing connection from 127.0.0.") for m in refusals)


def test_second_ni_on_address_in_use_by_another_process_still_fails() -> None:
    """Sharing is within one LND: an address whose port another socket holds still fails the
    first NI's startup with EADDRINUSE (``lnet_acceptor_start``)."""
    async def main() -> None:
        port = free_port()
        with socket.socket() as hog:
            hog.bind((IP_A, port))
            hog.listen(1)
            a = make_node(port)
            with pytest.raises(OSError) as exc:
                await a.lnd.startup_ni(A_TCP, IP_A)
            assert exc.value.errno == errno.EADDRINUSE
            await a.lnd.close()
    run(main)


def test_listener_closed_while_a_connection_is_due_logs_nothing() -> None:
    """The last NI on an address goes in the same loop turn in which its listener has a
    connection ready (seen in CI: sanity-lnet 404's teardown logged asyncio's
    ``_sock_accept`` failing with EBADF on the closed listener). epoll returns fds in the
    order they became ready, so a socketpair written before the connect puts the callback
    that shuts the NI down ahead of the listener's own: the listener closes with its accept
    already due. Nothing may be accepted after it closed, and the loop logs no error."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        port = free_port()
        a = make_node(port, inc=1)
        await a.lnd.startup_ni(A_TCP, IP_A)
        await asyncio.sleep(0.05)  # the listener idle, waiting for a connection
        trigger, poke = socket.socketpair()
        shutdowns: list[asyncio.Task[None]] = []

        def shut_down() -> None:
            loop.remove_reader(trigger.fileno())
            trigger.recv(1)
            a.lnd._acceptor.remove(A_TCP, IP_A)  # the synchronous step of shutdown_ni
            shutdowns.append(loop.create_task(a.lnd.shutdown_ni(A_TCP)))

        loop.add_reader(trigger.fileno(), shut_down)
        poke.send(b"x")
        client = socket.create_connection((IP_A, port), timeout=5)  # backlog: ready at once
        try:
            await asyncio.sleep(0.2)
            await asyncio.gather(*shutdowns)
            assert shutdowns, "the trigger never ran"
            assert errors == []
            assert a.conns == []
            # the peer sees the listener gone: its queued connection is reset, not served
            client.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert client.recv(1) == b""
        finally:
            client.close()
            trigger.close()
            poke.close()
            await a.lnd.close()
    run(main)
