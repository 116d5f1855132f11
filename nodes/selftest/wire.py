"""lnet_selftest's wire format: ``struct srpc_msg`` and its union (lnet/selftest/rpc.h).

Theory of operation: every selftest request and reply is one ``srpc_msg`` of exactly
``SRPC_MSG_SIZE`` bytes (a request of any other length is dropped, rpc.c
``srpc_lnet_ev_handler``): a 24-byte header (magic ``SRPC_MSG_MAGIC``, version, message type,
two reserved words, the session features) and the body union, packed, little-endian as an x86
node sends it. A body is one of the ``LAYOUTS`` (one ``struct.Struct`` and its field names per
message type, cited by its rpc.h struct name); ``pack`` zero-pads it to the union's size,
``unpack`` reads the header, byte-swaps a peer of the other endianness as
``srpc_unpack_msg_hdr``/``sfw_unpack_message`` do, and returns the body as a dict. Bad input
raises ``SrpcWireError`` (the callers drop the RPC as rpc.c does), never anything else.
Constants are rpc.h/selftest.h/lnetst.h's; nothing here is I/O.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

SRPC_REQUEST_PORTAL = 50  # test RPC requests (selftest.h)
SRPC_FRAMEWORK_REQUEST_PORTAL = 51  # framework RPC requests (a lazy portal)
SRPC_RDMA_PORTAL = 52  # every reply and bulk RDMA
SRPC_MSG_MAGIC = 0xEEB0F00D
SRPC_MSG_VERSION = 1
LST_FEAT_BULK_LEN = 1  # lnetst.h: variable bulk length (bulk_v1)
LST_FEATS_MASK = LST_FEAT_BULK_LEN
LST_NAME_SIZE = 32
LST_MAX_CONCUR = 1024
LNET_NID_ANY = 0xFFFF_FFFF_FFFF_FFFF
#: lst_sid of "no session" (``LST_INVALID_SID``)
INVALID_SID = (LNET_NID_ANY, -1)


class Service(enum.IntEnum):
    """``enum srpc_service_type``; below ``FRAMEWORK_MAX`` the framework's."""

    DEBUG = 0
    MAKE_SESSION = 1
    REMOVE_SESSION = 2
    BATCH = 3
    TEST = 4
    QUERY_STAT = 5
    JOIN = 6
    FRAMEWORK_MAX = 10
    BRW = 11
    PING = 12


class MsgType(enum.IntEnum):
    """``enum srpc_msg_type`` (each reply is its request + 1)."""

    MKSN_REQST = 0
    MKSN_REPLY = 1
    RMSN_REQST = 2
    RMSN_REPLY = 3
    BATCH_REQST = 4
    BATCH_REPLY = 5
    STAT_REQST = 6
    STAT_REPLY = 7
    TEST_REQST = 8
    TEST_REPLY = 9
    DEBUG_REQST = 10
    DEBUG_REPLY = 11
    BRW_REQST = 12
    BRW_REPLY = 13
    PING_REQST = 14
    PING_REPLY = 15
    JOIN_REQST = 16
    JOIN_REPLY = 17


#: ``srpc_service2request``
REQUEST_OF = {Service.DEBUG: MsgType.DEBUG_REQST, Service.MAKE_SESSION: MsgType.MKSN_REQST,
              Service.REMOVE_SESSION: MsgType.RMSN_REQST, Service.BATCH: MsgType.BATCH_REQST,
              Service.TEST: MsgType.TEST_REQST, Service.QUERY_STAT: MsgType.STAT_REQST,
              Service.JOIN: MsgType.JOIN_REQST, Service.BRW: MsgType.BRW_REQST,
              Service.PING: MsgType.PING_REQST}


def serv_portal(service: int) -> int:
    """``srpc_serv_portal``: framework services on the lazy framework portal."""
    return SRPC_FRAMEWORK_REQUEST_PORTAL if service < Service.FRAMEWORK_MAX \
        else SRPC_REQUEST_PORTAL


_SID = "Qq"  # struct lst_sid: ses_nid (lnet_nid_t), ses_stamp (ms)
_SFW_COUNTERS = "5I"  # running_ms, active_batches, zombie_sessions, brw_errors, ping_errors
_SRPC_COUNTERS = "5IQQ"  # errors, sent, rcvd, dropped, expired, bulk_get, bulk_put
_LNET_COUNTERS = "7I4Q"  # struct lnet_counters_common


