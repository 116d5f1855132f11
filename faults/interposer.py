"""The NFQUEUE interposer: one process per interposed fault, inside the node's namespace.

Theory of operation: the ``interposer`` resource (``faults.resources``) writes a typed
:class:`~faults.interposer_spec.InterposerSpec` to SPEC.json and starts
``python -m faults.interposer SPEC.json`` with
``nsenter --net`` into the node's network namespace (env ``LNET_TESTBED=<name>``, so ``testbed
clean`` finds it by tag), then inserts the iptables rules that send the fault's packets to
queue ``queue`` (``-j NFQUEUE --queue-num Q``; without ``--queue-bypass`` a dead interposer
means no traffic, never silently unfaulted traffic). Packets we inject ourselves (duplicates,
RSTs) carry ``fwmark`` :data:`MARK` and the rules skip that mark.

Per packet: :func:`faults.prefilter.classify` (struct only), the rule's
:class:`~faults.prefilter.Matcher`, then :class:`faults.decide.Decider`; non-matching
packets are accepted at once, and so is a segment an ``rst`` fault could not reset with
(:func:`resettable`: a SYN, FIN or RST). ``classify`` walks an IPv6 packet's extension
headers itself (``faults/ip6ext.py``); a fragment is not classified (counted
``v6_fragments``), nor ESP or a bad chain (``v6_unclassified``), and is let through. When
the rule has LNet keys (type, NIDs, portal, forwarded), every segment of a socklnd
connection goes through :class:`faults.flowtrack.FlowTracker`, and the segment matches when
one of the messages it carries bytes of does (issue 32 item 2). Held packets (delay,
reorder, stall) keep their verdict pending in the kernel (netfilterqueue lets a verdict be
given after the callback); a heap releases them on time. Scapy is imported only to forge
RSTs (STYLE rule 7).

Counters (seen, matched, accepted, dropped, delayed, reordered, duplicated, corrupted,
stalled, rst, v6_fragments, v6_unclassified, held now; with a tracker also lnet_segments,
messages, messages_matched, resyncs, gaps, rescanned, evicted, flows, flow_bytes) and the
first :data:`DECISION_LOG` verdict letters go to ``COUNTERS.json`` twice a second, at exit,
and at once on SIGUSR1 (``faults.resources.read_counters(fresh=True)``: counters current
when read; each write bumps ``writes``). SIGTERM: release held packets (a stall ends by
letting its packets go), write counters, unbind, exit 0. Timing: a held packet's release
lateness (``late_us_p50``/``p95``/``max`` over the last :data:`LATE_KEPT`); the timed kinds'
interposer runs SCHED_FIFO (``faults/timely.py``).
"""

from __future__ import annotations

import heapq
import ipaddress
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from faults import decide, ip6ext, timely
from faults.csum import break_l4_checksum, fix_l4_checksum
from faults.flowtrack import FlowTracker
from faults.interposer_spec import InterposerSpec
from faults.prefilter import Matcher, Pkt, classify

#: fwmark of packets the interposer injects; its iptables rules skip it.
MARK = 0x4C4E
#: How many verdict letters are kept for replay checks.
DECISION_LOG = 4096
COUNTER_PERIOD = 0.5
#: Held packets are capped (the kernel's queue maxlen is 1024 by default).
MAX_HELD = 4000
#: Release latenesses kept for the ``late_us_*`` percentiles (the most recent ones).
LATE_KEPT = 1024


