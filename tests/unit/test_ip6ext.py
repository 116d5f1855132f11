"""IPv6 extension headers on the interposer's path (issue 26 item 8, faults on large NIDs):
packets forged with scapy's ``IPv6ExtHdr*`` layers carry a socklnd V4 PUT behind hop-by-hop,
routing and destination options headers; ``faults/ip6ext.py`` walks the chain to the TCP
header at the offset scapy's own dissection finds, the interposer classifies the segment and
its stream tracker reads the PUT, a fragment is counted (``v6_fragments``) and not classified,
a hostile chain ends in ``v6_unclassified``, and ``corrupt``'s checksum uses a routing
header's final destination (RFC 8200 §8.1) as scapy does. ``rst`` resets with an established
segment only (``faults.interposer.resettable``)."""

from __future__ import annotations

from typing import Any

import pytest
from scapy.layers.inet import TCP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.packet import Raw

from faults import ip6ext
from faults.csum import break_l4_checksum, fix_l4_checksum
from faults.interposer import Interposer, resettable
from faults.interposer_spec import InterposerSpec
from faults.prefilter import classify
from faults.spec import parse_match, parse_params
from nodes.lnd import wire6
from nodes.lnet.hdr import LNetHdr, MsgType, WireHandle
from nodes.lnet.nid import NID
from tests.unit.test_interposer_streams import _Queued

A = NID.parse("2001:db8:16::1@tcp")
B = NID.parse("2001:db8:16::2@tcp")
HOPS = ["2001:db8:99::1", "2001:db8:99::2"]

CHAINS: dict[str, list[Any]] = {
    "hop-by-hop": [IPv6ExtHdrHopByHop()],
    "routing": [IPv6ExtHdrRouting(addresses=HOPS, segleft=0)],
    "destination options": [IPv6ExtHdrDestOpt()],
    "all three": [IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt(),
                  IPv6ExtHdrRouting(addresses=HOPS, segleft=0), IPv6ExtHdrDestOpt()],
}


def _put(size: int = 64) -> bytes:
    hdr = LNetHdr(dest_nid=B, src_nid=A, dest_pid=12345, src_pid=12345, type=MsgType.PUT,
                  payload_length=size, wmd=WireHandle(1, 2), match_bits=9, ptl_index=52,
                  offset=0)
    return wire6.pack_lnet_head(hdr) + bytes(size)


def _segment(exts: list[Any], payload: bytes = b"", flags: str = "PA", seq: int = 1000,
             dst: str = "2001:db8:16::2") -> bytes:
    pkt: Any = IPv6(src="2001:db8:16::1", dst=dst)
    for ext in exts:
        pkt = pkt / ext.copy()
    return bytes(pkt / TCP(sport=1023, dport=988, flags=flags, seq=seq, ack=5) / Raw(payload))


def _hostile() -> dict[str, bytes]:
    """Chains no walk may read past: too long, truncated (inside a header, inside the fixed
    header), ESP, "no next header"."""
    routed = _segment(CHAINS["routing"], b"x")
    esp = bytearray(_segment([], b"x" * 40))
    esp[6] = ip6ext.ESP
    nothing = bytearray(_segment([IPv6ExtHdrDestOpt()], b""))
    nothing[40] = ip6ext.NO_NEXT
    return {"long": _segment([IPv6ExtHdrDestOpt() for _ in range(ip6ext.MAX_EXT + 1)], b"x"),
            "truncated": routed[:50], "esp": bytes(esp), "no next": bytes(nothing),
            "short": routed[:39]}