_STR_FIELDS = frozenset({"name", "group", "session", "u"})


@dataclass(frozen=True, slots=True)
class Layout:
    """One member of the ``srpc_msg`` body union: its packed struct and field names, and
    what an absent field packs as (0, or empty for a name)."""

    packer: struct.Struct
    swapped: struct.Struct
    fields: tuple[str, ...]
    defaults: tuple[tuple[str, Any], ...]
    strings: tuple[int, ...]  # indices of the name fields


def _layout(fmt: str, names: str) -> Layout:
    fields = tuple(names.split())
    return Layout(struct.Struct("<" + fmt), struct.Struct(">" + fmt), fields,
                  tuple((n, b"" if n in _STR_FIELDS else 0) for n in fields),
                  tuple(i for i, n in enumerate(fields) if n in _STR_FIELDS))


SFW_FIELDS = "running_ms active_batches zombie_sessions brw_errors ping_errors"
SRPC_FIELDS = "errors rpcs_sent rpcs_rcvd rpcs_dropped rpcs_expired bulk_get bulk_put"
LNET_FIELDS = ("msgs_alloc msgs_max errors send_count recv_count route_count drop_count "
               "send_length recv_length route_length drop_length")

LAYOUTS: dict[MsgType, Layout] = {
    # srpc_mksn_reqst / _reply
    MsgType.MKSN_REQST: _layout("Q" + _SID + "I32s", "rpyid sid_nid sid_stamp force name"),
    MsgType.MKSN_REPLY: _layout("I" + _SID + "I32s", "status sid_nid sid_stamp timeout name"),
    # srpc_rmsn_reqst / _reply
    MsgType.RMSN_REQST: _layout("Q" + _SID, "rpyid sid_nid sid_stamp"),
    MsgType.RMSN_REPLY: _layout("I" + _SID, "status sid_nid sid_stamp"),
    # srpc_debug_reqst / _reply
    MsgType.DEBUG_REQST: _layout("Q" + _SID + "I", "rpyid sid_nid sid_stamp flags"),
    MsgType.DEBUG_REPLY: _layout("I" + _SID + "II32s",
                                 "status sid_nid sid_stamp timeout nbatch name"),
    # srpc_batch_reqst / _reply
    MsgType.BATCH_REQST: _layout("Q" + _SID + "QIII", "rpyid sid_nid sid_stamp bid opc "
                                                      "testidx arg"),
    MsgType.BATCH_REPLY: _layout("I" + _SID + "II", "status sid_nid sid_stamp active time"),
    # srpc_stat_reqst / _reply
    MsgType.STAT_REQST: _layout("Q" + _SID + "I", "rpyid sid_nid sid_stamp type"),
    MsgType.STAT_REPLY: _layout("I" + _SID + _SFW_COUNTERS + _SRPC_COUNTERS + _LNET_COUNTERS,
                                "status sid_nid sid_stamp " + " ".join(
                                    f"fw_{n}" for n in SFW_FIELDS.split()) + " " + " ".join(
                                    f"rpc_{n}" for n in SRPC_FIELDS.split()) + " " + " ".join(
                                    f"lnet_{n}" for n in LNET_FIELDS.split())),
    # srpc_test_reqst (tsr_u: the 12-byte union, see pack_bulk_v1 & co) / _reply
    MsgType.TEST_REQST: _layout("QQ" + _SID + "QIIIBBI12s",
                                "rpyid bulkid sid_nid sid_stamp bid service loop concur "
                                "is_client stop_onerr ndest u"),
    MsgType.TEST_REPLY: _layout("I" + _SID, "status sid_nid sid_stamp"),
    # srpc_join_reqst / _reply (userland test nodes; never sent here)
    MsgType.JOIN_REQST: _layout("Q" + _SID + "32s", "rpyid sid_nid sid_stamp group"),
    MsgType.JOIN_REPLY: _layout("I" + _SID + "I32s", "status sid_nid sid_stamp timeout "
                                                     "session"),
    # srpc_ping_reqst / _reply
    MsgType.PING_REQST: _layout("QIIQQ", "rpyid magic seq time_sec time_nsec"),
    MsgType.PING_REPLY: _layout("III", "status magic seq"),
    # srpc_brw_reqst / _reply
    MsgType.BRW_REQST: _layout("QQIII", "rpyid bulkid rw len flags"),
    MsgType.BRW_REPLY: _layout("I", "status"),
}

