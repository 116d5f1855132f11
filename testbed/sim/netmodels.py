"""Models of the packet faults the fabric has no packets for: what LNet sees of them over TCP.

Theory of operation (issue 32 item 1): the sim fabric carries LNet messages, not segments,
so each kind the Mininet interposer or tc applies to packets is modelled by its effect on the
socklnd's byte stream, which is what LNet can observe. A model is consulted by
``netfaults.transmit_ruled`` for every message of an active rule (``take``; ``matched``
says whether the rule's keys hold) and either leaves the message to the fabric (False) or
disposes of it itself (True: scheduled, held, lost or failed). The models share no base
class (issue 29: no sim class inherits another): each holds its rule's ``Knobs``; ``reorder``
and ``stall`` are one ``Holding`` model (the held queues) composed with their ``Reorder`` or
``Stall`` policy; ``Model`` is the protocol they satisfy.

* ``rst``: the first ``count`` matching messages are written (the tx completes OK, as
  ksocklnd finalizes a tx once its bytes are in the socket) and lost with the connection,
  which both ends' kernels reset a latency later: each socklnd logs ``connection down: ...
  [Errno 104] Connection reset by peer`` and tells LNet the peer NI is down
  (``ksocknal_close_conn_and_siblings`` -> ``lnet_notify``); the next send reconnects.
* ``reorder``: a held segment reaches the receiver later, and TCP hands the LND no byte after
  it until it arrives (head-of-line): a selected message (``rate``) and every later message of
  its connection wait until ``gap`` more messages were sent on it or ``hold`` ms passed, then
  arrive in order. The LND's framing sees the same byte stream as without the fault.
* ``duplicate``: TCP discards the copy of a segment it already has (same sequence numbers),
  so LNet receives each message once; the copies are counted.
* ``corrupt``: with ``csum: bad`` the receiver's kernel drops the segment and TCP retransmits
  it (one retransmission timeout, 200 ms, added). With ``csum: fix`` the bits flipped (in the
  frame's ``offset``/``span`` if given, else anywhere in its 24 + 72 + payload bytes) reach
  the socklnd: in the ksock_msg type (bytes 0-3) or an lnet_hdr that ``lnethdr.unpack_hdr``
  refuses or whose ``payload_length`` changed, the receiver closes the connection with a
  protocol error (the sender sees the reset); in the other ksock_msg bytes nothing; in the
  rest of the header or the payload the message is delivered with those bits flipped.
* ``stall``: matching messages (and, head-of-line, every later one of their connection) are
  held until the fault is reverted, then delivered in order; a connection held for the sending
  NI's LND timeout is closed as the socklnd closes it (posted txs: -ETIMEDOUT,
  NETWORK_TIMEOUT).
* ``bandwidth``: a token bucket (``bw``, ``burst``) per direction of the interface, as tc tbf
  on it: a message leaves once the bucket holds its bytes on the wire (the frame plus 66 bytes
  of Ethernet/IP/TCP headers per 1448-byte segment), in order.

Deliberate differences (docs/differences.md): per connection, not per packet; a reset
leaves messages already in flight on the connection to arrive; tbf's ``latency`` limit (drops
when its queue is too long) is not modelled.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from nodes.lnd import errmap, lnethdr, wire
from nodes.lnet.actions import Transmit
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hstatus import HStatus

if TYPE_CHECKING:
    from testbed.sim.fabric import Fabric
    from testbed.sim.links import Link

Pair = tuple[str, Any, Any]  # (sending node, NI, peer NI): one socklnd connection
#: Ethernet + IPv4 + TCP (with timestamps) headers per segment, and the MSS, on a 1500 MTU
SEG_OVERHEAD, MSS = 66, 1448
#: Linux TCP_RTO_MIN: a segment the receiver's kernel dropped is sent again this much later
RTO_MIN = 0.2
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1 << 20, "mb": 1 << 20}
RESET_TEXT = "[Errno 104] Connection reset by peer"


def rate_bits(text: str) -> float:
    """tc's rate syntax (``10mbit``, ``1mbps``) in bits per second."""
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    return float(num) * _RATE_UNITS[text[len(num):]]


def size_bytes(text: str) -> int:
    """tc's size syntax (``32kb``, ``1m``, ``1500``) in bytes."""
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(num) * _SIZE_UNITS[text[len(num):]]


def wire_bytes(act: Transmit) -> int:
    """Bytes a message takes on the wire: its frame and the headers of its segments."""
    frame = wire.LNET_FRAME_HEAD + len(act.payload)
    return frame + math.ceil(frame / MSS) * SEG_OVERHEAD


class Knobs:
    """What a rule gives its model: the kind's parameters, the activation's seeded rng and
    counters, the faulted node's NIDs (of ``iface`` if given)."""

    def __init__(self, params: dict[str, Any], rng: random.Random,
                 counters: dict[str, int], nids: set[Any]) -> None:
        self.p, self.rng, self.counters = params, rng, counters
        self.nids = nids

    def count(self, key: str) -> None:
        self.counters[key] = self.counters.get(key, 0) + 1


