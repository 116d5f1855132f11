"""A broken socklnd peer (hostile-input suite part d), run inside a node's namespace.

``python wirepeer.py MODE TARGET_NID SRC_NID SEED`` connects to the target's acceptor
(port 988) from a reserved port, as ``lnet_connect`` does, and plays one corpus of cases;
prints one JSON line per case: ``{"case", "closed", "after", "expect"}``. ``closed`` is whether
the target closed (EOF or reset) within the case's wait. Modes:

* ``pre``: garbage before or during the handshake -- random bytes, a connreq or hello with a
  bad magic, version, NID, nips or type, a truncated hello, a handshake that stalls;
* ``post``: a real handshake (connreq + V3 hello, the target's hello read back), then bad
  frames -- random bytes, unknown ksock_msg types, a bad checksum, a payload length past
  LNET_MTU, a frame cut off and left to stall (the LND timeout must close it, issue 11 item 6);
* ``flood``: ``--count`` connections with the same bad connreq (the log's rate limit);
* ``conns``: ``--count`` established connections of one incarnation at once (how many does the
  target keep? at most 3 x conns_per_peer, issue 11), then as many silent handshakes (how
  many does it wait for? at most 3 x conns_per_peer in progress per address).

Cases are drawn from ``random.Random(SEED)``: the same bytes on every run.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodes.lnd import wire
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.nid import NID

PORT = wire.LNET_ACCEPTOR_PORT
LNET_PID = 12345


def connect(src_ip: str, dst_ip: str) -> socket.socket:
    for sport in range(wire.LNET_ACCEPTOR_MAX_RESERVED_PORT,
                       wire.LNET_ACCEPTOR_MIN_RESERVED_PORT - 1, -1):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((src_ip, sport))
            s.connect((dst_ip, PORT))
            return s
        except OSError:
            s.close()
    raise OSError("no reserved source port left")


def closed_within(s: socket.socket, wait: float) -> tuple[bool, float]:
    """Read until EOF/reset (True) or ``wait`` seconds of an open connection (False)."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < wait:
        try:
            if not s.recv(65536):
                return True, time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return True, time.monotonic() - t0
    return False, time.monotonic() - t0


def hello(me: NID, peer: NID, inc: int, ctype: int = wire.SOCKLND_CONN_CONTROL,
          **over: int) -> bytes:
    fields = {"magic": wire.LNET_PROTO_MAGIC, "version": wire.KSOCK_PROTO_V3, "src": me.nid4,
              "dst": peer.nid4, "spid": LNET_PID, "dpid": LNET_PID, "sinc": inc, "dinc": 0,
              "ctype": ctype, "nips": 0, **over}
    return struct.pack("<IIQQIIQQiI", *fields.values())


def handshake(src: NID, dst: NID, inc: int, ctype: int = wire.SOCKLND_CONN_CONTROL
              ) -> socket.socket | None:
    """A real handshake; the connected socket, or None when the target refused it."""
    s = connect(src.ip, dst.ip)
    s.sendall(wire.pack_connreq(dst) + hello(src, dst, inc, ctype))
    s.settimeout(10.0)
    got = b""
    try:
        while len(got) < wire.HELLO_SIZE:
            chunk = s.recv(wire.HELLO_SIZE - len(got))
            if not chunk:
                s.close()
                return None
            got += chunk
    except OSError:
        s.close()
        return None
    theirs = wire.unpack_hello(got + bytes(4 * struct.unpack_from("<I", got, 52)[0]))
    if theirs.ctype == wire.SOCKLND_CONN_NONE:
        s.close()
        return None
    return s


def lnet_frame(src: NID, dst: NID, *, length: int = 0, mtype: int = 0, ksm: int = 0xC1,
               csum: int = 0, payload: bytes = b"") -> bytes:
    """A ksock_msg (LNET) carrying a PUT-shaped header; fields as given, not checked."""
    hdr = struct.pack("<QQIIII", dst.nid4, src.nid4, LNET_PID, LNET_PID, mtype, length)
    return struct.pack("<IIQQ", ksm, csum, 0, 0) + hdr + bytes(40) + payload


Case = tuple[str, Callable[[], bytes], bool | None, float]  # name, bytes, expect close, wait