_HDR = struct.Struct("<6I")
_HDR_SWAPPED = struct.Struct(">6I")
SRPC_UNION_SIZE = max(lay.packer.size for lay in LAYOUTS.values())
SRPC_MSG_SIZE = _HDR.size + SRPC_UNION_SIZE  # sizeof(struct srpc_msg): 160
_PAD = {t: bytes(SRPC_UNION_SIZE - lay.packer.size) for t, lay in LAYOUTS.items()}
_SWAB_MAGIC = int.from_bytes(SRPC_MSG_MAGIC.to_bytes(4, "little"), "big")
#: the header of each message type with the usual features (0, or ``LST_FEATS_MASK``)
_HDRS = {(t, f): _HDR.pack(SRPC_MSG_MAGIC, SRPC_MSG_VERSION, t, 0, 0, f)
         for t in MsgType for f in (0, LST_FEATS_MASK)}
_TYPES = {int(t): t for t in MsgType}  # (``MsgType(n)`` is an enum call)
#: the reply to each request (``srpc_service2reply``)
REPLY_OF = {t: MsgType(t + 1) for t in REQUEST_OF.values()}

#: union test_ping_req / test_bulk_req / test_bulk_req_v1 (``tsr_u``), padded to 12 bytes
_PING_REQ = struct.Struct("<II")  # png_size, png_flags
_BULK_V0 = struct.Struct("<III")  # blk_opc, blk_npg, blk_flags
_BULK_V1 = struct.Struct("<HHII")  # blk_opc, blk_flags, blk_len, blk_offset
#: struct lnet_process_id_packed: the destination list a test client GETs
PROCESS_ID = struct.Struct("<QI")


class SrpcWireError(ValueError):
    """Bytes that are not an ``srpc_msg`` (the RPC is dropped, rpc.c)."""


class SrpcMsg(NamedTuple):
    """A decoded ``srpc_msg``: header words and the body's fields (a tuple: one is decoded
    per RPC on each side, and a frozen dataclass's ``__init__`` costs five ``setattr``)."""

    type: MsgType
    version: int
    feats: int
    body: dict[str, Any]
    swapped: bool = False


def pack(mtype: MsgType, feats: int = LST_FEATS_MASK, **fields: Any) -> bytes:
    """One ``srpc_msg`` of ``SRPC_MSG_SIZE`` bytes; missing fields are 0 (names empty), str
    names are encoded (UTF-8, NUL-padded by the struct)."""
    return pack_fields(mtype, feats, fields)


def pack_fields(mtype: MsgType, feats: int, fields: dict[str, Any]) -> bytes:
    """``pack`` of a dict of fields."""
    lay = LAYOUTS[mtype]
    values = [fields.get(n, d) for n, d in lay.defaults]
    for i in lay.strings:
        if isinstance(values[i], str):
            values[i] = values[i].encode()
    try:
        body = lay.packer.pack(*values)
    except struct.error as exc:
        raise SrpcWireError(f"{mtype.name}: {exc}") from None
    hdr = _HDRS.get((mtype, feats))
    if hdr is None:
        hdr = _HDR.pack(SRPC_MSG_MAGIC, SRPC_MSG_VERSION, mtype, 0, 0, feats)
    return hdr + body + _PAD[mtype]


def pack_request(service: Service, feats: int, fields: dict[str, Any], rpyid: int,
                 bulkid: int) -> bytes:
    """The request of ``service`` (``srpc_send_request``): ``fields`` with its reply and
    bulk ids."""
    return pack_fields(REQUEST_OF[service], feats, {**fields, "rpyid": rpyid, "bulkid": bulkid})


