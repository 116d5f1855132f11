"""Messages, memory descriptors and match entries (spec §4).

Theory of operation: every LNet message in flight is a ``Msg``; it remembers the parameters its
first send was made with (source NID, router NID) so a resend redoes the selection from scratch
(spec §3.3). An ``MD`` is the upper layer's buffer: the initiator's MD receives SEND then
ACK/REPLY (or UNLINK on timeout); a target's MD (attached to a portal with an ``ME``) receives
PUT/GET. Every initiator MD ends with exactly one event whose ``unlinked`` is true.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodes.lnet.hdr import LNetHdr, MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI


@dataclass(eq=False, slots=True)
class MD:
    """``lnet_libmd``: ``data`` is what a GET on it returns; ``sink`` MDs accept any PUT."""

    handle: int
    threshold: int
    data: bytes = b""
    max_size: int = 1 << 20
    sink: bool = False
    events: bool = True
    # response tracking (spec §4.3): deadline for the ACK/REPLY and the next hop to blame
    rsp_deadline: float | None = None
    rsp_next_hop: PeerNI | None = None
    rsp_armed: bool = False  # started at the first LND hand-off (hlth-lnt-timeout-after-send)
    # caller-imposed wait (lnetctl ping --timeout): unlink without health consequences
    user_deadline: float | None = None
    unlinked: bool = False
    msg: Msg | None = None
    sent_at: float = 0.0
    op: MsgType | None = None
    # internal MDs (recovery pings): events go to recovery.py, not the upper layer
    owner: tuple[str, NID] | None = None


@dataclass(eq=False, slots=True)
class ME:
    """``lnet_me``: match entry on a portal; ``ignore_bits`` are don't-care match bits."""

    portal: int
    match_bits: int
    ignore_bits: int
    md: MD

    def matches(self, match_bits: int) -> bool:
        return (self.match_bits ^ match_bits) & ~self.ignore_bits == 0


@dataclass(eq=False, slots=True)
class Msg:
    """``lnet_msg``. ``hdr`` is rebuilt at each commit (new source/destination on resend)."""

    mid: int
    type: MsgType
    hdr: LNetHdr
    payload: bytes
    md: MD | None = None
    is_response: bool = False
    recovery: bool = False
    no_resend: bool = False
    final_dst: NID | None = None
    src_nid_param: NID | None = None
    rtr_nid_param: NID | None = None
    txni: LNetNI | None = None
    txpeer: PeerNI | None = None
    rxni: LNetNI | None = None
    rxpeer: PeerNI | None = None
    tx_committed: bool = False
    peer_credit: bool = False
    ni_credit: bool = False
    queued: bool = False
    deadline: float = 0.0
    retry_count: int = 0
    hstatus: HStatus = HStatus.OK
    tx_id: int | None = None
    committed_at: float = 0.0
    md_cpt: int | None = None  # NUMA node of the message memory (snd-020), None = unknown
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def nob(self) -> int:
        return len(self.payload)
