"""The ping buffer ``struct lnet_ping_info`` (spec §5.1, lnet-idl.h): what a ping GET returns.

Entry 0 is always ``0@lo`` with the buffer sequence number in its status field; then every
local NI in net order, so entry 1 is the primary NID, each with its status (UP 0x15aac0de or
DOWN 0xdeadface) and ``msg_size`` 0. Little-endian as on x86. The engine answers GETs on portal
0 with the ping match bits with this buffer (the ping target) and accepts PUTs of a peer's
buffer there (the push target, ``discovery.on_push``; dyn-005/015). Feature bits: BASE and
NI_STATUS always; MULTI_RAIL and DISCOVERY on a Multi-Rail node (DISCOVERY only while
discovery is enabled), RTE_DISABLED while routing is off (spec §5.1). The engine rebuilds the
buffer with ``seq + 1`` when a local NI is added or removed (``LNetEngine._ping_changed``).

Large (IPv6) NIDs (api-ni.c ``lnet_ping_target_install_locked``): the fixed entries hold the
nid4 NIs only; each large NI follows as a ``struct lnet_ni_large_status`` (status, then the
``struct lnet_nid``: size, type, big-endian net number, 4 + size address bytes), with
LARGE_ADDR set and entry 0's ``msg_size`` the buffer's total size; PRIMARY_LARGE when the
first NI is large (``lnet_ping_info`` readers then take the first large NID as primary,
peer.c). A reader skips a large entry whose NID is longer than ``struct lnet_nid``
(``ping_iter_next``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from nodes.lnet.errors import WireProtocolError
from nodes.lnet.hdr import Payload
from nodes.lnet.ni import LNET_NI_STATUS_DOWN, LNetNI
from nodes.lnet.nid import LO_NID, NID, NID_SIZE_IPV6, Net

LNET_PROTO_PING_MAGIC: Final = 0x70696E67
LNET_PING_FEAT_BASE: Final = 0x1
LNET_PING_FEAT_NI_STATUS: Final = 0x2
LNET_PING_FEAT_RTE_DISABLED: Final = 0x4
LNET_PING_FEAT_MULTI_RAIL: Final = 0x8
LNET_PING_FEAT_DISCOVERY: Final = 0x10
LNET_PING_FEAT_LARGE_ADDR: Final = 0x20
LNET_PING_FEAT_PRIMARY_LARGE: Final = 0x40
LNET_PING_FEAT_METADATA: Final = 0x80
_HDR: Final = struct.Struct("<IIII")
_ENTRY: Final = struct.Struct("<QII")
#: lnet-idl.h ``struct lnet_nid_md_entry``: a NID and LNET_MD_BUFFER_SZ bytes of LND metadata
LNET_MD_BUFFER_SZ: Final = 32
_MD_COUNT: Final = struct.Struct("<I")
_MD_ENTRY: Final = struct.Struct(f"<Q{LNET_MD_BUFFER_SZ}s")
#: api-ni.c ``lnet_poison_nid_md_buffer``: what CFS_FAIL_TEST_PING_MD fills the metadata with
POISON_MD: Final = b"\x5a" * LNET_MD_BUFFER_SZ
_STATUS: Final = struct.Struct("<I")  # ``struct lnet_ni_large_status``'s ns_status
_NID_NUM: Final = struct.Struct(">H")


def pack_nid(nid: NID) -> bytes:
    """``struct lnet_nid`` as sent: size, type, big-endian number, the address bytes."""
    return (bytes((nid.size, nid.net.lnd)) + _NID_NUM.pack(nid.net.num)
            + nid.addr.to_bytes(4 + nid.size, "big"))


def unpack_nid(data: bytes, at: int) -> NID | None:
    """A ``struct lnet_nid`` at ``at``; None when it is not a 4- or 16-byte address or the
    buffer ends inside it."""
    size = data[at]
    end = at + 8 + size
    if size not in (0, NID_SIZE_IPV6) or end > len(data):
        return None
    num = _NID_NUM.unpack_from(data, at + 2)[0]
    return NID(Net(data[at + 1], num), int.from_bytes(data[at + 4:end], "big"), size)


def _large_entries(nis: tuple[tuple[NID, int], ...]) -> bytes:
    return b"".join(_STATUS.pack(status) + pack_nid(nid)
                    for nid, status in nis if nid.is_large)


@dataclass(frozen=True, slots=True)
class PingInfo:
    features: int
    pid: int
    seq: int
    nis: tuple[tuple[NID, int], ...]  # (nid, status) excluding the 0@lo entry
    # LNET_PING_FEAT_METADATA: ``struct lnet_nid_metadata`` after the NIs (NID, metadata)
    metadata: tuple[tuple[NID, bytes], ...] = ()

    def pack(self) -> bytes:
        small = [(nid, status) for nid, status in self.nis if not nid.is_large]
        large = _large_entries(self.nis)
        features = self.features & ~(LNET_PING_FEAT_LARGE_ADDR | LNET_PING_FEAT_PRIMARY_LARGE)
        total = 0
        if large:
            features |= LNET_PING_FEAT_LARGE_ADDR
            if self.nis[0][0].is_large:
                features |= LNET_PING_FEAT_PRIMARY_LARGE
            total = _HDR.size + (len(small) + 1) * _ENTRY.size + len(large)
        out = [_HDR.pack(LNET_PROTO_PING_MAGIC, features, self.pid, len(small) + 1),
               _ENTRY.pack(LO_NID.nid4, self.seq, total)]
        out += [_ENTRY.pack(nid.nid4, status, 0) for nid, status in small]
        out.append(large)
        if self.features & LNET_PING_FEAT_METADATA:
            out.append(_MD_COUNT.pack(len(self.metadata)))
            out += [_MD_ENTRY.pack(nid.nid4, md) for nid, md in self.metadata]
        return b"".join(out)

    @classmethod
    def unpack(cls, data: Payload) -> PingInfo:
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
        at = _HDR.size + nnis * _ENTRY.size
        if features & LNET_PING_FEAT_LARGE_ADDR:
            if len(data) < entries[0][2]:  # lnet_ping_info_size: ask again, bigger
                raise WireProtocolError(f"ping buffer truncated ({len(data)} of "
                                        f"{entries[0][2]} bytes)")
            large, at = _unpack_large(bytes(data), at, entries[0][2])
            if features & LNET_PING_FEAT_PRIMARY_LARGE and large:
                nis = large[:1] + nis + large[1:]  # peer.c: the first large NID is primary
            else:
                nis += large
        return cls(features, pid, entries[0][1], nis, _metadata(bytes(data), at, features))


def _unpack_large(data: bytes, at: int, end: int) -> tuple[tuple[tuple[NID, int], ...], int]:
    """``ping_iter_next``'s large entries from ``at`` to ``end`` (entry 0's ``msg_size``);
    an entry with an address size no NID has is skipped, a truncated one ends the list."""
    out = []
    while at + 8 <= end:
        status = _STATUS.unpack_from(data, at)[0]
        nxt = at + 4 + 8 + data[at + 4]
        if nxt > end:
            break
        nid = unpack_nid(data, at + 4)
        if nid is not None:
            out.append((nid, status))
        at = nxt
    return tuple(out), at


def _metadata(data: bytes, at: int, features: int) -> tuple[tuple[NID, bytes], ...]:
    """The NID metadata after the NI entries (api-ni.c ``lnet_ping_info_validate`` leaves
    it to its reader); what is there of it, bounded by the buffer (a truncated reply)."""
    if not features & LNET_PING_FEAT_METADATA or len(data) < at + _MD_COUNT.size:
        return ()
    count = min(_MD_COUNT.unpack_from(data, at)[0],
                (len(data) - at - _MD_COUNT.size) // _MD_ENTRY.size)
    at += _MD_COUNT.size
    out = []
    for i in range(count):
        nid4, md = _MD_ENTRY.unpack_from(data, at + i * _MD_ENTRY.size)
        out.append((NID.from_nid4(nid4), md))
    return tuple(out)


def node_ping_info(pid: int, seq: int, multi_rail: bool, discovery: bool, rte_disabled: bool,
                   nis: Iterable[LNetNI], *, test_md: bool = False) -> PingInfo:
    """A node's own buffer: BASE and NI_STATUS always; MULTI_RAIL and DISCOVERY (while
    discovery is on) on a Multi-Rail node (a downrev node has neither, bck-025);
    RTE_DISABLED while routing is not ENABLED (spec §6.2). Each NI's status: a fatal NI is
    DOWN, otherwise its status (spec §1.2, §5.1)."""
    features = LNET_PING_FEAT_BASE | LNET_PING_FEAT_NI_STATUS
    if multi_rail:
        features |= LNET_PING_FEAT_MULTI_RAIL
        if discovery:
            features |= LNET_PING_FEAT_DISCOVERY
    if rte_disabled:
        features |= LNET_PING_FEAT_RTE_DISABLED
    nis = list(nis)
    metadata: tuple[tuple[NID, bytes], ...] = ()
    if test_md:
        # api-ni.c lnet_ping_target_install_locked under CFS_FAIL_TEST_PING_MD: the NID
        # metadata block, each non-loopback NI's buffer poisoned (socklnd has no
        # lnd_get_nid_metadata, so without the fail_loc there is none)
        features |= LNET_PING_FEAT_METADATA
        metadata = tuple((ni.nid, POISON_MD) for ni in nis)
    return PingInfo(features, pid, seq, tuple(
        (ni.nid, LNET_NI_STATUS_DOWN if ni.fatal_error else ni.status) for ni in nis),
        metadata)


def ping_info_size(data: Payload) -> int:
    """Bytes the whole buffer takes, from its header (0 if even the header is missing):
    a reply shorter than this was truncated and the ping is retried with a bigger sink."""
    if len(data) < _HDR.size:
        return 0
    features, nnis = _HDR.unpack_from(data)[1], _HDR.unpack_from(data)[3]
    fixed: int = _HDR.size + min(nnis, 1 << 16) * _ENTRY.size
    if features & LNET_PING_FEAT_LARGE_ADDR and len(data) >= _HDR.size + _ENTRY.size:
        total: int = _ENTRY.unpack_from(data, _HDR.size)[2]  # lnet_ping_info_size
        return max(fixed, min(total, 1 << 20))
    return fixed


def metadata_bytes(max_interfaces: int) -> int:
    """api-ni.c ``lnet_size_of_metadata``: room for ``max_interfaces`` metadata entries."""
    return _MD_COUNT.size + _MD_ENTRY.size * max_interfaces


def feature_names(features: int) -> list[str]:
    """Names of the set feature bits, for logs and tests."""
    names = {LNET_PING_FEAT_BASE: "BASE", LNET_PING_FEAT_NI_STATUS: "NI_STATUS",
             LNET_PING_FEAT_RTE_DISABLED: "RTE_DISABLED",
             LNET_PING_FEAT_MULTI_RAIL: "MULTI_RAIL", LNET_PING_FEAT_DISCOVERY: "DISCOVERY",
             LNET_PING_FEAT_LARGE_ADDR: "LARGE_ADDR",
             LNET_PING_FEAT_PRIMARY_LARGE: "PRIMARY_LARGE",
             LNET_PING_FEAT_METADATA: "METADATA"}
    return [n for bit, n in names.items() if features & bit]


def metadata_report(payload: Payload) -> list[str]:
    """api-ni.c ``lnet_dump_nid_metadata`` under CFS_FAIL_TEST_PING_MD: the console lines of
    a metadata reply ("Ping reply received with mapping:", then "found metadata reply NI[nid]"
    per entry); nothing when the reply carries no metadata."""
    try:
        info = PingInfo.unpack(payload)
    except WireProtocolError:
        return []
    if not info.metadata:
        return []
    return ["Ping reply received with mapping:",
            *(f"found metadata reply NI[{nid}]" for nid, _md in info.metadata)]