def pre_cases(rng: random.Random, src: NID, dst: NID) -> list[Case]:
    creq = wire.pack_connreq(dst)
    inc = time.time_ns()
    cases: list[Case] = [
        (f"random {i}", lambda n=n: rng.randbytes(n), True, 8.0)
        for i, n in enumerate(rng.randint(16, 300) for _ in range(12))]
    cases += [
        ("bad connreq magic", lambda: struct.pack("<IIQ", 0xDEADBEEF, 1, dst.nid4), True, 8.0),
        ("bad connreq version", lambda: struct.pack("<IIQ", wire.LNET_PROTO_ACCEPTOR_MAGIC, 7,
                                                    dst.nid4), True, 8.0),
        ("connreq for no NI", lambda: wire.pack_connreq(NID.parse("10.99.0.1@tcp")), True, 8.0),
        ("hello V1 magic", lambda: creq + hello(src, dst, inc, magic=wire.LNET_PROTO_TCP_MAGIC),
         True, 8.0),
        ("hello bad magic", lambda: creq + hello(src, dst, inc, magic=0x12345678), True, 8.0),
        ("hello version 2", lambda: creq + hello(src, dst, inc, version=2), True, 8.0),
        ("hello version 9", lambda: creq + hello(src, dst, inc, version=9), True, 8.0),
        ("hello nips 17", lambda: creq + hello(src, dst, inc, nips=17), True, 8.0),
        ("hello nips 2**32-1", lambda: creq + hello(src, dst, inc, nips=2**32 - 1), True, 8.0),
        ("hello src ANY", lambda: creq + hello(src, dst, inc, src=2**64 - 1), True, 8.0),
        ("hello for another NID", lambda: creq + hello(src, dst, inc, dst=src.nid4), True, 8.0),
        ("hello ctype 99", lambda: creq + hello(src, dst, inc, ctype=99), True, 8.0),
        ("connreq then 1 MiB junk", lambda: creq + rng.randbytes(1 << 20), True, 8.0),
        ("nothing (stall)", lambda: b"", True, 12.0),
        ("half a connreq (stall)", lambda: creq[:9], True, 12.0),
        ("half a hello (stall)", lambda: creq + hello(src, dst, inc)[:30], True, 12.0),
        ("hello, nips 4, no IPs (stall)", lambda: creq + hello(src, dst, inc, nips=4), True,
         12.0),
    ]
    for i in range(6):  # mutations of a valid handshake
        def mutated(i: int = i) -> bytes:
            b = bytearray(creq + hello(src, dst, inc + i))
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            return bytes(b)
        cases.append((f"mutated handshake {i}", mutated, None, 5.0))
    return cases


def post_cases(rng: random.Random, src: NID, dst: NID) -> list[Case]:
    cases: list[Case] = [
        (f"random {i}", lambda n=n: rng.randbytes(n), True, 8.0)
        for i, n in enumerate(rng.randint(24, 400) for _ in range(6))]
    cases += [
        ("unknown ksock_msg type", lambda: struct.pack("<IIQQ", 0xC7, 0, 0, 0), True, 8.0),
        ("payload past LNET_MTU", lambda: lnet_frame(src, dst, length=LNET_MTU + 1), True, 8.0),
        ("payload length 2**32-1", lambda: lnet_frame(src, dst, length=2**32 - 1), True, 8.0),
        ("bad checksum", lambda: lnet_frame(src, dst, csum=0x1234, length=8, payload=b"x" * 8),
         True, 8.0),
        ("LNet type 99", lambda: lnet_frame(src, dst, mtype=99), True, 8.0),
        ("NOOP then junk", lambda: struct.pack("<IIQQ", 0xC0, 0, 0, 0) + rng.randbytes(64),
         True, 8.0),
        ("frame cut mid-header (stall)", lambda: lnet_frame(src, dst)[:50], True, 15.0),
        ("PUT of 1 MiB announced, 10 bytes sent (stall)",
         lambda: lnet_frame(src, dst, length=LNET_MTU, mtype=1, payload=b"y" * 10), True,
         15.0),
    ]
    return cases


def play(cases: list[Case], start: Callable[[int], socket.socket | None]) -> None:
    for i, (name, make, expect, wait) in enumerate(cases):
        try:
            s = start(i)
        except OSError as exc:
            print(json.dumps({"case": name, "closed": True, "after": 0, "expect": expect,
                              "note": f"connect: {exc}"}), flush=True)
            continue
        if s is None:
            print(json.dumps({"case": name, "closed": True, "after": 0, "expect": expect,
                              "note": "handshake refused"}), flush=True)
            continue
        try:
            data = make()
            if data:
                s.sendall(data)
        except OSError:
            pass  # closed while we wrote: what is checked next
        closed, after = closed_within(s, wait)
        s.close()
        print(json.dumps({"case": name, "closed": closed, "after": round(after, 2),
                          "expect": expect}), flush=True)


def conns(src: NID, dst: NID, count: int) -> None:
    inc = time.time_ns()
    types = [wire.SOCKLND_CONN_CONTROL, wire.SOCKLND_CONN_BULK_IN, wire.SOCKLND_CONN_BULK_OUT]
    held = [handshake(src, dst, inc, types[i % 3]) for i in range(count)]
    time.sleep(1.0)
    alive = sum(1 for s in held if s is not None and not closed_within(s, 0.3)[0])
    for s in held:
        if s is not None:
            s.close()
    silent = [connect(src.ip, dst.ip) for _ in range(count)]
    time.sleep(1.0)
    waiting = sum(1 for s in silent if not closed_within(s, 0.3)[0])
    for s in silent:
        s.close()
    print(json.dumps({"established_kept": alive, "silent_kept": waiting}), flush=True)


def main() -> int:
    mode, target, source, seed = sys.argv[1:5]
    rng = random.Random(int(seed))
    dst, src = NID.parse(target), NID.parse(source)
    if mode == "conns":
        conns(src, dst, int(sys.argv[5]))
        return 0
    if mode == "flood":  # N connections with the same bad connreq, back to back
        bad = [("bad connreq magic", lambda: struct.pack("<IIQ", 0xDEADBEEF, 1, dst.nid4),
                True, 5.0)] * int(sys.argv[5])
        play(bad, lambda i: connect(src.ip, dst.ip))
        return 0
    if mode == "pre":
        play(pre_cases(rng, src, dst), lambda i: connect(src.ip, dst.ip))
    else:
        base = time.time_ns()
        play(post_cases(rng, src, dst), lambda i: handshake(src, dst, base + i))
    return 0


if __name__ == "__main__":
    sys.exit(main())
