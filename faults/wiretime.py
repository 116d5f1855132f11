"""How long a fault held each segment: a two-point packet timer in a node's namespace (issue
32: a delay fault's effect measured on the packets, whatever the load).

``python -m faults.wiretime DST --out FILE [--type GET] [--seconds 300]`` run in the node's
namespace (root) times every TCP segment with data the node sends to DST whose first LNet
message is TYPE (any with ``--type any``), between two points of the kernel's egress path:

* *before the fault*: an iptables ``mangle OUTPUT`` rule (``-j TEE``) clones each segment
  to DST onto a veth of its own (:data:`TAP`), before the ``filter OUTPUT`` rule that hands
  the segment to the interposer (faults/realise.py); the clone goes out through the OUTPUT
  hook again, marked with the interposer's own :data:`~faults.interposer.MARK` on the way
  (``raw`` table, ``-o`` the veth), so no fault rule queues it; its neighbour is a static
  MAC nobody owns, so the veth's peer drops it (other host) and it goes nowhere else;
* *on the wire*: the same segment leaving the route's device (``ip route get DST``), after
  the interposer's verdict (and after any qdisc on that device).

Both times are the kernel's (``SO_TIMESTAMPNS`` on ``AF_PACKET`` sockets: stamped when the
packet reaches the device's taps, ``dev_queue_xmit_nit``), so how late this process reads
them does not matter: a loaded host delays the reading, not the stamps. The difference is
the time the segment spent between the two points: the interposer's wake-up on the queued
packet, its hold and its verdict, plus a few microseconds of the stack (measured with no
fault on Mininet: median 6.5 us, p95 10 us). Segments are paired by (addresses, ports,
sequence number); one seen at only one point is counted (``tee_only``: held past the end,
dropped; ``wire_only``: sent before the tap). IPv4 only (``TEE`` for IPv6 would need
``ip6tables``; not needed yet).

Writes ``{"ready": true, "iface": DEV}`` to FILE once both sockets listen and the rule is in;
on SIGTERM/SIGINT or after ``--seconds`` removes the rule and the veth and writes ``{"iface",
"added_us": [...], "tee_only", "wire_only"}`` (each by rename: a reader sees one or the
other, whole). Bad arguments or a failed setup: one line on stderr, exit 2. :func:`start`
and :func:`stop` run it in a testbed node from a test or a benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from faults.interposer import MARK
from faults.prefilter import classify

#: The clone's veth (the peer is TAP + "p").
TAP = "wtime0"
#: The clone's next hop: TEST-NET-1, never a testbed address; its MAC owned by nobody.
GATEWAY, GATEWAY_MAC = "192.0.2.1", "02:00:5e:00:53:01"
ETH_P_IP = 0x0800
#: Outgoing packets reach only the taps of every protocol (``ptype_all``).
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35
#: Bytes read per packet: IP + TCP headers and the first LNet header are all it needs.
SNAP = 512
#: Segments kept per point (a ping test makes ~100).
MAX_KEPT = 100_000


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


def egress_device(dst: str) -> str:
    """The device the route to ``dst`` leaves by (``ip -o route get``)."""
    words = subprocess.run(["ip", "-o", "route", "get", dst], check=True, capture_output=True,
                           text=True, timeout=30).stdout.split()
    return words[words.index("dev") + 1]


def tee_rules(op: str, dst: str, dev: str) -> list[list[str]]:
    """The clone rule, and the rule that marks the clone as the interposer's own packets (the
    clone goes through OUTPUT again: unmarked, a fault's NFQUEUE rule would take it too)."""
    def head(table: str) -> list[str]:
        return ["iptables", "-w", "-t", table, op, "OUTPUT"]

    # the mark in ``raw``: a mark set in ``mangle`` OUTPUT re-routes the packet by its own
    # destination (ip_route_me_harder), which would send the clone to DST
    return [[*head("raw"), "-o", TAP, "-j", "MARK", "--set-mark", str(MARK)],
            [*head("mangle"), "-o", dev, "-p", "tcp", "-d", dst, "-j", "TEE",
             "--gateway", GATEWAY, "--oif", TAP]]


def setup(dst: str, dev: str) -> None:
    _run(["ip", "link", "add", TAP, "type", "veth", "peer", "name", TAP + "p"])
    for name in (TAP, TAP + "p"):
        _run(["ip", "link", "set", name, "up"])
    _run(["ip", "route", "add", f"{GATEWAY}/32", "dev", TAP])
    _run(["ip", "neigh", "replace", GATEWAY, "lladdr", GATEWAY_MAC, "dev", TAP,
          "nud", "permanent"])
    for argv in tee_rules("-I", dst, dev):
        _run(argv)


def teardown(dst: str, dev: str) -> None:
    for argv in (*tee_rules("-D", dst, dev), ["ip", "link", "del", TAP]):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _run(argv)