class Interposer:
    """State of one interposer: its decider, held packets and counters."""

    def __init__(self, spec: InterposerSpec) -> None:
        self.spec = spec
        self.matcher = Matcher(spec.match, spec.local_nids)
        self.decider = decide.Decider(spec.kind, dict(spec.params), spec.seed)
        self.counters = {k: 0 for k in ("seen", "matched", "accepted", "dropped", "delayed",
                                        "reordered", "duplicated", "corrupted", "stalled",
                                        "rst", ip6ext.FRAGMENTED, ip6ext.UNREADABLE)}
        #: rules with LNet keys follow every socklnd stream (faults/flowtrack.py)
        self.tracker = FlowTracker() if self.matcher.needs_header else None
        self.rst = spec.kind == "rst"
        self.lnet = {"lnet_segments": 0, "messages_matched": 0}
        self.writes = 0
        self.decisions: list[str] = []
        self.timed: list[tuple[float, int, Any]] = []  # (release time, seq, packet)
        self.gapped: list[list[Any]] = []  # [packets left to pass, packet]
        self.stalled: list[Any] = []
        self.late: list[float] = []  # seconds a held packet's verdict came after its time
        self.seq = 0
        self.raw: dict[int, socket.socket] = {}
        self.t0 = time.monotonic()

    # -- per packet ---------------------------------------------------------------------------

    def on_packet(self, qpkt: Any) -> None:
        self.counters["seen"] += 1
        data = qpkt.get_payload()
        pkt = classify(data)
        if pkt is not None and pkt.unclassified is not None:  # a fragment, ESP, bad chain
            self.counters[pkt.unclassified] += 1
            pkt = None
        if pkt is None or not self._matches(pkt, data) \
                or (self.rst and not resettable(pkt)):
            self._release(qpkt)
            return
        self.counters["matched"] += 1
        now = time.monotonic() - self.t0
        v = self.decider.decide(now, len(data) - pkt.l4_off if pkt else 0)
        if len(self.decisions) < DECISION_LOG:
            self.decisions.append(v.action)
        self._apply(qpkt, data, pkt, v, now)

    def _matches(self, pkt: Pkt, data: bytes) -> bool:
        tracker = self.tracker
        if tracker is None or not pkt.is_lnet:
            return self.matcher(pkt)
        off = pkt.tcp_off
        key = data[8:40] + data[off:off + 4] if pkt.v6 else data[12:20] + data[off:off + 4]
        flow = tracker.step(key, pkt.seq, pkt.tcp_flags, len(data) - pkt.l4_off)
        if flow is not None:  # more payload of the flow's current message: its verdict
            self.lnet["lnet_segments"] += 1
            if flow.note is None:
                cur = flow.cur
                flow.note = cur is not None and self.matcher.packet(pkt) \
                    and self.matcher.message(cur)
            return bool(flow.note)
        counters = tracker.counters
        before = counters["messages"]
        msgs = tracker.feed(key, pkt.seq, pkt.tcp_flags, data, pkt.l4_off, wide=pkt.v6)
        if len(data) > pkt.l4_off:
            self.lnet["lnet_segments"] += 1
        fresh = counters["messages"] - before
        message = self.matcher.message
        if fresh:  # messages whose header ended in this segment: counted once each
            self.lnet["messages_matched"] += sum(
                1 for m in msgs[len(msgs) - fresh:] if message(m))
        if not msgs or not self.matcher.packet(pkt):
            return False
        if len(msgs) == 1:  # (the common case: one message's payload)
            return message(msgs[0])
        return any(message(m) for m in msgs)

    def _apply(self, qpkt: Any, data: bytes, pkt: Pkt, v: decide.Verdict, now: float) -> None:
        a = v.action
        if a == decide.ACCEPT:
            self._release(qpkt)
        elif a == decide.DROP:
            self.counters["dropped"] += 1
            qpkt.drop()
        elif a == decide.HOLD and self._room(qpkt):
            self.counters["delayed"] += 1
            self.seq += 1
            heapq.heappush(self.timed, (v.until, self.seq, qpkt))
        elif a == decide.GAP and self._room(qpkt):
            self.counters["reordered"] += 1
            self.gapped.append([v.gap, qpkt, v.until])
        elif a == decide.STALL and self._room(qpkt):
            self.counters["stalled"] += 1
            self.stalled.append(qpkt)
        elif a == decide.DUP:
            self.counters["duplicated"] += 1
            self._release(qpkt)
            self._inject(data, pkt.v6)
        elif a == decide.CORRUPT:
            self.counters["corrupted"] += 1
            body = decide.flip_bits(data[pkt.l4_off:], v.bits)
            out = data[:pkt.l4_off] + body
            if self.spec.params.get("csum", "fix") == "fix":
                out = fix_l4_checksum(out)
            else:
                out = break_l4_checksum(out)
            qpkt.set_payload(out)
            self._release(qpkt)
        elif a == decide.RST:
            self.counters["rst"] += 1
            self._forge_rst(data, pkt)
            qpkt.drop()

    def _room(self, qpkt: Any) -> bool:
        if len(self.timed) + len(self.gapped) + len(self.stalled) < MAX_HELD:
            return True
        self.counters["dropped"] += 1
        qpkt.drop()
        return False

    def _release(self, qpkt: Any) -> None:
        """Accept a packet; it also counts toward the gap of packets held for reordering."""
        self.counters["accepted"] += 1
        qpkt.accept()
        if self.gapped:
            for item in self.gapped:
                item[0] -= 1
            due = [item for item in self.gapped if item[0] <= 0]
            self.gapped = [item for item in self.gapped if item[0] > 0]
            for _n, held, _t in due:
                self.counters["accepted"] += 1
                held.accept()

    def release_due(self) -> None:
        now = time.monotonic() - self.t0
        lateness = self.late
        while self.timed and self.timed[0][0] <= now:
            until, _seq, qpkt = heapq.heappop(self.timed)
            self._release(qpkt)
            lateness.append(time.monotonic() - self.t0 - until)
        if len(lateness) > LATE_KEPT:
            del lateness[:len(lateness) - LATE_KEPT]
        late = [item for item in self.gapped if item[2] <= now]
        if late:
            self.gapped = [item for item in self.gapped if item[2] > now]
            for _n, held, _t in late:
                self._release(held)

    def next_timeout(self) -> float:
        times = [self.timed[0][0]] if self.timed else []
        times += [item[2] for item in self.gapped]
        if not times:
            return COUNTER_PERIOD
        return max(0.0, min(COUNTER_PERIOD, min(times) - (time.monotonic() - self.t0)))

    def release_all(self) -> None:
        """Revert: let every held packet go, oldest first."""
        for _t, _s, qpkt in sorted(self.timed, key=lambda x: x[:2]):
            qpkt.accept()
        for _n, qpkt, _t in self.gapped:
            qpkt.accept()
        for qpkt in self.stalled:
            qpkt.accept()
        self.timed, self.gapped, self.stalled = [], [], []

    # -- injection ----------------------------------------------------------------------------

    def _socket(self, v6: bool = False) -> socket.socket:
        """A raw socket with header included (IPPROTO_RAW: the header is ours on AF_INET6
        too, ``inet6_create``), one per family."""
        fam = socket.AF_INET6 if v6 else socket.AF_INET
        if fam not in self.raw:
            s = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_RAW)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
            self.raw[fam] = s
        return self.raw[fam]

    def _inject(self, data: bytes, v6: bool = False) -> None:
        """Send a copy of an IPv4/IPv6 packet as is (our mark keeps it out of the queue)."""
        dst = str(ipaddress.IPv6Address(data[24:40])) if v6 else \
            ".".join(str(x) for x in data[16:20])
        try:
            self._socket(v6).sendto(data, (dst, 0))
        except OSError as exc:
            print(f"interposer: inject to {dst} failed: {exc}", file=sys.stderr, flush=True)

    def _forge_rst(self, data: bytes, pkt: Pkt) -> None:
        """Kill the packet's TCP connection: an RST to each end, built with scapy.

        Linux accepts an RST only when its sequence number is exactly the receiver's
        ``rcv_nxt`` (RFC 5961 §3.2; anything else in the window earns a challenge ACK). The
        segment itself is dropped, so its receiver still expects ``tcp.seq``; the sender
        expects ``tcp.ack``, the next byte it acknowledged."""
        from scapy.layers.inet import IP, TCP
        from scapy.layers.inet6 import IPv6

        l3: Any = IPv6 if pkt.v6 else IP
        ip = l3(data)
        tcp = ip[TCP]
        to_dst = l3(src=ip.src, dst=ip.dst) / TCP(sport=tcp.sport, dport=tcp.dport,
                                                  flags="R", seq=tcp.seq)
        to_src = l3(src=ip.dst, dst=ip.src) / TCP(sport=tcp.dport, dport=tcp.sport,
                                                  flags="R", seq=tcp.ack)
        for forged in (to_dst, to_src):
            self._inject(bytes(forged), pkt.v6)

    # -- bookkeeping --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        self.writes += 1
        extra: dict[str, Any] = {}
        if self.tracker is not None:
            extra = {**self.lnet, **self.tracker.counters, "flows": len(self.tracker.flows),
                     "flow_bytes": self.tracker.flow_bytes()}
        extra.update(timely.lateness(self.late))
        return {**self.counters, **extra,
                "held": len(self.timed) + len(self.gapped) + len(self.stalled),
                "decisions": "".join(self.decisions), "pid": os.getpid(), "t": time.time(),
                "writes": self.writes}


