"""SockLND over real loopback TCP (127.0.0.x, a free port per test; no root needed).

One test per row of the failure -> (rc, hstatus) table in ``nodes/lnd/socklnd.py`` (spec §3.7,
seed 003 hlth-lnd-*): every send ends in exactly one completion with the status ksocklnd
(or, for local vs network timeouts, seed 003) gives.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nodes.lnd import wire
from nodes.lnd.framing import HelloReceived, KsockConnection
from nodes.lnd.socklnd import RxMsg, SockLND
from nodes.lnet.hdr import LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

IP_A, IP_B = "127.0.0.2", "127.0.0.3"
NID_A, NID_B = NID.parse(f"{IP_A}@tcp"), NID.parse(f"{IP_B}@tcp")


def _port_block() -> range:
    """This xdist worker's own ports, below the kernel's ephemeral range: a port from
    ``bind(0)`` is an ephemeral one, which another test's outgoing connection (from the same
    127.0.0.x) or ``bind(0)`` could take between our check and our bind (CI: EADDRINUSE on
    127.0.0.3). Tests of one worker run one after another, so a block per worker is enough."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    n = int(worker) if worker.isdigit() else 0
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    size = 500
    low = 10_000 + (n % 40) * size
    if low + size > ephemeral_low:  # (an unusual range: the old way, a small race)
        return range(0, 0)
    return range(low, low + size)


_PORTS = random.SystemRandom()


def free_port() -> int:
    """A port nothing on this host has bound or connected from right now (the acceptor
    cannot bind port 0), from this worker's block (``_port_block``)."""
    block = _port_block()
    for _ in range(4 * len(block)):
        port = _PORTS.choice(block)
        with socket.socket() as s:
            try:  # the wildcard address, no SO_REUSEADDR: refused while any socket has it
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    lnd: SockLND
    rx: list[RxMsg] = field(default_factory=list)
    done: dict[int, list[tuple[int, HStatus]]] = field(default_factory=dict)
    conns: list[tuple[str, NID, NID, str]] = field(default_factory=list)
    notes: list[tuple[NID, NID, bool, bool]] = field(default_factory=list)


def make_node(port: int, timeout: float = 50.0, inc: int = 1, typed: bool = False) -> Node:
    """A SockLND on loopback; ``typed`` gives ksocklnd's typed connections (the daemon's
    default), untyped gives one SOCKLND_CONN_ANY connection per peer NI."""
    box: list[Node] = []

    def on_tx_done(tx: int, rc: int, hs: HStatus) -> None:
        box[0].done.setdefault(tx, []).append((rc, hs))

    lnd = SockLND(on_rx=lambda m: box[0].rx.append(m), on_tx_done=on_tx_done,
                  on_conn=lambda *a: box[0].conns.append(a),
                  on_notify=lambda *a: box[0].notes.append(a), incarnation=inc,
                  timeout=timeout, port=port, typed_conns=typed)
    box.append(Node(lnd))
    return box[0]


def put(src: NID, dst: NID, payload: bytes) -> LNetHdr:
    return LNetHdr(dest_nid=dst, src_nid=src, dest_pid=12345, src_pid=12345, type=MsgType.PUT,
                   payload_length=len(payload), ptl_index=4, match_bits=7)


async def wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 60))  # type: ignore[arg-type]


def test_puts_both_ways_fifo_and_exactly_once() -> None:
    async def main() -> None:
        port = free_port()
        a, b = make_node(port, inc=1), make_node(port, inc=2)
        await a.lnd.startup_ni(NID_A, IP_A)
        await b.lnd.startup_ni(NID_B, IP_B)
        n = 50
        for i in range(n):  # both sides connect at once: race resolution must cope
            pa, pb = f"a{i}".encode() * (i + 1), f"b{i}".encode() * 3000
            a.lnd.send(i, NID_A, NID_B, put(NID_A, NID_B, pa), pa)
            b.lnd.send(i, NID_B, NID_A, put(NID_B, NID_A, pb), pb)
        await wait_for(lambda: len(a.rx) == n and len(b.rx) == n
                       and len(a.done) == n and len(b.done) == n)
        assert [m.payload for m in b.rx] == [f"a{i}".encode() * (i + 1) for i in range(n)]
        assert [m.payload for m in a.rx] == [f"b{i}".encode() * 3000 for i in range(n)]
        assert all(m.peer_nid == NID_A and m.ni == NID_B and m.peer_ip == IP_A for m in b.rx)
        assert all(v == [(0, HStatus.OK)] for x in (a, b) for v in x.done.values())
        await asyncio.sleep(0.2)
        assert all(len(v) == 1 for x in (a, b) for v in x.done.values())
        assert sum(1 for c in a.conns if c[0] == "up") - sum(
            1 for c in a.conns if c[0] == "down") == 1
        await a.lnd.close()
        await b.lnd.close()
    run(main)


