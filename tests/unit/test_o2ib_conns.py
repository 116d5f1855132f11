"""o2iblnd's ``conns_per_peer`` (issue 28): a brand new peer gets that many connections at
once (``kiblnd_launch_tx``: ``ibp_connecting = conns_per_peer``, one ``kiblnd_connect_peer``
each), and sends go round robin over them (``kiblnd_get_conn_locked``, ibp_next_conn cleared
when that connection closes: ``kiblnd_close_conn_locked``)."""

from __future__ import annotations

from o2ibpair import Bench, put_hdr

from nodes.o2ib import msg as M
from nodes.o2ib import vwire
from nodes.o2ib.connd import get_conn

A, B = "10.0.0.1@o2ib", "10.0.0.2@o2ib"


def bench(cpp: int) -> Bench:
    b = Bench()
    b.add("a", A, inc=11, conns_per_peer=cpp)
    b.add("b", B, inc=22)
    return b


def immediates_per_stream(b: Bench, node: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for name, stream, data in b.wire:
        p = vwire.unpack(data[4:])
        if name == node and p.kind is vwire.Kind.SEND \
                and M.kiblnd_unpack_msg(p.data).type is M.MsgType.IMMEDIATE:
            out[stream] = out.get(stream, 0) + 1
    return out


def test_kiblnd_launch_tx_connects_conns_per_peer_at_once() -> None:
    b = bench(3)
    b.send("a", 1, B, put_hdr(A, B, 5), b"hello")
    (pa,) = b.nodes["a"].lnd.peers.values()
    (pb,) = b.nodes["b"].lnd.peers.values()
    assert len(pa.conns) == 3 and len(pb.conns) == 3  # the passive side accepts each
    assert pa.connecting == 0 and b.nodes["a"].done[0].rc == 0


def test_kiblnd_get_conn_locked_round_robin() -> None:
    b = bench(2)
    b.send("a", 1, B, put_hdr(A, B, 5), b"first")  # queued, goes on the first conn up
    for i in range(2, 8):
        b.send("a", i, B, put_hdr(A, B, 5), b"x")
    per = immediates_per_stream(b, "a")
    assert sorted(per.values()) == [3, 4]  # 1 + 3 and 3: alternating after the first
    assert [d.rc for d in b.nodes["a"].done] == [0] * 7


def test_kiblnd_close_conn_locked_clears_next_conn() -> None:
    b = bench(2)
    b.send("a", 1, B, put_hdr(A, B, 5), b"x")
    (p,) = b.nodes["a"].lnd.peers.values()
    first = get_conn(p)
    assert p.next_conn is first
    b.nodes["a"].lnd._close(first, -5)
    assert p.next_conn is None and len(p.conns) == 1
    assert get_conn(p) is p.conns[0]


def test_conns_per_peer_one_is_one_connection() -> None:
    b = bench(1)
    for i in range(1, 5):
        b.send("a", i, B, put_hdr(A, B, 5), b"x")
    (p,) = b.nodes["a"].lnd.peers.values()
    assert len(p.conns) == 1 and list(immediates_per_stream(b, "a").values()) == [4]
