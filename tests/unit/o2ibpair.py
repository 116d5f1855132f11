"""A test bench for o2iblnd (nodes/o2ib/o2iblnd.py): LNDs joined by in-memory streams.

Each node's ``O2ibLND`` outputs are carried out in FIFO order: ``Connect`` opens a stream to
the LND owning the peer NID (``connected`` at one end, ``accept`` at the other; refused when
none owns it), ``Write`` bytes reach the other end in order (unless ``held``), ``Close``
closes both ends. ``Deliver``/``TxDone``/``Notify`` are recorded per node. Time moves only
by ``advance``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID
from nodes.o2ib.kibtx import Close, Connect, Deliver, Notify, O2ibTunables, Output, TxDone, Write
from nodes.o2ib.o2iblnd import O2ibLND


@dataclass
class Node:
    name: str
    lnd: O2ibLND
    delivered: list[Deliver] = field(default_factory=list)
    done: list[TxDone] = field(default_factory=list)
    notified: list[Notify] = field(default_factory=list)


class Bench:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.owner: dict[NID, str] = {}
        self.ends: dict[tuple[str, int], tuple[str, int]] = {}
        self.q: deque[tuple[str, Output]] = deque()
        self.now = 0.0
        self.next_passive = 1000
        self.held = False
        self.wire: list[tuple[str, int, bytes]] = []
        #: a test's hand on a node's deliveries (e.g. the engine answering a GET with a REPLY)
        self.on_deliver: Callable[[str, Deliver], None] | None = None
        #: a test's loss: (node, packet bytes) -> True to lose that write
        self.drop: Callable[[str, bytes], bool] | None = None

    def add(self, name: str, nid: str, *, inc: int, version: int = 0x12,
            **params: int) -> Node:
        lnd = O2ibLND(incarnation=inc, version=version)
        ni = NID.parse(nid)
        lnd.startup_ni(ni, O2ibTunables.from_params(params))
        self.owner[ni] = name
        node = self.nodes[name] = Node(name, lnd)
        return node

    def feed(self, name: str, outs: list[Output]) -> None:
        self.q.extend((name, o) for o in outs)
        self.run()

    def run(self) -> None:
        while self.q:
            name, o = self.q.popleft()
            node = self.nodes[name]
            if isinstance(o, Connect):
                dst = self.owner.get(o.peer)
                if dst is None:
                    self.feed(name, node.lnd.connect_failed(o.stream, -111, self.now))
                    continue
                ps = self.next_passive
                self.next_passive += 1
                self.ends[(name, o.stream)] = (dst, ps)
                self.ends[(dst, ps)] = (name, o.stream)
                self.q.extend((dst, x) for x in self.nodes[dst].lnd.accept(ps, self.now))
                self.q.extend((name, x) for x in node.lnd.connected(o.stream, self.now))
            elif isinstance(o, Write):
                peer = self.ends.get((name, o.stream))
                if peer is None or self.held or (self.drop is not None
                                                 and self.drop(name, o.data)):
                    continue
                self.wire.append((name, o.stream, o.data))
                lnd = self.nodes[peer[0]].lnd
                data = o.data + bytes(o.tail)  # a large RDMA body comes apart (vwire.pack_parts)
                self.q.extend((peer[0], x) for x in lnd.receive(peer[1], data, self.now))
            elif isinstance(o, Close):
                peer = self.ends.pop((name, o.stream), None)
                if peer is not None:
                    self.ends.pop(peer, None)
            elif isinstance(o, Deliver):
                node.delivered.append(o)
                if self.on_deliver is not None:
                    self.on_deliver(name, o)
            elif isinstance(o, TxDone):
                node.done.append(o)
            elif isinstance(o, Notify):
                node.notified.append(o)

    def send(self, name: str, tx_id: int, dst: str, hdr: LNetHdr, payload: bytes) -> None:
        node = self.nodes[name]
        ni = next(iter(node.lnd.nets))
        self.feed(name, node.lnd.send(tx_id, ni, NID.parse(dst), hdr, payload, self.now))

    def advance(self, seconds: float, step: float = 0.25) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + step)
            for name, node in self.nodes.items():
                d = node.lnd.next_deadline()
                if d is not None and d <= self.now:
                    self.feed(name, node.lnd.handle_timer(self.now))


def put_hdr(src: str, dst: str, n: int, *, kind: MsgType = MsgType.PUT) -> LNetHdr:
    return LNetHdr(NID.parse(dst), NID.parse(src), 12345, 12345, kind, n,
                   WireHandle(7, 9), match_bits=0x11, ptl_index=4)


def get_hdr(src: str, dst: str, sink: int) -> LNetHdr:
    return LNetHdr(NID.parse(dst), NID.parse(src), 12345, 12345, MsgType.GET, 0,
                   WireHandle(3, 5), match_bits=0x22, ptl_index=4, sink_length=sink)
