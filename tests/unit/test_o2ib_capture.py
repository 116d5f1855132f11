"""The emulated o2ib framing in a capture (issue 28 item 5, testbed/observe/o2ibcap.py): a
TCP stream to port 987 built byte for byte with ``nodes/o2ib/vwire.py`` and ``msg.py`` is
decoded by the project's Lua dissector (``o2ibemu``, titled as an emulation): frames across
segments and several in one segment, each kind's fields, and the o2iblnd messages inside
(CONNREQ in the CM REQ, IMMEDIATE with its LNet PUT) handed to tshark's own LNet dissector;
a bad frame length is flagged malformed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID
from nodes.o2ib import msg as M
from nodes.o2ib import vwire
from nodes.o2ib.vwire import Kind, Packet, Syndrome
from testbed.observe.capture import DATA_PORTALS_LUA, tshark_check
from testbed.observe.o2ibcap import O2IB_LUA

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
C, S = NID.parse("10.31.0.1@o2ib"), NID.parse("10.31.0.2@o2ib")


def kib(t: M.MsgType, body: Any) -> bytes:
    return M.kiblnd_pack_msg(M.KibMsg(type=t, body=body, credits=3, srcnid=C.nid4,
                                      srcstamp=11, dstnid=S.nid4, dststamp=22))


def stream(tmp_path: Path, frames: list[tuple[str, bytes]], tail: bytes = b"") -> Path:
    """A TCP connection 10.31.0.1:40000 -> 10.31.0.2:987 carrying ``frames`` (side, bytes):
    the first client frame split over two segments, two server frames in one."""
    pkts: list[Any] = []
    seq = {"c": 1000, "s": 9000}

    def seg(side: str, data: bytes, flags: str = "PA") -> None:
        c = side == "c"
        ip = IP(src="10.31.0.1" if c else "10.31.0.2", dst="10.31.0.2" if c else "10.31.0.1")
        tcp = TCP(sport=40000 if c else 987, dport=987 if c else 40000, flags=flags,
                  seq=seq[side])
        pkts.append(Ether() / ip / tcp / Raw(data) if data else Ether() / ip / tcp)
        seq[side] += len(data)

    seq["c"] -= 1
    seg("c", b"", "S")
    seq["c"] += 1
    seq["s"] -= 1
    seg("s", b"", "SA")
    seq["s"] += 1
    side0, first = frames[0]
    seg(side0, first[:7])
    seg(side0, first[7:])
    i = 1
    while i < len(frames):
        side, data = frames[i]
        if i + 1 < len(frames) and frames[i + 1][0] == side == "s":
            data += frames[i + 1][1]
            i += 1
        seg(side, data)
        i += 1
    if tail:
        seg("c", tail)
    path = tmp_path / "o2ib.pcap"
    wrpcap(str(path), pkts)
    return path


def tshark(path: Path, *fields: str) -> list[list[str]]:
    lua = path.parent / "o2ibemu.lua"
    lua.write_text(DATA_PORTALS_LUA + O2IB_LUA)
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-X", f"lua_script:{lua}",
                          "-Y", "o2ibemu", "-T", "fields", "-E", "separator=|",
                          "-E", "aggregator=,", *[a for f in fields for a in ("-e", f)]],
                         capture_output=True, check=True, timeout=120)
    return [line.split("|") for line in out.stdout.decode().splitlines()]


def test_o2ibemu_decodes_the_emulated_framing_and_hands_kib_msgs_to_lnet(
        tmp_path: Path) -> None:
    put = LNetHdr(S, C, 12345, 12345, MsgType.PUT, 8, WireHandle(0xABC, 1), match_bits=7,
                  ptl_index=52)
    connreq = kib(M.MsgType.CONNREQ, M.ConnParams(queue_depth=8, max_frags=257,
                                                  max_msg_size=M.IBLND_MSG_SIZE))
    frames = [
        ("c", vwire.pack(Packet(Kind.CM_REQ, (), connreq))),
        ("s", vwire.pack(Packet(Kind.CM_REP, (), kib(M.MsgType.CONNACK, M.ConnParams(
            queue_depth=8, max_frags=257, max_msg_size=M.IBLND_MSG_SIZE))))),
        ("c", vwire.pack(Packet(Kind.CM_RTU))),
        ("c", vwire.pack(Packet(Kind.SEND, (1,), kib(M.MsgType.IMMEDIATE,
                                                     M.Immediate(hdr=put, payload=b"8 bytes!"))))),
        ("s", vwire.pack(Packet(Kind.ACK, (1,)))),
        ("s", vwire.pack(Packet(Kind.NAK, (2, Syndrome.RNR)))),
        ("c", vwire.pack(Packet(Kind.WRITE, (3, 0x101, 0x40), b"\xab" * 100))),
    ]
    path = stream(tmp_path, frames)
    rows = tshark(path, "o2ibemu.kind", "o2ibemu.seq", "o2ibemu.rkey", "o2ibemu.addr",
                  "o2ibemu.syndrome", "lnet.ib.type", "lnet.msg_type", "_ws.col.Info")
    kinds = [r[0] for r in rows]
    assert kinds == ["1", "2", "3", "10", "14,15", "11"]  # REQ split in 2: one frame
    assert rows[3][1] == "1" and rows[3][6] == "1"  # SEND seq 1, an LNet PUT (LNET_MSG_PUT)
    assert int(rows[3][5], 0) == M.MsgType.IMMEDIATE
    assert int(rows[0][5], 0) == M.MsgType.CONNREQ
    assert rows[4][1] == "1,2" and rows[4][4] == "1"  # ACK 1, NAK 2 RNR in one segment
    assert rows[5][1:4] == ["3", "0x00000101", "0x0000000000000040"]
    assert "emulated IB SEND" in rows[3][7] and "emulated IB ACK,NAK" in rows[4][7]
    view = tshark_check(path)
    assert view.lnet_frames == 3 and view.malformed == []  # CONNREQ, CONNACK, IMMEDIATE


def test_o2ibemu_flags_a_bad_frame_length(tmp_path: Path) -> None:
    frames = [("c", vwire.pack(Packet(Kind.CM_RTU)))]
    path = stream(tmp_path, frames, tail=(vwire.MAX_PACKET + 1).to_bytes(4, "little") + b"\x0a")
    view = tshark_check(path)
    assert [m["frame"] for m in view.malformed] == ["5"]  # SYN, SYN-ACK, RTU in 2, this