def test_connect_refused_is_remote_dropped() -> None:
    async def main() -> None:
        a = make_node(free_port())
        await a.lnd.startup_ni(NID_A, IP_A)
        dst = NID.parse("127.0.0.4@tcp")
        a.lnd.send(1, NID_A, dst, put(NID_A, dst, b"x"), b"x")
        a.lnd.send(2, NID_A, dst, put(NID_A, dst, b"y"), b"y")
        await wait_for(lambda: len(a.done) == 2)
        assert a.done == {1: [(-errno.ECONNREFUSED, HStatus.REMOTE_DROPPED)],
                          2: [(-errno.ECONNREFUSED, HStatus.REMOTE_DROPPED)]}
        await a.lnd.close()
    run(main)


async def fake_peer(port: int, behaviour: str, got: list[bytes]) -> asyncio.Server:
    """A hand-driven peer on IP_B: handshakes correctly, then misbehaves."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = KsockConnection(active=False)
        hello = None
        while hello is None:
            data = await r.read(4096)
            if not data:
                return
            for ev in conn.receive_data(data):
                if isinstance(ev, HelloReceived):
                    hello = ev.hello
        if behaviour == "silent":  # never answers the hello
            await asyncio.sleep(3600)
        if behaviour == "wrongnid":  # answers as somebody else
            w.write(conn.send_hello(wire.KsockHello(NID.parse("127.0.0.9@tcp"),
                                                    hello.src_nid, 12345, 12345, 9,
                                                    hello.src_incarnation)))
            await w.drain()
            await asyncio.sleep(3600)
        w.write(conn.send_hello(wire.KsockHello(NID_B, hello.src_nid, 12345, 12345, 9,
                                                hello.src_incarnation)))
        await w.drain()
        if behaviour == "close":
            got.append(await r.read(100_000))
            w.transport.abort()  # RST with unread data
        elif behaviour == "eof":  # reads the first frame, then a clean close (FIN)
            got.append(await r.read(100_000))
            w.close()
            await asyncio.sleep(3600)
        elif behaviour == "garbage":
            w.write(b"\xde\xad\xbe\xef" * 32)
            await w.drain()
            await asyncio.sleep(3600)
        elif behaviour == "stall":  # never reads again
            await asyncio.sleep(3600)

    return await asyncio.start_server(handle, IP_B, port)


def test_clean_eof_does_not_report_peer_ni_dead_lu20023() -> None:
    """LU-20023, socklnd_cb.c ``ksocknal_process_receive``: a clean EOF closes the connection
    with error 0, so ``ksnp_error`` stays 0 and ``ksocknal_terminate_conn`` does not call
    ``ksocknal_peer_failed``: LNet hears no ``lnet_notify`` of the peer NI's death (a peer
    that dropped that NID and pushed must lose health through failed sends, not be marked
    down). An error (here a protocol error) on the last connection does report it."""
    async def main() -> None:
        port = free_port()
        got: list[bytes] = []
        srv = await fake_peer(port, "eof", got)
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, b"x"), b"x")
        await wait_for(lambda: 1 in a.done and any(c[0] == "down" for c in a.conns))
        assert a.done[1] == [(0, HStatus.OK)]
        assert a.conns[-1][3] == "peer closed the connection", a.conns
        await asyncio.sleep(0.1)
        assert not [n for n in a.notes if n[1] == NID_B and n[2] is False], a.notes
        srv.close()
        await a.lnd.close()
        port = free_port()
        srv = await fake_peer(port, "garbage", got)  # an error on the last conn reports
        b = make_node(port)
        await b.lnd.startup_ni(NID_A, IP_A)
        b.lnd.send(2, NID_A, NID_B, put(NID_A, NID_B, b"y" * 4096), b"y" * 4096)
        await wait_for(lambda: [n for n in b.notes if n[1] == NID_B and n[2] is False])
        srv.close()
        await b.lnd.close()
    run(main)


def test_peer_closes_mid_stream_fails_pending_with_eio_local_error() -> None:
    async def main() -> None:
        port = free_port()
        got: list[bytes] = []
        srv = await fake_peer(port, "close", got)
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        big = b"z" * (1 << 20)
        for i in range(40):
            a.lnd.send(i, NID_A, NID_B, put(NID_A, NID_B, big), big)
        await wait_for(lambda: len(a.done) == 40)
        results = [v[0] for v in a.done.values()]
        assert all(len(v) == 1 for v in a.done.values())
        failed = [r for r in results if r != (0, HStatus.OK)]
        assert failed and set(failed) == {(-errno.EIO, HStatus.LOCAL_ERROR)}
        assert [c[0] for c in a.conns] == ["up", "down"]
        srv.close()
        await a.lnd.close()
    run(main)


def test_garbage_peer_is_disconnected_and_lnd_keeps_serving() -> None:
    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "garbage", [])
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, b"p"), b"p")
        await wait_for(lambda: [c[0] for c in a.conns] == ["up", "down"])
        assert "protocol error" in a.conns[1][3]
        srv.close()
        # a raw client sending garbage straight at A's acceptor is refused too
        _r, w = await asyncio.open_connection(IP_A, port)
        w.write(b"GET / HTTP/1.0\r\n\r\n")
        assert await asyncio.wait_for(_r.read(), 5) == b""
        w.close()
        # ...and a real peer on another address still gets through
        c_ip = "127.0.0.5"
        c_nid = NID.parse(f"{c_ip}@tcp")
        c = make_node(port)
        await c.lnd.startup_ni(c_nid, c_ip)
        c.lnd.send(7, c_nid, NID_A, put(c_nid, NID_A, b"ok"), b"ok")
        await wait_for(lambda: [m.payload for m in a.rx] == [b"ok"] and 7 in c.done)
        assert c.done[7] == [(0, HStatus.OK)]
        await a.lnd.close()
        await c.lnd.close()
    run(main)


def test_wrong_nid_in_connreq_is_refused() -> None:
    async def main() -> None:
        port = free_port()
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        r, w = await asyncio.open_connection(IP_A, port)
        hello = wire.KsockHello(NID_B, NID_B, 12345, 12345, 1, 0)
        w.write(wire.pack_connreq(NID_B) + wire.pack_hello(hello))
        assert await asyncio.wait_for(r.read(), 5) == b""
        w.close()
        await a.lnd.close()
    run(main)


def test_send_queue_stall_posted_network_timeout_queued_local_timeout() -> None:
    """ksocknal_find_timed_out_conn + seed 003 hlth-lnd-network-timeout/local-timeout: the
    posted tx is a network timeout, the txs behind it (never posted) are local timeouts."""
    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "stall", [])
        a = make_node(port, timeout=1.0)
        await a.lnd.startup_ni(NID_A, IP_A)
        big = b"s" * (1 << 20)
        for i in range(40):
            a.lnd.send(i, NID_A, NID_B, put(NID_A, NID_B, big), big)
        await wait_for(lambda: len(a.done) == 40, timeout=20)
        failed = [v[0] for v in a.done.values() if v[0] != (0, HStatus.OK)]
        assert failed.count((-errno.ETIMEDOUT, HStatus.NETWORK_TIMEOUT)) == 1, failed
        assert set(failed) == {(-errno.ETIMEDOUT, HStatus.NETWORK_TIMEOUT),
                               (-errno.ETIMEDOUT, HStatus.LOCAL_TIMEOUT)}, failed
        assert all(len(v) == 1 for v in a.done.values())
        assert a.conns[-1][0] == "down" and "timeout" in a.conns[-1][3]
        srv.close()
        await a.lnd.close()
    run(main)


def test_connect_timeout_is_local_timeout_then_shutdown_aborts() -> None:
    """ksocknal_connect's deadline: the txs were never posted -> LOCAL_TIMEOUT (seed 003)."""
    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "silent", [])
        a = make_node(port, timeout=0.5)
        await a.lnd.startup_ni(NID_A, IP_A)
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, b"t"), b"t")
        await wait_for(lambda: 1 in a.done, timeout=5)
        assert a.done[1] == [(-errno.ETIMEDOUT, HStatus.LOCAL_TIMEOUT)]
        a.lnd.set_timeout(30)
        a.lnd.send(2, NID_A, NID_B, put(NID_A, NID_B, b"u"), b"u")
        await asyncio.sleep(0.2)
        await a.lnd.shutdown_ni(NID_A)
        assert a.done[2] == [(-errno.ECONNABORTED, HStatus.LOCAL_ABORTED)]
        a.lnd.send(3, NID_A, NID_B, put(NID_A, NID_B, b"v"), b"v")
        await wait_for(lambda: 3 in a.done)
        assert a.done[3] == [(-errno.ENETDOWN, HStatus.LOCAL_ABORTED)]
        srv.close()
        await a.lnd.close()
    run(main)


