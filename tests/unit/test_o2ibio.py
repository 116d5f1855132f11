"""The daemon's o2iblnd driver (nodes/o2ib/o2ibio.py) on real sockets over loopback: bytes
received in place (``BufferedProtocol`` into the cm_id's packet reader, an RDMA body into a
pooled buffer), a large body written apart from its head, a loop turn's writes joined per
stream, the LND's outputs of one read given to the node driver as one batch (issue 28,
benchmarks/o2ib.py). Two O2ibIO on 127.0.0.1 and 127.0.0.2, one free port."""

from __future__ import annotations

import asyncio
import socket

from o2ibpair import put_hdr

from nodes.lnet.nid import NID
from nodes.o2ib.o2ibio import O2ibIO

A, B = "127.0.0.1@o2ib", "127.0.0.2@o2ib"
BIG = bytes(range(256)) * 4096  # 1 MiB: PUT_REQ, PUT_ACK, RDMA WRITE + PUT_DONE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return int(s.getsockname()[1])


async def run_pair() -> tuple[list[tuple[NID, bytes, bool]], list[tuple[int, int]],
                              list[bool]]:
    port = free_port()
    rx: list[tuple[NID, bytes, bool]] = []
    done: list[tuple[int, int]] = []
    batches: list[bool] = []
    got = asyncio.Event()

    def on_rx(ni: NID, peer: NID, hdr: object, payload: bytes | memoryview) -> None:
        rx.append((peer, bytes(payload), isinstance(payload, memoryview)))
        if len(rx) == 3:
            got.set()

    a = O2ibIO(incarnation=1, on_rx=on_rx, on_tx_done=lambda t, rc, hs: done.append((t, rc)),
               on_notify=lambda *_: None, port=port)
    b = O2ibIO(incarnation=2, on_rx=on_rx, on_tx_done=lambda *_: None,
               on_notify=lambda *_: None, port=port, on_batch=batches.append)
    await a.startup_ni(NID.parse(A), "127.0.0.1")
    await b.startup_ni(NID.parse(B), "127.0.0.2")
    try:
        a.send(1, NID.parse(A), NID.parse(B), put_hdr(A, B, 8), b"8 bytes!")
        a.send(2, NID.parse(A), NID.parse(B), put_hdr(A, B, len(BIG)), memoryview(BIG))
        a.send(3, NID.parse(A), NID.parse(B), put_hdr(A, B, 5), b"after")
        await asyncio.wait_for(got.wait(), 20)
        for _ in range(200):  # the last SEND's ACK
            if len(done) == 3:
                break
            await asyncio.sleep(0.01)
    finally:
        await a.close()
        await b.close()
    return rx, done, batches


def test_o2ibio_loopback_immediate_and_rdma_put() -> None:
    rx, done, batches = asyncio.run(run_pair())
    # (the IMMEDIATE sent after the 1 MiB PUT may land first: the PUT waits for its PUT_ACK)
    assert sorted((str(p), len(d)) for p, d, _ in rx) == [(A, 5), (A, 8), (A, len(BIG))]
    (big,) = [r for r in rx if len(r[1]) == len(BIG)]
    assert big[1] == BIG and big[2]  # the 1 MiB payload is the sink's memory, not a copy
    assert sorted(done) == [(1, 0), (2, 0), (3, 0)]
    # each delivery came inside a batch (hold ... release) of B's node driver
    assert batches and batches.count(True) == batches.count(False)


async def run_two_nets_one_address() -> tuple[list[tuple[str, str]], list[tuple[int, int]]]:
    port = free_port()
    rx: list[tuple[str, str]] = []
    done: list[tuple[int, int]] = []

    def on_rx(ni: NID, peer: NID, hdr: object, payload: bytes | memoryview) -> None:
        rx.append((str(ni), str(peer)))

    a = O2ibIO(incarnation=1, on_rx=lambda *_: None,
               on_tx_done=lambda t, rc, hs: done.append((t, rc)), on_notify=lambda *_: None,
               port=port)
    b = O2ibIO(incarnation=2, on_rx=on_rx, on_tx_done=lambda *_: None,
               on_notify=lambda *_: None, port=port)
    a0, a1 = NID.parse(A), NID.parse("127.0.0.1@o2ib1")
    b0, b1 = NID.parse(B), NID.parse("127.0.0.2@o2ib1")
    for io, nis, ip in ((a, (a0, a1), "127.0.0.1"), (b, (b0, b1), "127.0.0.2")):
        for ni in nis:
            await io.startup_ni(ni, ip)  # the second NI on the address shares its listener

    async def put(tx: int, src: NID, dst: NID) -> None:
        a.send(tx, src, dst, put_hdr(str(src), str(dst), 2), b"hi")
        for _ in range(500):
            if (tx, 0) in done:
                return
            await asyncio.sleep(0.01)

    try:
        await put(1, a0, b0)
        await put(2, a1, b1)
        await b.shutdown_ni(b0)  # the listener stays for o2ib1's NI
        await a.shutdown_ni(a1)  # (a's o2ib1 connection goes: b1 must accept a new one)
        await a.startup_ni(a1, "127.0.0.1")
        await put(3, a1, b1)
    finally:
        await a.close()
        await b.close()
    return rx, done


def test_o2ibio_two_nets_on_one_address_share_port_987() -> None:
    """kiblnd_dev_start listens once per IB device; kiblnd_passive_connect picks the NI by
    the CONNREQ's destination NID: o2ib and o2ib1 on one address both take connections
    (one bind of port 987), and the listener outlives one of its NIs."""
    rx, done = asyncio.run(run_two_nets_one_address())
    assert sorted(done) == [(1, 0), (2, 0), (3, 0)]
    assert rx == [(B, A), ("127.0.0.2@o2ib1", "127.0.0.1@o2ib1"),
                  ("127.0.0.2@o2ib1", "127.0.0.1@o2ib1")]
