"""The ping buffer ``struct lnet_ping_info`` (spec §5.1, lnet-idl.h): what a ping GET returns.

Entry 0 is always ``0@lo`` with the buffer sequence number in its status field; then every
local NI in net order, so entry 1 is the primary NID. Little-endian as on x86.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.nid import LO_NID, NID

LNET_PROTO_PING_MAGIC = 0x70696E67
LNET_PING_FEAT_BASE = 0x1
LNET_PING_FEAT_NI_STATUS = 0x2
LNET_PING_FEAT_RTE_DISABLED = 0x4
LNET_PING_FEAT_MULTI_RAIL = 0x8
LNET_PING_FEAT_DISCOVERY = 0x10
_HDR = struct.Struct("<IIII")
_ENTRY = struct.Struct("<QII")


@dataclass(frozen=True, slots=True)
class PingInfo:
    features: int
    pid: int
    seq: int
    nis: tuple[tuple[NID, int], ...]  # (nid, status) excluding the 0@lo entry

    def pack(self) -> bytes:
        out = [_HDR.pack(LNET_PROTO_PING_MAGIC, self.features, self.pid, len(self.nis) + 1),
               _ENTRY.pack(LO_NID.nid4, self.seq, 0)]
        out += [_ENTRY.pack(nid.nid4, status, 0) for nid, status in self.nis]
        return b"".join(out)

    @classmethod
    def unpack(cls, data: bytes) -> PingInfo:
        """``lnet_ping_info_validate``: magic, NI_STATUS feature, 1 <= nnis, entry0 == 0@lo."""
        if len(data) < _HDR.size + _ENTRY.size:
            raise WireProtocolError(f"ping buffer too short ({len(data)} bytes)")
        magic, features, pid, nnis = _HDR.unpack_from(data)
        if magic != LNET_PROTO_PING_MAGIC:
            raise WireProtocolError(f"bad ping magic {magic:#x}")
        if not features & LNET_PING_FEAT_NI_STATUS:
            raise WireProtocolError("ping buffer without NI status")
        if nnis < 1 or len(data) < _HDR.size + nnis * _ENTRY.size:
            raise WireProtocolError(f"ping buffer truncated ({nnis} NIs, {len(data)} bytes)")
        entries = [_ENTRY.unpack_from(data, _HDR.size + i * _ENTRY.size) for i in range(nnis)]
        if entries[0][0] != LO_NID.nid4:
            raise WireProtocolError("ping buffer entry 0 is not 0@lo")
        nis = tuple((NID.from_nid4(nid4), status) for nid4, status, _ in entries[1:])
        return cls(features, pid, entries[0][1], nis)