def test_startup_ni_bind_failure_raises() -> None:
    async def main() -> None:
        a = make_node(free_port())
        try:
            await a.lnd.startup_ni(NID_A, "192.0.2.123")  # not a local address
        except OSError as exc:
            assert exc.errno == errno.EADDRNOTAVAIL
        else:
            raise AssertionError("bind should fail")
        await a.lnd.close()
    run(main)


def test_txlist_hstatus_maps_errnos_like_ksocknal_txlist_done() -> None:
    from nodes.lnd.socklnd import txlist_hstatus

    for e in (errno.ENETDOWN, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ECONNREFUSED,
              errno.ECONNRESET):
        assert txlist_hstatus(-e) == HStatus.REMOTE_DROPPED
    assert txlist_hstatus(-errno.ETIMEDOUT) == HStatus.NETWORK_TIMEOUT
    for e in (errno.EPROTO, errno.EADDRNOTAVAIL, errno.ECONNABORTED, errno.EIO):
        assert txlist_hstatus(-e) == HStatus.LOCAL_ERROR


def test_bad_hello_fails_connect_with_local_error() -> None:
    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "wrongnid", [])
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, b"h"), b"h")
        await wait_for(lambda: 1 in a.done)
        assert a.done[1] == [(-errno.EPROTO, HStatus.LOCAL_ERROR)]
        srv.close()
        await a.lnd.close()
    run(main)