def unpack_header(buf: bytes | memoryview) -> tuple[int, int, int, int, bool]:
    """(magic, version, type, feats, swapped) of a message; magic 0 when unreadable."""
    if len(buf) < _HDR.size:
        return 0, 0, 0, 0, False
    magic, version, mtype, _r0, _r1, feats = _HDR.unpack_from(buf)
    if magic == SRPC_MSG_MAGIC:
        return magic, version, mtype, feats, False
    if magic == _SWAB_MAGIC:
        _m, version, mtype, _r0, _r1, feats = _HDR_SWAPPED.unpack_from(buf)
        return SRPC_MSG_MAGIC, version, mtype, feats, True
    return magic, version, mtype, feats, False


def unpack(buf: bytes | memoryview, expect: MsgType | None = None) -> SrpcMsg:
    """Decode a whole message.

    Raises:
        SrpcWireError: wrong length, magic, type (or not ``expect``).
    """
    if len(buf) != SRPC_MSG_SIZE:
        raise SrpcWireError(f"message of {len(buf)} bytes, {SRPC_MSG_SIZE} expected")
    magic, version, mtype, _r0, _r1, feats = _HDR.unpack_from(buf)
    mt = _TYPES.get(mtype)
    if magic == SRPC_MSG_MAGIC and mt is not None and (expect is None or mt == expect):
        lay = LAYOUTS[mt]  # (the usual message: this node's byte order, the expected type)
        return SrpcMsg(mt, version, feats, dict(zip(lay.fields, lay.packer.unpack_from(
            buf, _HDR.size), strict=True)))
    magic, version, mtype, feats, swapped = unpack_header(buf)
    if magic != SRPC_MSG_MAGIC:
        raise SrpcWireError(f"bad magic {magic:#x}")
    mt = _TYPES.get(mtype)
    if mt is None:
        raise SrpcWireError(f"unknown message type {mtype}")
    if expect is not None and mt != expect:
        raise SrpcWireError(f"type {mt.name}, {expect.name} expected")
    lay = LAYOUTS[mt]
    values = (lay.swapped if swapped else lay.packer).unpack_from(buf, _HDR.size)
    return SrpcMsg(mt, version, feats, dict(zip(lay.fields, values, strict=True)), swapped)


def cstr(raw: bytes) -> str:
    """A ``char[LST_NAME_SIZE]`` as text: up to the first NUL."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def pack_ping_req(size: int = 0, flags: int = 0) -> bytes:
    return _PING_REQ.pack(size, flags).ljust(12, b"\0")


def pack_bulk_v0(opc: int, npg: int, flags: int) -> bytes:
    return _BULK_V0.pack(opc, npg, flags)


def pack_bulk_v1(opc: int, flags: int, length: int, offset: int) -> bytes:
    return _BULK_V1.pack(opc, flags, length, offset).ljust(12, b"\0")


def unpack_bulk(raw: bytes, feats: int, swapped: bool = False) -> tuple[int, int, int, int]:
    """``tsr_u`` of a brw test: (opc, flags, len, offset); v0 (no ``LST_FEAT_BULK_LEN``)
    carries whole pages, ``blk_npg`` * 4096 bytes at offset 0 (``brw_client_init``)."""
    if feats & LST_FEAT_BULK_LEN:
        fmt = ">HHII" if swapped else "<HHII"
        opc, flags, length, offset = struct.unpack_from(fmt, raw)
        return opc, flags, length, offset
    fmt = ">III" if swapped else "<III"
    opc, npg, flags = struct.unpack_from(fmt, raw)
    return opc, flags, npg * 4096, 0


def pack_ids(nids: list[int], pid: int) -> bytes:
    """The ``lnet_process_id_packed`` array of a test client's destinations."""
    return b"".join(PROCESS_ID.pack(nid, pid) for nid in nids)


def unpack_ids(raw: bytes | memoryview, count: int) -> list[tuple[int, int]]:
    """(nid4, pid) of ``count`` packed process ids.

    Raises:
        SrpcWireError: fewer bytes than ``count`` entries need.
    """
    if len(raw) < PROCESS_ID.size * count:
        raise SrpcWireError(f"{len(raw)} bytes for {count} process ids")
    return [PROCESS_ID.unpack_from(raw, i * PROCESS_ID.size) for i in range(count)]


assert SRPC_MSG_SIZE == 160, SRPC_MSG_SIZE  # sizeof(struct srpc_msg), packed
