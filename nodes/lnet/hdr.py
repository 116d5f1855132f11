"""The LNet message header (``struct lnet_hdr_nid4`` of lnet-idl.h) as a value object.

Theory of operation: the engine builds and reads headers as ``LNetHdr``; ``nodes/lnd/lnethdr.py``
packs them into the 72 little-endian bytes of the real header and back. The type-specific union
(``lnet_ack``/``lnet_put``/``lnet_get``/``lnet_reply``/``lnet_hello``) is flattened into named
fields; which ones are meaningful depends on ``type`` (spec §4.1).

Headers are values: never changed once built (a new address is a new header, ``readdressed``).
They are not ``frozen`` dataclasses only because a frozen one is built through
``object.__setattr__`` per field: 4.0 against 0.64 µs for the 15 fields here, and the engine
builds two headers per message (issue 10's profile); ``unsafe_hash`` keeps the hash and
equality a frozen one has.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Final

from nodes.lnet.nid import NID

#: LNET_PID_LUSTRE: the pid every kernel LNet endpoint uses (and routed messages are sent to).
LNET_PID_LUSTRE: Final = 12345
#: LNET_PID_USERFLAG, set on userspace pids; not used by kernel endpoints.
LNET_PID_USERFLAG: Final = 0x80000000
#: lnet_hdr_nid4 is 72 bytes; a message body never exceeds LNET_MTU (spec §0).
LNET_HDR_SIZE: Final = 72
LNET_MTU: Final = 1 << 20
#: a message's payload as the engine gets it: ``bytes``, or a read-only view of the LND's
#: receive buffer (a bulk payload, never copied: nodes/lnd/framing.py ``Payload``)
Payload = bytes | memoryview
#: Reserved portal and match bits of the ping/push targets (spec §4.1).
LNET_RESERVED_PORTAL: Final = 0
LNET_PROTO_PING_MATCHBITS: Final = 0x8000000000000000
LNET_MAX_PORTALS: Final = 64
#: Ping target buffer minimum: 16-byte header + 16 entries x 16 bytes (spec §0).
LNET_PING_INFO_MIN_SIZE: Final = 272


class MsgType(enum.IntEnum):
    """``enum lnet_msg_type``."""

    ACK = 0
    PUT = 1
    GET = 2
    REPLY = 3
    HELLO = 4


@dataclass(init=False, slots=True, unsafe_hash=True)
class WireHandle:
    """``struct lnet_handle_wire``; (~0, ~0) is LNET_WIRE_HANDLE_COOKIE_NONE (no ACK wanted)."""

    interface_cookie: int = 0xFFFF_FFFF_FFFF_FFFF
    object_cookie: int = 0xFFFF_FFFF_FFFF_FFFF

    def __init__(self, interface_cookie: int = 0xFFFF_FFFF_FFFF_FFFF,
                 object_cookie: int = 0xFFFF_FFFF_FFFF_FFFF) -> None:
        """The generated one's, written out: mypyc compiles it (``actions.py``)."""
        self.interface_cookie, self.object_cookie = interface_cookie, object_cookie

    @property
    def is_none(self) -> bool:
        return self.object_cookie == 0xFFFF_FFFF_FFFF_FFFF


WIRE_HANDLE_NONE: Final = WireHandle()


@dataclass(init=False, slots=True, unsafe_hash=True)
class LNetHdr:
    """One LNet header. ``wmd`` is ack_wmd (PUT), return_wmd (GET) or dst_wmd (ACK/REPLY)."""

    dest_nid: NID
    src_nid: NID
    dest_pid: int
    src_pid: int
    type: MsgType
    payload_length: int
    wmd: WireHandle = WIRE_HANDLE_NONE
    match_bits: int = 0
    hdr_data: int = 0  # PUT
    ptl_index: int = 0  # PUT / GET
    offset: int = 0  # PUT offset, GET src_offset
    sink_length: int = 0  # GET
    mlength: int = 0  # ACK
    incarnation: int = 0  # HELLO
    hello_type: int = 0  # HELLO

    def __init__(self, dest_nid: NID, src_nid: NID, dest_pid: int, src_pid: int,
                 type: MsgType, payload_length: int, wmd: WireHandle = WIRE_HANDLE_NONE,
                 match_bits: int = 0, hdr_data: int = 0, ptl_index: int = 0, offset: int = 0,
                 sink_length: int = 0, mlength: int = 0, incarnation: int = 0,
                 hello_type: int = 0) -> None:
        """The generated one's, written out: mypyc compiles it (``actions.py``)."""
        self.dest_nid, self.src_nid, self.dest_pid, self.src_pid = (dest_nid, src_nid,
                                                                    dest_pid, src_pid)
        self.type, self.payload_length, self.wmd, self.match_bits = (type, payload_length,
                                                                     wmd, match_bits)
        self.hdr_data, self.ptl_index, self.offset = hdr_data, ptl_index, offset
        self.sink_length, self.mlength = sink_length, mlength
        self.incarnation, self.hello_type = incarnation, hello_type

    def readdressed(self, src_nid: NID, dest_nid: NID) -> LNetHdr:
        """A copy with new source and destination NIDs (``lnet_msg_commit`` addressing):
        ``dataclasses.replace`` re-reads the fields' metadata on every call, which was 6 % of
        a small message's engine CPU; this is the constructor called directly."""
        return LNetHdr(dest_nid, src_nid, self.dest_pid, self.src_pid, self.type,
                       self.payload_length, self.wmd, self.match_bits, self.hdr_data,
                       self.ptl_index, self.offset, self.sink_length, self.mlength,
                       self.incarnation, self.hello_type)


# ``readdressed`` and ``__init__`` take every field by position: they must be told of a new one
if [f.name for f in fields(LNetHdr)] != [
    "dest_nid", "src_nid", "dest_pid", "src_pid", "type", "payload_length", "wmd", "match_bits",
    "hdr_data", "ptl_index", "offset", "sink_length", "mlength", "incarnation", "hello_type"]:
    raise TypeError("LNetHdr.readdressed does not know every field of LNetHdr")