def test_tx_waiting_for_connection_is_flushed_as_local_timeout() -> None:
    """ksocknal_flush_stale_txs with a per-NI timeout: the connect itself is still in time."""
    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "silent", [])
        a = make_node(port, timeout=30)
        await a.lnd.startup_ni(NID_A, IP_A, timeout=0.4)
        assert a.lnd.timeout_of(NID_A) == 0.4
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, b"q"), b"q")  # deadline now + 0.4
        a.lnd.set_timeout(30, NID_A)  # ...but the connect (not started yet) gets 30 s
        await wait_for(lambda: 1 in a.done, timeout=5)
        assert a.done[1] == [(-errno.ETIMEDOUT, HStatus.LOCAL_TIMEOUT)]
        assert a.lnd._peers[(NID_A, NID_B)].connector is not None  # still connecting
        srv.close()
        await a.lnd.close()
    run(main)


def test_socket_etimedout_fails_posted_tx_with_remote_timeout() -> None:
    """ksocknal_process_transmit: a write that fails with ETIMEDOUT is REMOTE_TIMEOUT; the
    txs behind it go down with the connection (-EIO, LOCAL_ERROR)."""
    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "stall", [])
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        big = b"e" * (1 << 20)
        for i in range(20):
            a.lnd.send(i, NID_A, NID_B, put(NID_A, NID_B, big), big)
        p = a.lnd._peers[(NID_A, NID_B)]
        await wait_for(lambda: p.conn is not None and p.conn.inflight is not None)
        assert p.conn is not None
        a.lnd._life.failed(p.conn, "connection lost: timed out", errno.ETIMEDOUT)
        await wait_for(lambda: len(a.done) == 20)
        failed = [v[0] for v in a.done.values() if v[0] != (0, HStatus.OK)]
        assert failed.count((-errno.EIO, HStatus.REMOTE_TIMEOUT)) == 1, failed
        assert set(failed) == {(-errno.EIO, HStatus.REMOTE_TIMEOUT),
                               (-errno.EIO, HStatus.LOCAL_ERROR)}, failed
        srv.close()
        await a.lnd.close()
    run(main)


