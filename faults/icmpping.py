"""A small ICMP echo prober for fault tests and benchmarks (the host has no ``ping``).

``python -m faults.icmpping DST [-c COUNT] [-i INTERVAL] [-W TIMEOUT] [-s SIZE]`` run in a
node's namespace sends COUNT echo requests INTERVAL seconds apart and prints one JSON object:
``{"sent": N, "received": M, "lost": [seq...], "rtt_ms": {seq: ms}, "dups": D, "order":
[seq in arrival order]}``. Replies are
matched by identifier and sequence; a reply after TIMEOUT (counted from the last request) is
lost. ``--linger`` keeps listening until TIMEOUT even when every request was answered, so
late duplicates are counted too. Root only (raw socket).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import struct
import sys
import time


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo_request(ident: int, seq: int, size: int) -> bytes:
    payload = struct.pack("!d", time.monotonic()) + bytes(max(0, size - 8))
    head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, _csum(head + payload), ident, seq) + payload


def probe(dst: str, count: int, interval: float, timeout: float, size: int = 56,
          linger: bool = False) -> dict[str, object]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    sent: dict[int, float] = {}
    rtt: dict[int, float] = {}
    dups = 0
    order: list[int] = []  # sequence numbers in the order their replies arrived
    next_send = time.monotonic()
    seq = 0
    end = None
    while True:
        now = time.monotonic()
        if seq < count and now >= next_send:
            sent[seq] = now
            # EPERM from an OUTPUT DROP rule, ENETUNREACH: a lost request
            with contextlib.suppress(OSError):
                sock.sendto(echo_request(ident, seq, size), (dst, 0))
            seq += 1
            next_send += interval
            if seq == count:
                end = now + timeout
        if end is not None and (now >= end or (len(rtt) == count and not linger)):
            break
        wait = (next_send if seq < count else end or now) - now
        ready, _, _ = select.select([sock], [], [], max(0.0, wait))
        if not ready:
            continue
        data = sock.recv(65535)
        ihl = (data[0] & 0x0F) * 4
        if len(data) < ihl + 8:
            continue
        typ, _code, _c, rid, rseq = struct.unpack_from("!BBHHH", data, ihl)
        if typ != 0 or rid != ident or rseq not in sent:
            continue
        if rseq in rtt:
            dups += 1
            continue
        rtt[rseq] = (time.monotonic() - sent[rseq]) * 1000.0
        order.append(rseq)
    sock.close()
    return {"sent": count, "received": len(rtt),
            "lost": sorted(set(range(count)) - set(rtt)),
            "rtt_ms": {str(k): round(v, 3) for k, v in sorted(rtt.items())}, "dups": dups,
            "order": order}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faults.icmpping")
    p.add_argument("dst")
    p.add_argument("-c", type=int, default=10)
    p.add_argument("-i", type=float, default=0.01)
    p.add_argument("-W", type=float, default=1.0)
    p.add_argument("-s", type=int, default=56)
    p.add_argument("--linger", action="store_true")
    a = p.parse_args(argv)
    try:
        print(json.dumps(probe(a.dst, a.c, a.i, a.W, a.s, a.linger)))
    except OSError as exc:
        print(f"icmpping: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