def _interposer(kind: str, match: dict[str, Any], **params: Any) -> Interposer:
    return Interposer(InterposerSpec(kind=kind, params=parse_params(kind, params), seed=1,
                                     match=parse_match(match), queue=1,
                                     counters="/nonexistent"))


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_is_walked_to_the_tcp_header_where_scapy_finds_it(name: str) -> None:
    raw = _segment(CHAINS[name], _put())
    chain = ip6ext.walk(raw)
    assert isinstance(chain, ip6ext.Chain), chain
    tcp_at = len(raw) - len(IPv6(raw)[TCP])
    assert (chain.proto, chain.off, chain.count) == (6, tcp_at, len(CHAINS[name]))
    pkt = classify(raw)  # the walk inside the one classifier, offsets into the packet as is
    assert pkt is not None and pkt.unclassified is None
    assert (pkt.proto, pkt.tcp_off, pkt.l4_off) == ("tcp", tcp_at, tcp_at + 20)
    assert (pkt.sport, pkt.dport, pkt.seq) == (1023, 988, 1000)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_classify_peeks_the_put_behind_the_chain(name: str) -> None:
    """``prefilter.classify`` itself reads the V4 PUT behind any chain: its type, NIDs and
    portal, as on the same segment without extension headers."""
    bare, behind = classify(_segment([], _put())), classify(_segment(CHAINS[name], _put()))
    assert bare is not None and behind is not None
    for pkt in (bare, behind):
        assert (pkt.lnet_type, pkt.portal) == ("PUT", 52)
    assert (behind.src_nid, behind.dst_nid) == (bare.src_nid, bare.dst_nid)
    assert behind.src_nid is not None and behind.src_nid != behind.dst_nid


def test_classify_hostile_chains_come_back_unclassified() -> None:
    """Hostile input to the classifier directly: truncated chains, a chain longer than
    MAX_EXT, ESP, "no next header", a fragment: one ``Pkt`` naming why (the interposer's
    counter) with nothing past the fixed header read; a packet shorter than the fixed header
    is None. Then 3,000 seeded random chains: never an exception, always bounded."""
    import random

    frag = bytes(IPv6(src="2001:db8:16::1", dst="2001:db8:16::2") / IPv6ExtHdrFragment(m=1)
                 / TCP(sport=1023, dport=988) / Raw(_put()))
    hostile = _hostile()
    assert classify(hostile.pop("short")) is None
    for name, raw in [*hostile.items(), ("fragment", frag)]:
        pkt = classify(raw)
        why = ip6ext.FRAGMENTED if name == "fragment" else ip6ext.UNREADABLE
        assert pkt is not None and pkt.unclassified == why, (name, pkt)
        assert (pkt.sport, pkt.dport, pkt.lnet_type) == (0, 0, None)
    rng = random.Random(26)
    heads = sorted(ip6ext.EXT_HEADERS | {6, 17, 58, ip6ext.NO_NEXT})
    seen: set[str] = set()
    for _ in range(3000):
        body = bytearray(rng.randbytes(rng.randrange(0, 200)))
        for k in range(0, len(body), 8):  # chains of extension headers, lengths at random
            body[k] = rng.choice(heads)
        raw = bytes(_segment([])[:6]) + bytes((rng.choice(heads),)) + bytes(33) + bytes(body)
        pkt, chain = classify(raw), ip6ext.walk(raw)
        assert pkt is not None
        if raw[6] not in ip6ext.EXT_HEADERS:  # no chain: the fixed header names the protocol
            assert pkt.unclassified is None and pkt.l4_off >= 40
        elif isinstance(chain, str):
            assert pkt.unclassified == chain
        else:
            assert pkt.unclassified is None and pkt.l4_off >= chain.off >= 48
            seen.add(pkt.proto)
    assert {"tcp", "udp"} <= seen, seen  # the fuzz reached upper-layer headers behind chains


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_put_behind_extension_headers_is_classified_and_matched(name: str) -> None:
    """A ``type: PUT`` rule (stream tracker on: socklnd V4) drops the PUT segment with
    extension headers as it drops the same segment without them."""
    for exts in ([], CHAINS[name]):
        ip = _interposer("loss", {"type": "PUT"}, rate=1.0)
        q = _Queued(_segment(exts, _put()))
        ip.on_packet(q)
        assert q.verdict == "drop", (name, exts, ip.snapshot())
        assert ip.snapshot()["messages_matched"] == 1


def test_fragment_is_counted_and_not_classified() -> None:
    ip = _interposer("loss", {"type": "PUT"}, rate=1.0)
    whole = IPv6(src="2001:db8:16::1", dst="2001:db8:16::2") / IPv6ExtHdrFragment(
        id=7, m=1, offset=0) / TCP(sport=1023, dport=988, flags="PA") / Raw(_put())
    q = _Queued(bytes(whole))
    ip.on_packet(q)
    snap = ip.snapshot()
    assert q.verdict == "accept" and snap["v6_fragments"] == 1 and snap["matched"] == 0, snap
    assert ip6ext.walk(bytes(whole)) == ip6ext.FRAGMENTED