def test_link_down_closes_conns_and_drops_txs_for_resend() -> None:
    """Carrier loss (hlt-005/010, snd-085): the NI's conns close, posted and queued txs end
    with -ENETDOWN / REMOTE_DROPPED (ksocknal_del_peer), later sends too, until link_up."""
    import ipaddress

    async def main() -> None:
        port = free_port()
        srv = await fake_peer(port, "stall", [])
        a = make_node(port)
        await a.lnd.startup_ni(NID_A, IP_A)
        big = b"l" * (1 << 20)
        for i in range(20):
            a.lnd.send(i, NID_A, NID_B, put(NID_A, NID_B, big), big)
        p = a.lnd._peers[(NID_A, NID_B)]
        await wait_for(lambda: p.conn is not None and p.conn.inflight is not None)
        assert a.lnd.link_down(NID_A) == 1
        await wait_for(lambda: len(a.done) == 20)
        failed = [v[0] for v in a.done.values() if v[0] != (0, HStatus.OK)]
        assert failed and set(failed) == {(-errno.ENETDOWN, HStatus.REMOTE_DROPPED)}
        assert a.conns[-1][0] == "down" and a.conns[-1][3] == "link down"
        # closed as ksocknal_del_peer closes (error 0): no ksocknal_peer_failed, no
        # lnet_notify of the peer NI's death (its status is the peer's push to tell)
        assert not [n for n in a.notes if n[1] == NID_B and n[2] is False], a.notes
        a.lnd.send(99, NID_A, NID_B, put(NID_A, NID_B, b"x"), b"x")
        await wait_for(lambda: 99 in a.done)
        assert a.done[99] == [(-errno.ENETDOWN, HStatus.REMOTE_DROPPED)]
        srv.close()
        # a conn of another NI whose peer is on the downed interface's subnet goes too
        b = make_node(port, inc=2)
        await b.lnd.startup_ni(NID_B, IP_B)
        c_ip = "127.0.0.5"
        c_nid = NID.parse(f"{c_ip}@tcp")
        await a.lnd.startup_ni(c_nid, c_ip)
        a.lnd.link_up(NID_A)
        a.lnd.send(100, c_nid, NID_B, put(c_nid, NID_B, b"y"), b"y")
        a.lnd.send(101, NID_A, NID_B, put(NID_A, NID_B, b"z"), b"z")
        await wait_for(lambda: len(b.rx) == 2)
        assert a.done[100] == a.done[101] == [(0, HStatus.OK)]
        assert a.lnd.link_down(NID_A, ipaddress.ip_network("127.0.0.3/32")) == 2
        assert sum(1 for c in a.conns if c[0] == "down" and c[3] == "link down") == 3
        await a.lnd.close()
        await b.lnd.close()
    run(main)


def test_bad_payload_length_is_local_error() -> None:
    async def main() -> None:
        a = make_node(free_port())
        await a.lnd.startup_ni(NID_A, IP_A)
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, b"four"), b"five!")
        await wait_for(lambda: 1 in a.done)
        assert a.done[1] == [(-errno.EINVAL, HStatus.LOCAL_ERROR)]
        await a.lnd.close()
    run(main)


def test_linkwatch_reports_carrier_changes_once() -> None:
    """The daemon's link watcher (hlt-005): SIOCGIFFLAGS in this namespace; an interface that
    is missing counts as carrier down; each change is reported once."""
    from nodes.daemon.linkwatch import LinkWatch, carrier_up, interface_subnet

    assert carrier_up("lo") and not carrier_up("nosuchif0") and not carrier_up("x" * 20)
    assert str(interface_subnet("lo")) == "127.0.0.0/8"
    ifaces = {NID_A: "lo", NID_B: "nosuchif0"}
    seen: list[tuple[NID, bool]] = []
    watch = LinkWatch(nis=lambda: dict(ifaces), on_change=lambda n, up: seen.append((n, up)))
    assert watch.poll() == [(NID_B, False)]
    assert watch.poll() == []
    ifaces[NID_B] = "lo"
    assert watch.poll() == [(NID_B, True)]
    assert seen == [(NID_B, False), (NID_B, True)]


def test_the_loop_clock_is_the_loops_own_time_read_directly() -> None:
    """``connio.loop_clock``: an asyncio loop's ``time`` is ``time.monotonic()`` behind a
    Python method, so the socklnd and the runtime read ``time.monotonic`` itself (same
    clock, a C call); a loop whose ``time`` is anything else (another loop, a patched one)
    keeps its own."""
    import time

    from nodes.lnd.connio import loop_clock

    loop = asyncio.new_event_loop()
    try:
        clock = loop_clock(loop)
        assert clock is time.monotonic
        assert abs(clock() - loop.time()) < 1.0
        loop.time = lambda: 42.0  # type: ignore[method-assign]
        assert loop_clock(loop)() == 42.0
    finally:
        loop.close()