class Model(Protocol):
    """A packet kind's model (no base class: each model holds its ``Knobs``, issue 29)."""

    k: Knobs

    def take(self, fab: Fabric, name: str, act: Transmit, link: Link, timeout: float,
             matched: bool) -> bool:
        """Whether the model took ``act`` (else the fabric carries it as usual)."""
        ...

    def close(self, fab: Fabric) -> None:
        """The fault is reverted."""
        ...


def reset(fab: Fabric, pair: Pair, dst: str, why: str, lost: Transmit | None) -> None:
    """Both ends of ``pair``'s connection see it reset (``why`` on the receiving end, the
    reset on the sending end); ``lost``: its message was written, so its tx is done."""
    name, ni, lpni = pair
    if lost is not None:
        fab.complete(name, lost.tx_id, 0, HStatus.OK)
    for node, a, b, text in ((dst, lpni, ni, why), (name, ni, lpni, RESET_TEXT)):
        if node in fab.engines:
            fab.log.append((fab.now, node, f"socklnd: connection down: {a} -> {b} {text}"))
            fab.connected.add((node, a, b))  # (so that notify reports it closed)
            fab.notify(node, a, b, False)


class Rst:
    def __init__(self, k: Knobs) -> None:
        self.k = k
        self.left = int(k.p["count"])

    def close(self, fab: Fabric) -> None:
        """Nothing held."""

    def take(self, fab: Fabric, name: str, act: Transmit, link: Link, timeout: float,
             matched: bool) -> bool:
        if not matched or self.left <= 0 or link.dst is None:
            return False
        self.left -= 1
        self.k.count("rst")
        fab.at(fab.now + link.latency, functools.partial(
            reset, fab, (name, act.ni, act.lpni), link.dst, RESET_TEXT, act))
        return True


class _Held:
    """Messages of one connection waiting behind a held one."""

    __slots__ = ("acts", "latency", "left")

    def __init__(self, latency: float, left: int) -> None:
        self.acts: list[Transmit] = []
        self.latency, self.left = latency, left


class Holding:
    """The model of a kind that holds messages per connection, in order (head-of-line), until
    released (``reorder``, ``stall``): it keeps the held queues and its ``policy`` (composed,
    issue 29) decides what each message does given its connection's queue."""

    def __init__(self, k: Knobs, policy: HoldPolicy) -> None:
        self.k, self.policy = k, policy
        self.held: dict[Pair, _Held] = {}

    def take(self, fab: Fabric, name: str, act: Transmit, link: Link, timeout: float,
             matched: bool) -> bool:
        pair = (name, act.ni, act.lpni)
        return self.policy.take(self, fab, pair, self.held.get(pair), act, link, timeout,
                                matched)

    def release(self, fab: Fabric, pair: Pair, h: _Held) -> None:
        if self.held.get(pair) is not h:
            return  # (released or expired already)
        del self.held[pair]
        for act in h.acts:
            fab.at_deliver(fab.now + h.latency, pair[0], act)

    def close(self, fab: Fabric) -> None:
        for pair, h in list(self.held.items()):
            self.release(fab, pair, h)


class HoldPolicy(Protocol):
    """What a holding kind does with a message of ``pair``, ``h`` its held queue if any."""

    def take(self, q: Holding, fab: Fabric, pair: Pair, h: _Held | None, act: Transmit,
             link: Link, timeout: float, matched: bool) -> bool:
        ...


class Reorder:
    """``reorder``'s policy: a selected message opens a hole that ``gap`` messages or ``hold``
    ms close."""

    def take(self, q: Holding, fab: Fabric, pair: Pair, h: _Held | None, act: Transmit,
             link: Link, timeout: float, matched: bool) -> bool:
        k = q.k
        if h is not None:  # behind a held segment: TCP delivers nothing past the hole
            if matched and k.rng.random() < k.p["rate"]:
                k.count("reordered")  # held too: it goes with the hole's release
            h.acts.append(act)
            h.left -= 1
            if h.left <= 0:
                q.release(fab, pair, h)
            return True
        if not matched or k.rng.random() >= k.p["rate"]:
            return False
        k.count("reordered")
        h = q.held[pair] = _Held(link.latency, int(k.p["gap"]))
        h.acts.append(act)
        fab.at(fab.now + float(k.p["hold"]) / 1000.0,
               functools.partial(q.release, fab, pair, h))
        return True

class Duplicate:
    def __init__(self, k: Knobs) -> None:
        self.k = k

    def close(self, fab: Fabric) -> None:
        """Nothing held."""

    def take(self, fab: Fabric, name: str, act: Transmit, link: Link, timeout: float,
             matched: bool) -> bool:
        if matched and self.k.rng.random() < self.k.p["rate"]:
            self.k.count("duplicated")  # the receiver's TCP drops the copy
        return False


