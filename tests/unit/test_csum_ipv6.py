"""``corrupt``'s checksums on IPv6 (faults/csum.py, RFC 8200 §8.1 pseudo-header): ``fix``
gives a segment scapy verifies, ``bad`` one it rejects; IPv4 unchanged."""

from __future__ import annotations

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6

from faults.csum import break_l4_checksum, fix_l4_checksum


def _ok(raw: bytes, l3: type) -> bool:
    pkt = l3(raw)
    sent = pkt[TCP].chksum
    del pkt[TCP].chksum
    return bool(l3(bytes(pkt))[TCP].chksum == sent)


def test_fix_and_break_on_ipv6_and_ipv4() -> None:
    for l3, src, dst in ((IPv6, "2001:db8::1", "2001:db8::2"), (IP, "10.0.0.1", "10.0.0.2")):
        raw = bytes(l3(src=src, dst=dst) / TCP(sport=1023, dport=988) / (b"x" * 33))
        flipped = raw[:-1] + b"y"
        assert not _ok(flipped, l3)
        fixed = fix_l4_checksum(flipped)
        assert _ok(fixed, l3)
        assert not _ok(break_l4_checksum(fixed), l3)