def resettable(pkt: Pkt) -> bool:
    """Whether an RST forged from segment ``pkt`` kills its connection: an established one's
    segment (ACK set; no SYN, FIN or RST). A SYN has no ``ack`` to give its sender's
    ``rcv_nxt`` (that end would get an RST with sequence 0, ignored) and its receiver has no
    connection yet: dropping it only delays the connect (the SYN is retransmitted). So a
    connect racing the fault (Multi-Rail opening a connection from another NI) does not use
    up the fault's ``count`` on a reset nobody sees (the open bug of
    test_rst_on_large_nids_resets_both_ends_and_socklnd_reconnects, 2026-12-03)."""
    return pkt.proto == "tcp" and pkt.tcp_flags & 0x17 == 0x10


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(64):
            pass
    except BlockingIOError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m faults.interposer SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = InterposerSpec.from_dict(json.loads(Path(args[0]).read_text()))
    except (OSError, ValueError) as exc:  # FaultError and JSON errors are ValueErrors
        print(f"interposer: {args[0]}: {exc}", file=sys.stderr)
        return 2
    from netfilterqueue import NetfilterQueue

    realtime = timely.prioritise(spec.kind)
    counters_path = Path(spec.counters)
    ip = Interposer(spec)
    ip.counters["realtime"] = int(realtime)  # SCHED_FIFO granted (faults/timely.py)
    stop = {"now": False, "flush": False}

    def on_term(_sig: int, _frame: object) -> None:
        stop["now"] = True

    def on_flush(_sig: int, _frame: object) -> None:
        stop["flush"] = True

    # a signal wakes select at once (its handler alone would wait for select's timeout)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, on_flush)
    nfq = NetfilterQueue()
    nfq.bind(spec.queue, ip.on_packet, max_len=MAX_HELD + 1024)
    fd = nfq.get_fd()
    write_json(counters_path, {**ip.snapshot(), "ready": True})
    last = time.monotonic()
    try:
        while not stop["now"]:
            try:
                readable, _, _ = select.select([fd, wake_r], [], [], ip.next_timeout())
            except InterruptedError:
                continue
            if wake_r in readable:
                _drain(wake_r)
            if fd in readable or stop["flush"]:
                nfq.run(block=False)  # a reader wants counters: the packets queued first
            ip.release_due()
            if stop["flush"] or time.monotonic() - last >= COUNTER_PERIOD:
                stop["flush"] = False
                write_json(counters_path, {**ip.snapshot(), "ready": True})
                last = time.monotonic()
    finally:
        ip.release_all()
        write_json(counters_path, {**ip.snapshot(), "ready": True, "exited": True})
        nfq.unbind()
    return 0


if __name__ == "__main__":
    sys.exit(main())