def test_hostile_chains_end_in_a_reason() -> None:
    """Truncated headers, a chain longer than MAX_EXT, ESP, "no next header": bounded walks,
    counted ``v6_unclassified`` by the interposer, the packet let through."""
    hostile = _hostile()
    for raw in hostile.values():
        assert ip6ext.walk(raw) == ip6ext.UNREADABLE
    ip = _interposer("loss", {"proto": "tcp"}, rate=1.0)
    q = _Queued(hostile["long"])
    ip.on_packet(q)
    assert q.verdict == "accept" and ip.snapshot()["v6_unclassified"] == 1
    assert ip6ext.walk(_segment([IPv6ExtHdrDestOpt() for _ in range(ip6ext.MAX_EXT)],
                                b"x")) != ip6ext.UNREADABLE


def _csum_ok(raw: bytes) -> bool:
    pkt = IPv6(raw)
    sent = pkt[TCP].chksum
    del pkt[TCP].chksum
    return bool(IPv6(bytes(pkt))[TCP].chksum == sent)


@pytest.mark.parametrize("segleft", [0, 2])
def test_checksum_behind_a_routing_header_uses_the_final_destination(segleft: int) -> None:
    """RFC 8200 §8.1: with segments left, the pseudo-header's destination is the routing
    header's last address (scapy's ``in6_chksum`` computes it so)."""
    exts = [IPv6ExtHdrHopByHop(), IPv6ExtHdrRouting(addresses=HOPS, segleft=segleft)]
    raw = _segment(exts, b"payload " * 5)
    assert _csum_ok(raw)
    flipped = raw[:-1] + b"!"
    assert not _csum_ok(flipped)
    assert _csum_ok(fix_l4_checksum(flipped))
    assert not _csum_ok(break_l4_checksum(fix_l4_checksum(flipped)))
    frag = bytes(IPv6(dst="2001:db8::2") / IPv6ExtHdrFragment(m=1) / TCP() / Raw(b"x"))
    assert fix_l4_checksum(frag) == frag


def test_rst_is_forged_from_an_established_segment_not_a_syn() -> None:
    """Regression of test_rst_on_large_nids_resets_both_ends_and_socklnd_reconnects (Mininet,
    2026-12-03): a SYN racing the fault (Multi-Rail connecting from another NI) must not use
    up ``count: 1``; the next established segment is the one reset (and dropped)."""
    ip = _interposer("rst", {"proto": "tcp"}, count=1)
    forged: list[bytes] = []
    ip._inject = lambda data, v6=False: forged.append(data)  # type: ignore[method-assign]
    syn, fin = _Queued(_segment([], flags="S", seq=77)), _Queued(_segment([], flags="FA"))
    data = _Queued(_segment([], _put(), seq=4242))
    for q in (syn, fin, data):
        ip.on_packet(q)
    assert (syn.verdict, fin.verdict, data.verdict) == ("accept", "accept", "drop")
    assert ip.snapshot()["rst"] == 1
    assert [IPv6(f)[TCP].seq for f in forged] == [4242, 5]
    assert all(IPv6(f)[TCP].flags == "R" for f in forged)
    assert not resettable(classify(_segment([], flags="RA")))


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_capture_side_reads_the_payload_behind_the_chain(name: str) -> None:
    """``testbed capture --summary`` (testbed/observe/pcapsum.py) takes ``bytes(tcp.payload)``
    of scapy's dissection with the LNet layers bound (faults/lnet_layers.py, on TCP port
    988): behind any chain it is the V4 stream's bytes, as ``ip6ext.walk`` finds them."""
    import faults.lnet_layers  # noqa: F401  (binds KsockMsg on port 988)

    raw = _segment(CHAINS[name], _put())
    chain = ip6ext.walk(raw)
    assert isinstance(chain, ip6ext.Chain)
    tcp = IPv6(raw)[TCP]
    assert bytes(tcp.payload) == _put() == raw[chain.off + 20:]
