"""lnet_selftest's pure parts: the srpc_msg format, brw patterns, lst's NID ranges, getopt and
the stat arithmetic (issue 13 item 1; lnet/selftest/rpc.h, brw_test.c, lnet/utils/lst.c)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.selftest import bulk, wire
from nodes.selftest.getopt import Opt, atoi, getopt_long, strtol
from nodes.selftest.lststat import _cal, _Result, f32
from nodes.selftest.nidlist import expand, parse_nids
from nodes.selftest.wire import MsgType


def test_srpc_msg_is_160_bytes_with_magic_version_type_and_features() -> None:
    """``sizeof(struct srpc_msg)`` is 160 (24-byte header + 136-byte union, the stat reply
    being the largest member); the header is magic, version, type, 2 reserved, features."""
    raw = wire.pack(MsgType.MKSN_REQST, 1, rpyid=0x1122, sid_nid=7, sid_stamp=-1, force=1,
                    name="s")
    assert len(raw) == wire.SRPC_MSG_SIZE == 160
    assert struct.unpack_from("<6I", raw) == (0xEEB0F00D, 1, 0, 0, 0, 1)
    assert struct.unpack_from("<QQqI", raw, 24) == (0x1122, 7, -1, 1)
    assert raw[52:84] == b"s" + bytes(31) and raw[84:] == bytes(76)
    msg = wire.unpack(raw)
    assert (msg.type, msg.version, msg.feats, msg.swapped) == (MsgType.MKSN_REQST, 1, 1, False)
    assert wire.cstr(msg.body["name"]) == "s" and msg.body["sid_stamp"] == -1


def test_a_big_endian_peer_is_byte_swapped_as_srpc_unpack_msg_hdr_does() -> None:
    raw = struct.pack(">6I", 0xEEB0F00D, 1, MsgType.PING_REPLY, 0, 0, 1) + \
        struct.pack(">III", 0, 0xBABEFACE, 9) + bytes(124)
    msg = wire.unpack(raw)
    assert msg.swapped and msg.type == MsgType.PING_REPLY
    assert msg.body == {"status": 0, "magic": 0xBABEFACE, "seq": 9}


@pytest.mark.parametrize(("raw", "why"), [
    (b"", "message of 0 bytes"),
    (bytes(159), "message of 159 bytes"),
    (bytes(160), "bad magic"),
    (struct.pack("<6I", 0xEEB0F00D, 1, 99, 0, 0, 1) + bytes(136), "unknown message type 99"),
])
def test_bad_messages_raise_only_srpc_wire_error(raw: bytes, why: str) -> None:
    with pytest.raises(wire.SrpcWireError, match=why):
        wire.unpack(raw)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_srpc_wire_error(raw: bytes) -> None:
    with contextlib.suppress(wire.SrpcWireError):
        wire.unpack(raw)


def test_expected_type_is_checked() -> None:
    raw = wire.pack(MsgType.BRW_REQST, rw=1, len=8, flags=1)
    with pytest.raises(wire.SrpcWireError, match="BRW_REQST, PING_REQST expected"):
        wire.unpack(raw, expect=MsgType.PING_REQST)


def test_bulk_union_v0_is_pages_and_v1_is_bytes() -> None:
    assert wire.unpack_bulk(wire.pack_bulk_v1(2, 3, 12345, 8), 1) == (2, 3, 12345, 8)
    assert wire.unpack_bulk(wire.pack_bulk_v0(1, 3, 2), 0) == (1, 2, 3 * 4096, 0)
    ids = wire.pack_ids([1, 2], 12345)
    assert len(ids) == 24 and wire.unpack_ids(ids, 2) == [(1, 12345), (2, 12345)]
    with pytest.raises(wire.SrpcWireError):
        wire.unpack_ids(ids, 3)


def test_full_pattern_catches_any_flipped_bit_and_names_the_word() -> None:
    data = bytearray(bulk.pattern(1 << 20, 0, bulk.CHECK_FULL, bulk.BRW_MAGIC))
    assert bulk.verify(bytes(data), 0, bulk.CHECK_FULL) is None
    assert bulk.verify(memoryview(data).toreadonly(), 0, bulk.CHECK_FULL) is None
    data[777_777] ^= 0x10
    bad = bulk.verify(bytes(data), 0, bulk.CHECK_FULL)
    assert bad is not None and bad != bulk.BRW_MAGIC


def test_simple_pattern_checks_the_first_and_last_word_of_each_page_only() -> None:
    """``brw_fill_page`` simple: magic at both ends of every page segment; a flip in the
    middle of a page passes (as in brw_test.c), one at a page edge does not."""
    data = bytearray(bulk.pattern(3 * 4096, 0, bulk.CHECK_SIMPLE, bulk.BRW_MAGIC))
    assert data[8:4088] == bytes(4080)
    data[100] = 0xFF
    assert bulk.verify(bytes(data), 0, bulk.CHECK_SIMPLE) is None
    data[4096 + 4095] ^= 1  # last byte of page 2
    assert bulk.verify(bytes(data), 0, bulk.CHECK_SIMPLE) is not None
    # with an offset, the first segment is shorter: its end moves
    assert bulk.segments(8, 8200) == [(0, 4088), (4088, 4096), (8184, 16)]
    assert bulk.valid_layout(8, 8200) and not bulk.valid_layout(0, 1001)


def test_none_and_discard_check_nothing() -> None:
    assert bulk.verify(b"\xff" * 64, 0, bulk.CHECK_NONE) is None
    assert bulk.verify(b"\xff" * 64, 0, bulk.CHECK_DISCARD) is None


@pytest.mark.parametrize(("text", "words"), [
    ("10.0.0.1@tcp", ["10.0.0.1@tcp"]),
    ("10.0.0.[1-3]@tcp", ["10.0.0.1@tcp", "10.0.0.2@tcp", "10.0.0.3@tcp"]),
    ("10.0.0.[1,5,7-8]@tcp", ["10.0.0.1@tcp", "10.0.0.5@tcp", "10.0.0.7@tcp",
                             "10.0.0.8@tcp"]),
    ("10.0.0.[1-9/4]@tcp", ["10.0.0.1@tcp", "10.0.0.5@tcp", "10.0.0.9@tcp"]),
    ("10.0.[1-2].[1-2]@tcp", ["10.0.1.1@tcp", "10.0.1.2@tcp", "10.0.2.1@tcp",
                              "10.0.2.2@tcp"]),
])
def test_nid_ranges_expand_in_lst_order(text: str, words: list[str]) -> None:
    assert expand(text) == words


@pytest.mark.parametrize("text", ["10.0.0.[3-3]@tcp", "10.0.0.[5-1]@tcp", "10.0.0.[]@tcp",
                                  "10.0.0.[1@tcp", "10.0.0.[a]@tcp", "10.0.0.[1-4/0]@tcp"])
def test_bad_ranges_are_a_syntax_error(text: str) -> None:
    assert parse_nids(text) == (None, f'Syntax error in "{text}"')


def test_a_word_that_is_no_nid_is_named_and_huge_lists_are_bounded() -> None:
    assert parse_nids("10.0.0.[1-2]@bogus0") == (None, "Invalid nid: 10.0.0.1@bogus0")
    assert parse_nids("1.[0-255].[0-255].[0-1]@tcp")[1] == \
        ('Too many NIDs in "1.[0-255].[0-255].[0-1]@tcp" (more than 16384, the most one list '
         'may hold here; real lst has no such bound)')
    assert len(parse_nids("1.2.[0-63].[0-255]@tcp")[0] or []) == 16384  # the bound itself


def test_getopt_long_permutes_abbreviates_and_speaks_glibc() -> None:
    longs = [Opt("batch", True, "b"), Opt("concurrency", True, "c"), Opt("force", False, "f")]
    p = getopt_long("add_test", ["brw", "--conc", "4", "-b", "x", "read", "--batch=y", "-f"],
                    "b:c:f", longs)
    assert p.opts == [("c", "4"), ("b", "x"), ("b", "y"), ("f", None)]
    assert p.operands == ["brw", "read"] and p.error is None
    cases = {("--bogus",): "add_test: unrecognized option '--bogus'",
             ("--batch",): "add_test: option '--batch' requires an argument",
             ("--force=1",): "add_test: option '--force' doesn't allow an argument",
             ("-z",): "add_test: invalid option -- 'z'",
             ("-b",): "add_test: option requires an argument -- 'b'"}
    for argv, msg in cases.items():
        assert getopt_long("add_test", list(argv), "b:c:f", longs).error == msg
    amb = getopt_long("x", ["--b"], "", [Opt("bw", False, "b"), Opt("busy", False, "u")])
    assert amb.error == "x: option '--b' is ambiguous; possibilities: '--bw' '--busy'"


def test_c_number_parsing() -> None:
    assert (atoi(" 42x"), atoi("-3"), atoi("x"), atoi("4294967295")) == (42, -3, 0, -1)
    assert strtol("1M") == (1, "M") and strtol("0x10k") == (16, "k")
    assert strtol("010") == (8, "") and strtol("abc") == (0, "abc")


def test_stat_arithmetic_is_lsts_in_c_float() -> None:
    """Two samples 1000 ms apart with 10 MiB and 2500 messages received: 10.00 MiB/s and
    2500 RPC/s; ``--mbs`` divides by 10^6 (lst_cal_lnet_stat)."""
    old = {"lnet_send_length": 0, "lnet_recv_length": 0, "lnet_send_count": 0,
           "lnet_recv_count": 0}
    new = {"lnet_send_length": 1 << 20, "lnet_recv_length": 10 << 20, "lnet_send_count": 10,
           "lnet_recv_count": 2500}
    res = _Result()
    _cal(res, f32(1.0), new, old, mbs=False)
    assert res.v["perf", "rcv"][0] == 10.0 and res.v["rate", "rcv"][0] == 2500.0
    assert res.v["perf", "snd"][0] == 1.0
    res = _Result()
    _cal(res, f32(3.0), new, old, mbs=True)
    assert f"{res.v['perf', 'rcv'][0]:.2f}" == "3.50"  # 10485760 / 1e6 / 3 in float
