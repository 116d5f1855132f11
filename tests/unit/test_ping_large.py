"""The ping buffer's large-address entries (api-ni.c ``lnet_ping_target_install_locked``,
peer.c ``ping_iter_next`` and the PRIMARY_LARGE primary; issue 26 item 8)."""

import struct

import pytest

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.nid import NID
from nodes.lnet.ping import (
    LNET_PING_FEAT_BASE,
    LNET_PING_FEAT_LARGE_ADDR,
    LNET_PING_FEAT_NI_STATUS,
    LNET_PING_FEAT_PRIMARY_LARGE,
    PingInfo,
    ping_info_size,
)

UP = 0x15AAC0DE
FEAT = LNET_PING_FEAT_BASE | LNET_PING_FEAT_NI_STATUS
V6A, V6B = NID.parse("2001:db8:6::2@tcp"), NID.parse("2001:db8:7::2@tcp1")
V4 = NID.parse("10.40.0.1@tcp")


def test_ipv6_only_buffer_layout() -> None:
    """One fixed entry (0@lo, its msg_size the total), then one 24-byte large entry:
    status, nid_size 12, type 2, number (big-endian), 16 address bytes."""
    data = PingInfo(FEAT, 12345, 7, ((V6A, UP),)).pack()
    magic, features, pid, nnis = struct.unpack_from("<IIII", data)
    assert magic == 0x70696E67
    assert features == FEAT | LNET_PING_FEAT_LARGE_ADDR | LNET_PING_FEAT_PRIMARY_LARGE
    assert nnis == 1 and pid == 12345
    lo_nid, seq, total = struct.unpack_from("<QII", data, 16)
    assert (lo_nid, seq, total) == (0x0009_0000_0000_0000, 7, len(data)) and total == 56
    status, size, lnd = struct.unpack_from("<I", data, 32)[0], data[36], data[37]
    num = struct.unpack_from(">H", data, 38)[0]
    assert (status, size, lnd, num) == (UP, 12, 2, 0)
    assert data[40:56] == bytes.fromhex("20010db8000600000000000000000002")


def test_mixed_buffer_round_trip_and_primary() -> None:
    """A router with an IPv4 and an IPv6 NI: the nid4 one in the fixed entries, the large one
    after; PRIMARY_LARGE only when the first NI is large, and then it comes back first."""
    v4_first = PingInfo(FEAT, 1, 2, ((V4, UP), (V6A, UP)))
    back = PingInfo.unpack(v4_first.pack())
    assert back.nis == ((V4, UP), (V6A, UP))
    assert back.features & LNET_PING_FEAT_LARGE_ADDR
    assert not back.features & LNET_PING_FEAT_PRIMARY_LARGE
    v6_first = PingInfo(FEAT, 1, 2, ((V6A, UP), (V4, UP), (V6B, 0xDEADFACE)))
    back = PingInfo.unpack(v6_first.pack())
    assert back.features & LNET_PING_FEAT_PRIMARY_LARGE
    assert back.nis == ((V6A, UP), (V4, UP), (V6B, 0xDEADFACE))


def test_nid4_only_buffer_unchanged() -> None:
    """No large NI: no LARGE_ADDR, entry 0's msg_size 0 (what every existing node sends)."""
    data = PingInfo(FEAT, 1, 2, ((V4, UP),)).pack()
    assert struct.unpack_from("<I", data, 4)[0] == FEAT
    assert struct.unpack_from("<QII", data, 16)[2] == 0 and len(data) == 48


def test_truncated_large_buffer_asks_for_its_size() -> None:
    """``lnet_ping_info_size`` is entry 0's msg_size with LARGE_ADDR: a reply cut short is
    refused and the next ping asks for the whole size."""
    data = PingInfo(FEAT, 1, 2, ((V6A, UP), (V6B, UP))).pack()
    with pytest.raises(WireProtocolError, match="truncated"):
        PingInfo.unpack(data[:60])
    assert ping_info_size(data[:60]) == len(data) == 80


def test_unknown_address_size_is_skipped() -> None:
    """``ping_iter_next`` steps over an entry whose NID it cannot hold (an 8-byte address)."""
    good = PingInfo(FEAT, 1, 2, ((V6A, UP),)).pack()
    odd = struct.pack("<I", UP) + bytes((4, 2)) + struct.pack(">H", 0) + bytes(8)
    total = len(good) + len(odd)
    data = bytearray(good[:16] + struct.pack("<QII", 0x0009_0000_0000_0000, 2, total)
                     + odd + good[32:])
    assert PingInfo.unpack(bytes(data)).nis == ((V6A, UP),)