class Corrupt:
    def __init__(self, k: Knobs) -> None:
        self.k = k

    def close(self, fab: Fabric) -> None:
        """Nothing held."""

    def take(self, fab: Fabric, name: str, act: Transmit, link: Link, timeout: float,
             matched: bool) -> bool:
        if not matched or link.dst is None or self.k.rng.random() >= self.k.p["rate"]:
            return False
        self.k.count("corrupted")
        if self.k.p["csum"] == "bad":  # dropped by the receiving kernel, sent again
            if timeout <= RTO_MIN:
                rc, hstatus = errmap.FAILURES["posted_timeout"]
                fab.fail_at(fab.now + timeout, name, act, rc, hstatus)
            else:
                fab.at_deliver(fab.now + link.latency + RTO_MIN, name, act)
            return True
        head = bytearray(lnethdr.pack_hdr(act.hdr))
        payload = bytearray(bytes(act.payload))
        lo = int(self.k.p["offset"] or 0)
        size = wire.KSOCK_MSG_HDR_SIZE + len(head) + len(payload)
        hi = min(size, lo + int(self.k.p["span"] or size))
        if hi <= lo:
            return False
        broken = False
        for _ in range(int(self.k.p["bits"])):
            bit = self.k.rng.randrange(lo * 8, hi * 8)
            at = bit // 8 - wire.KSOCK_MSG_HDR_SIZE
            if at < -wire.KSOCK_MSG_HDR_SIZE + 4:
                broken = True  # the ksock_msg type
            elif 0 <= at < len(head):
                head[at] ^= 1 << (bit % 8)
            elif at >= len(head):
                payload[at - len(head)] ^= 1 << (bit % 8)
        why = "protocol error: bad ksock message type" if broken else ""
        hdr = act.hdr
        if not broken:
            try:
                hdr = lnethdr.unpack_hdr(bytes(head))
            except WireProtocolError as exc:
                why = f"protocol error: {exc}"
            else:
                if hdr.payload_length != act.hdr.payload_length:
                    why = "protocol error: frame length changed"
        if why:
            fab.at(fab.now + link.latency, functools.partial(
                reset, fab, (name, act.ni, act.lpni), link.dst, why, act))
            return True
        fab.at_deliver(fab.now + link.latency, name, Transmit(
            tx_id=act.tx_id, ni=act.ni, lpni=act.lpni, hdr=hdr, payload=bytes(payload)))
        return True


class Stall:
    """``stall``'s policy: matching messages, and every later one of their connection, wait
    for the revert or the LND timeout."""

    def take(self, q: Holding, fab: Fabric, pair: Pair, h: _Held | None, act: Transmit,
             link: Link, timeout: float, matched: bool) -> bool:
        if h is None:
            if not matched:
                return False
            h = q.held[pair] = _Held(link.latency, 0)
            fab.at(fab.now + timeout, functools.partial(self.expire, q, fab, pair, h))
        q.k.count("stalled")
        h.acts.append(act)
        return True

    def expire(self, q: Holding, fab: Fabric, pair: Pair, h: _Held) -> None:
        """The socklnd's monitor: no progress for the LND timeout closes the connection."""
        if q.held.get(pair) is not h:
            return
        del q.held[pair]
        name, _ni, lpni = pair
        if name in fab.engines:
            fab.log.append((fab.now, name, f"socklnd: timeout sending data to {lpni}; the "
                                           f"network or that node may be down"))
        rc, hstatus = errmap.FAILURES["posted_timeout"]
        for act in h.acts:
            fab.fail(name, act, rc, hstatus)


class Bandwidth:
    def __init__(self, k: Knobs) -> None:
        self.k = k
        self.rate = rate_bits(str(k.p["bw"])) / 8.0  # bytes per second
        self.burst = float(size_bytes(str(k.p["burst"])))
        self.buckets: dict[bool, list[float]] = {}  # outgoing? -> [tokens, at]

    def close(self, fab: Fabric) -> None:
        """Nothing held (the shaped messages are on the fabric's timeline)."""

    def take(self, fab: Fabric, name: str, act: Transmit, link: Link, timeout: float,
             matched: bool) -> bool:
        if not matched or link.dst is None:
            return False
        size = wire_bytes(act)
        b = self.buckets.setdefault(act.ni in self.k.nids, [self.burst, fab.now])
        t = max(fab.now, b[1])
        tokens = min(self.burst, b[0] + (t - b[1]) * self.rate)
        if tokens >= size:
            b[0], b[1] = tokens - size, t
        else:
            t += (size - tokens) / self.rate
            b[0], b[1] = 0.0, t
        self.k.count("shaped")
        fab.at_deliver(t + link.latency, name, act)
        return True


MODELS: dict[str, Callable[[Knobs], Model]] = {
    "rst": Rst, "reorder": lambda k: Holding(k, Reorder()), "duplicate": Duplicate,
    "corrupt": Corrupt, "stall": lambda k: Holding(k, Stall()), "bandwidth": Bandwidth}
__all__ = ["MODELS", "Knobs", "Model", "rate_bits", "size_bytes", "wire_bytes"]