def listen(dev: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    s.bind((dev, ETH_P_ALL))
    s.setblocking(False)
    return s


def segment_key(data: bytes, dst: str, lnet_type: str) -> tuple[object, ...] | None:
    """(src, dst, sport, dport, seq) of a TCP segment to ``dst`` with data whose first LNet
    message is ``lnet_type`` (``any``: any data); None for any other packet."""
    pkt = classify(data)
    if pkt is None or pkt.proto != "tcp" or pkt.dst != dst or len(data) < 20:
        return None
    if struct.unpack_from("!H", data, 2)[0] <= pkt.l4_off:  # IPv4 total length: no data
        return None
    if lnet_type != "any" and pkt.lnet_type != lnet_type:
        return None
    return (pkt.src, pkt.dst, pkt.sport, pkt.dport, pkt.seq)


def _drain(s: socket.socket, seen: dict[tuple[object, ...], int], dst: str,
           lnet_type: str) -> None:
    while True:
        try:
            data, anc, _flags, addr = s.recvmsg(SNAP, 64)
        except BlockingIOError:
            return
        if addr[1] != ETH_P_IP or addr[2] != PACKET_OUTGOING:
            continue
        stamp = next((struct.unpack("qq", d[:16]) for lvl, typ, d in anc
                      if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS), None)
        key = segment_key(data, dst, lnet_type)
        if stamp is not None and key is not None and len(seen) < MAX_KEPT:
            seen.setdefault(key, stamp[0] * 1_000_000_000 + stamp[1])


def pair(tee: dict[tuple[object, ...], int],
         wire: dict[tuple[object, ...], int]) -> dict[str, object]:
    both = [k for k in tee if k in wire]
    return {"added_us": [round((wire[k] - tee[k]) / 1000) for k in both],
            "tee_only": len(tee) - len(both), "wire_only": len(wire) - len(both)}


def _write(out: Path, doc: dict[str, object]) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, out)


def _poll(node: Any, out: str, key: str, timeout: float) -> str:
    end = time.monotonic() + timeout
    while True:
        text = str(node.exec(["cat", out]).out)
        if key in text or time.monotonic() > end:
            return text
        time.sleep(0.1)


def start(node: Any, dst: str, out: str, python: str = "python3",
          lnet_type: str = "GET") -> int:
    """Run this timer in the background in ``node`` (a testbed node handle: ``exec``) until
    :func:`stop`; return its pid once it listens. ``python``: the node's interpreter that
    imports the project (a guest: ``python3`` with the wheels on its path)."""
    node.exec(["rm", "-f", out])
    res = node.exec(["sh", "-c", f"{python} -m faults.wiretime {dst} --type {lnet_type} "
                     f"--out {out} </dev/null >{out}.log 2>&1 & echo $!"])
    pid = int(str(res.out).split()[-1])
    if '"ready"' not in _poll(node, out, '"ready"', 30.0):
        log = node.exec(["cat", f"{out}.log"]).out
        raise RuntimeError(f"wiretime in the node did not start: {str(log).strip()}")
    return pid


def stop(node: Any, pid: int, out: str) -> dict[str, Any]:
    """End the timer :func:`start` ran; its result (``added_us``, ``tee_only``,
    ``wire_only``), its files removed."""
    node.exec(["kill", "-TERM", str(pid)])
    text = _poll(node, out, "added_us", 30.0)
    node.exec(["rm", "-f", out, f"{out}.log"])
    if "added_us" not in text:
        raise RuntimeError(f"wiretime in the node wrote no result: {text.strip()!r}")
    doc: dict[str, Any] = json.loads(text)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m faults.wiretime", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("dst", help="IPv4 address the segments go to")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--type", default="GET", help="LNet type of the segment's first message")
    ap.add_argument("--seconds", type=float, default=300.0)
    a = ap.parse_args(argv)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    dev = ""
    try:
        socket.inet_aton(a.dst)
        dev = egress_device(a.dst)
        setup(a.dst, dev)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        print(f"wiretime: cannot set up the tap to {a.dst}: {exc}", file=sys.stderr)
        teardown(a.dst, dev)
        return 2
    tee: dict[tuple[object, ...], int] = {}
    wire: dict[tuple[object, ...], int] = {}
    try:
        socks = {listen(TAP): tee, listen(dev): wire}
        _write(a.out, {"ready": True, "iface": dev})
        end = time.monotonic() + a.seconds
        while not stop and time.monotonic() < end:
            ready, _, _ = select.select(list(socks), [], [], 0.2)
            for s in ready:
                _drain(s, socks[s], a.dst, a.type)
        for s, seen in socks.items():
            _drain(s, seen, a.dst, a.type)
    finally:
        teardown(a.dst, dev)
    _write(a.out, {"iface": dev, **pair(tee, wire)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
