"""``testbed capture --summary FILE``: a capture decoded as LNet over socklnd (issue 16 item 3).

Theory of operation: packets are read with scapy (pcap or pcapng, any link type scapy knows,
``-i any`` captures included); TCP segments to or from port 988 are put back into byte
streams per direction (ordered by sequence number from the SYN, retransmitted bytes dropped,
a hole in the capture ends that stream's decoding and is counted). Each stream is cut into its
units with ``faults.lnet_layers.unit_length`` and every unit is dissected by our scapy layers
(``KsockMsg`` dispatches to the acceptor connreq and the ksock hello by magic), so the summary
sees what a socklnd peer sees: the connreq and both hellos of every connection, then every
ksock_msg. It reports messages per type per NID pair (header source -> destination; a routed
message is counted once per hop the capture saw), resends, TCP resets per connection, and what
could not be decoded. A resend is the same message sent again by its originator: a copy on a
connection whose sending address is the header's source NID (so a router's forwarded copy,
which keeps the originator's source NID, is not one) with a type, MD cookie (``wmd``: the
originating node's interface cookie and MD) and match bits already seen; a resend may leave
from another rail to another peer NI, so the NIDs are not part of the key. PUTs without an
ACK carry no cookie and are not counted. A connection over IPv6 speaks socklnd V4 (large NIDs,
``lnet_hdr_nid16``): its streams are cut and decoded by ``pcapsum6.units16`` and counted the
same way (a V4 stream whose start the capture missed is named, not resynchronised).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.utils import PcapReader

from faults.lnet_layers import (
    MSG_TYPES,
    KsockHello,
    KsockMsg,
    LNetAcceptorConnreq,
    LNetHdr,
    unit_length,
)
from nodes.echo import clip_words, shown_path
from nodes.lnd.wire import (
    KSOCK_MSG_LNET,
    KSOCK_MSG_NOOP,
    LNET_ACCEPTOR_PORT,
    LNET_PROTO_ACCEPTOR_MAGIC,
    LNET_PROTO_MAGIC,
)
from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.nid import NID
from testbed.observe.pcapsum6 import units16

_NO_COOKIE = 0xFFFF_FFFF_FFFF_FFFF
#: longest stream prefix searched for a message boundary when the capture missed the start
RESYNC_WINDOW = 1 << 20


class CaptureError(Exception):
    """The file cannot be read as a capture; one line for the user."""


def _nid(v: int) -> str:
    return str(NID.from_nid4(int(v)))


@dataclass
class _Flow:
    """One direction of one TCP connection."""

    isn: int | None = None
    segments: list[tuple[int, float, bytes]] = field(default_factory=list)
    rst: int = 0
    first: float = 0.0
    v6: bool = False  # over IPv6: socklnd V4 (testbed/observe/pcapsum6.py)


@dataclass
class Summary:
    """What a capture shows (``render()`` for people, ``as_dict()`` for scripts and tests)."""

    packets: int = 0
    lnet_segments: int = 0
    messages: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # type, src, dst
    portals: Counter[tuple[str, int]] = field(default_factory=Counter)  # PUT/GET, portal
    noops: int = 0
    bytes: int = 0
    resends: list[dict[str, Any]] = field(default_factory=list)
    resets: list[dict[str, Any]] = field(default_factory=list)
    connections: list[dict[str, Any]] = field(default_factory=list)
    undecoded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"packets": self.packets, "lnet_segments": self.lnet_segments,
                "messages": [{"type": t, "src": s, "dst": d, "count": n}
                             for (t, s, d), n in sorted(self.messages.items())],
                "portals": [{"type": t, "portal": p, "count": n}
                            for (t, p), n in sorted(self.portals.items())],
                "noops": self.noops, "payload_bytes": self.bytes, "resends": self.resends,
                "resets": self.resets, "connections": self.connections,
                "undecoded": self.undecoded}

    def render(self) -> str:
        out = [f"{self.packets} packets, {self.lnet_segments} TCP segments on port "
               f"{LNET_ACCEPTOR_PORT}, {sum(self.messages.values())} LNet messages "
               f"({self.bytes} payload bytes), {self.noops} NOOPs"]
        out.append("messages per type per NID pair (header src -> dst):")
        out += [f"  {t:<6} {s:>22} -> {d:<22} {n}"
                for (t, s, d), n in sorted(self.messages.items())]
        out.append("PUT/GET per portal: " + ", ".join(
            f"{t} {p}: {n}" for (t, p), n in sorted(self.portals.items())))
        out.append(f"connections: {len(self.connections)}")
        for c in self.connections:
            out.append(f"  {c['client']} -> {c['server']}  connreq {c.get('connreq_nid', '?')}"
                       f"  hello {c.get('hello', '?')}  reply {c.get('hello_reply', '?')}")
        out.append(f"resends: {len(self.resends)}")
        out += [f"  {r['type']} {r['src']} -> {r['dst']} seen {r['times']} times on "
                f"{', '.join(r['paths'])}" for r in self.resends[:50]]
        out.append(f"connection resets: {len(self.resets)}")
        out += [f"  {r['from']} -> {r['to']} RST x{r['count']}" for r in self.resets]
        if self.undecoded:
            out.append(f"not decoded: {len(self.undecoded)}")
            out += [f"  {u}" for u in self.undecoded[:20]]
        return "\n".join(out) + "\n"


def _stream(flow: _Flow, name: str, problems: list[str]) -> tuple[bytes, list[int], list[float]]:
    """The flow's bytes in order, with the offset and time at which each segment starts."""
    segs = sorted(flow.segments, key=lambda s: ((s[0] - (flow.isn or 0)) & 0xFFFF_FFFF, s[1]))
    if not segs:
        return b"", [], []
    base = flow.isn if flow.isn is not None else segs[0][0]
    data = bytearray()
    starts: list[int] = []
    times: list[float] = []
    for seq, t, payload in segs:
        rel = (seq - base) & 0xFFFF_FFFF
        if rel > len(data):
            problems.append(f"{name}: {rel - len(data)} bytes missing from the capture at "
                            f"stream offset {len(data)}; the rest of this stream is skipped")
            break
        new = payload[len(data) - rel:]
        if new:
            starts.append(len(data))
            times.append(t)
            data += new
    return bytes(data), starts, times


