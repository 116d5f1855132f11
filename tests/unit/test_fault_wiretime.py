"""faults/wiretime.py: the two-point packet timer a delay fault's test reads (issue 32: the
delay measured on the packets). Pure parts: which segments it keys, how the two points pair;
the kernel part (TEE clone, AF_PACKET stamps) runs in tests/lutf/suite_faults (delay)."""

from __future__ import annotations

import struct

from faults import wiretime


def _tcp(dst: str, payload: bytes, seq: int = 7, dport: int = 988) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, dport, seq, 0, 5 << 4, 0x18, 65535, 0, 0)
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 1, 0, 64, 6, 0,
                     bytes([10, 10, 0, 1]), bytes(int(x) for x in dst.split(".")))
    return ip + tcp + payload


def test_only_data_segments_to_the_destination_are_keyed() -> None:
    seg = _tcp("10.10.0.2", b"x" * 100, seq=42)
    assert wiretime.segment_key(seg, "10.10.0.2", "any") == ("10.10.0.1", "10.10.0.2", 40000,
                                                             988, 42)
    assert wiretime.segment_key(seg, "10.10.0.3", "any") is None  # another peer
    assert wiretime.segment_key(_tcp("10.10.0.2", b""), "10.10.0.2", "any") is None  # an ACK
    assert wiretime.segment_key(seg, "10.10.0.2", "GET") is None  # not an LNet GET
    assert wiretime.segment_key(b"\x45\x00", "10.10.0.2", "any") is None  # truncated


def test_pairs_by_segment_and_counts_the_unpaired() -> None:
    tee = {("a", 1): 1_000_000, ("a", 2): 2_000_000, ("a", 3): 3_000_000}
    wire = {("a", 1): 22_000_000, ("a", 2): 23_500_000, ("a", 4): 9}
    assert wiretime.pair(tee, wire) == {"added_us": [21_000, 21_500], "tee_only": 1,
                                        "wire_only": 1}


def test_the_clone_is_marked_where_it_is_not_rerouted() -> None:
    """The clone's mark (the interposer's own, so no fault queues it) is set in ``raw``: in
    ``mangle`` OUTPUT a changed mark re-routes the clone by its destination, to the peer."""
    mark, tee = wiretime.tee_rules("-I", "10.10.0.2", "eth0")
    assert mark[3:5] == ["raw", "-I"] and "-o" in mark and wiretime.TAP in mark
    assert str(wiretime.MARK) in mark
    assert tee[3] == "mangle" and tee[tee.index("-o") + 1] == "eth0"
    assert tee[tee.index("--oif") + 1] == wiretime.TAP