def _plausible(data: bytes, off: int) -> bool:
    """Does a ksock_msg (or connreq/hello) plausibly start at ``off``?"""
    head = int.from_bytes(data[off:off + 4], "little")
    if head in (LNET_PROTO_ACCEPTOR_MAGIC, LNET_PROTO_MAGIC, KSOCK_MSG_NOOP):
        return True
    # KSOCK_MSG_LNET, then an LNet type at ksock_msg_hdr (24) + 24 and a sane payload length
    return head == KSOCK_MSG_LNET and len(data) >= off + 56 \
        and int.from_bytes(data[off + 48:off + 52], "little") in MSG_TYPES \
        and int.from_bytes(data[off + 52:off + 56], "little") <= LNET_MTU


def _resync(data: bytes) -> int | None:
    """Offset of the first plausible unit in a stream whose start was not captured."""
    for off in range(0, min(len(data), RESYNC_WINDOW)):
        if _plausible(data, off):
            return off
    return None


class _Decoder:
    def __init__(self) -> None:
        self.sum = Summary()
        self.flows: dict[tuple[str, int, str, int], _Flow] = {}
        self.seen: dict[tuple[Any, ...], dict[str, Any]] = {}

    def packet(self, pkt: Any, t: float) -> None:
        self.sum.packets += 1
        l3 = IPv6 if IPv6 in pkt else IP
        if TCP not in pkt or l3 not in pkt:
            return
        tcp = pkt[TCP]
        if LNET_ACCEPTOR_PORT not in (tcp.sport, tcp.dport):
            return
        self.sum.lnet_segments += 1
        key = (pkt[l3].src, int(tcp.sport), pkt[l3].dst, int(tcp.dport))
        flow = self.flows.get(key)
        if flow is None:
            flow = self.flows[key] = _Flow(first=t, v6=l3 is IPv6)
        flags = int(tcp.flags)
        if flags & 0x02:  # SYN
            flow.isn = (int(tcp.seq) + 1) & 0xFFFF_FFFF
        if flags & 0x04:  # RST
            flow.rst += 1
        payload = bytes(tcp.payload)
        if payload:
            flow.segments.append((int(tcp.seq), t, payload))

    def finish(self) -> Summary:
        conns: dict[tuple[str, int, str, int], dict[str, Any]] = {}
        for key, flow in sorted(self.flows.items(), key=lambda kv: kv[1].first):
            src, sport, dst, dport = key
            name = f"{src}:{sport} -> {dst}:{dport}"
            client = dport == LNET_ACCEPTOR_PORT
            ckey = (src, sport, dst, dport) if client else (dst, dport, src, sport)
            conn = conns.setdefault(ckey, {"client": f"{ckey[0]}:{ckey[1]}",
                                           "server": f"{ckey[2]}:{ckey[3]}"})
            if flow.rst:
                self.sum.resets.append({"from": f"{src}:{sport}", "to": f"{dst}:{dport}",
                                        "count": flow.rst})
            data, starts, times = _stream(flow, name, self.sum.undecoded)
            if flow.v6:
                self._units16(data, starts, times, (name, src), conn, client, flow.isn is None)
            else:
                self._units(data, starts, times, (name, src), conn, client, flow.isn is None)
        self.sum.connections = list(conns.values())
        self.sum.resends = [r for r in self.seen.values() if r["times"] > 1]
        return self.sum

    def _units(self, data: bytes, starts: list[int], times: list[float], where: tuple[str, str],
               conn: dict[str, Any], client: bool, unsynced: bool) -> None:
        name = where[0]
        pos = 0
        if unsynced and data and not _plausible(data, 0):
            found = _resync(data)
            if found is None:
                self.sum.undecoded.append(f"{name}: capture started mid-stream, no message "
                                          "boundary found")
                return
            pos = found
        while pos < len(data):
            need = unit_length(data[pos:pos + 128])
            if need is None or pos + need > len(data):
                break  # the capture ended inside this unit
            unit = data[pos:pos + need]
            t = times[max(0, bisect.bisect_right(starts, pos) - 1)] if times else 0.0
            try:
                self._unit(KsockMsg(unit), t, where, conn, client)
            except Exception as exc:  # scapy raises many types on bad bytes
                self.sum.undecoded.append(f"{name}: offset {pos}: {type(exc).__name__}: {exc}")
                return
            pos += need

    def _unit(self, pkt: Any, t: float, where: tuple[str, str], conn: dict[str, Any],
              client: bool) -> None:
        if isinstance(pkt, LNetAcceptorConnreq):
            conn["connreq_nid"] = _nid(pkt.nid)
            if KsockHello in pkt:
                self._hello(pkt[KsockHello], conn, client)
            return
        if isinstance(pkt, KsockHello):
            self._hello(pkt, conn, client)
            return
        if pkt.type == KSOCK_MSG_NOOP:
            self.sum.noops += 1
            return
        hdr = pkt[LNetHdr]
        self._message(hdr, _nid(hdr.src_nid), _nid(hdr.dest_nid), t, where)

    def _units16(self, data: bytes, starts: list[int], times: list[float],
                 where: tuple[str, str], conn: dict[str, Any], client: bool,
                 unsynced: bool) -> None:
        """A socklnd V4 stream (IPv6): the same accounting as V3's, units from
        ``pcapsum6.units16``."""
        if unsynced:
            self.sum.undecoded.append(f"{where[0]}: capture started mid-stream (socklnd V4: "
                                      "not resynchronised)")
            return
        try:
            for pos, _n, u in units16(data):
                t = times[max(0, bisect.bisect_right(starts, pos) - 1)] if times else 0.0
                if u.kind == "connreq":
                    conn["connreq_nid"] = u.nid
                elif u.hello is not None:
                    h = u.hello
                    conn["hello" if client else "hello_reply"] = (
                        f"v{h.version} {h.src_nid} -> {h.dst_nid} ctype {h.ctype} "
                        f"incarnation {h.src_incarnation:#x}")
                elif u.hdr is not None:
                    self._message(u.hdr, u.hdr.src_nid, u.hdr.dest_nid, t, where)
                else:
                    self.sum.noops += 1
        except (ValueError, WireProtocolError) as exc:
            self.sum.undecoded.append(f"{where[0]}: {exc}")

    def _message(self, hdr: Any, src: str, dst: str, t: float, where: tuple[str, str]) -> None:
        """One LNet message (V3 scapy layer or V4 ``Hdr16``): counted, resends found."""
        mtype = MSG_TYPES.get(int(hdr.type), str(hdr.type))
        self.sum.messages[(mtype, src, dst)] += 1
        self.sum.bytes += int(hdr.payload_length or 0)
        if mtype in ("PUT", "GET"):
            self.sum.portals[(mtype, int(hdr.ptl_index))] += 1
        cookie = getattr(hdr, "wmd_object", None)
        if cookie is None or cookie == _NO_COOKIE or src.split("@")[0] != where[1]:
            return  # no cookie, or a router's forwarded copy
        key = (mtype, hdr.wmd_interface, cookie, getattr(hdr, "match_bits", 0))
        rec = self.seen.get(key)
        if rec is None:
            self.seen[key] = {"type": mtype, "src": src, "dst": dst, "times": 1, "t": [t],
                              "paths": [where[0]]}
        else:
            rec["times"] += 1
            rec["t"].append(t)
            if where[0] not in rec["paths"]:
                rec["paths"].append(where[0])

    @staticmethod
    def _hello(h: Any, conn: dict[str, Any], client: bool) -> None:
        text = (f"v{h.version} {_nid(h.src_nid)} -> {_nid(h.dst_nid)} ctype {h.ctype} "
                f"incarnation {h.src_incarnation:#x}")
        conn["hello" if client else "hello_reply"] = text


def summarize(path: str | Path) -> Summary:
    """Decode the capture at ``path``.

    Raises:
        CaptureError: the file is missing or is not a pcap/pcapng capture.
    """
    dec = _Decoder()
    try:
        with PcapReader(str(path)) as reader:
            for pkt in reader:
                dec.packet(pkt, float(pkt.time))
    except FileNotFoundError:
        raise CaptureError(f"no capture file {shown_path(path)}") from None
    except (OSError, ValueError, EOFError) as exc:
        raise CaptureError(f"{shown_path(path)}: not a pcap/pcapng capture "
                           f"({getattr(exc, 'strerror', None) or clip_words(str(exc))})") from None
    except Exception as exc:  # scapy reports a bad file with its own exception types
        raise CaptureError(f"{path}: cannot read the capture ({type(exc).__name__}: "
                           f"{exc})") from None
    return dec.finish()
