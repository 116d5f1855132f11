"""Inputs to the engine: facts that happened, in LNet's vocabulary (STYLE rule 3).

The daemon (real sockets) and the simulator (in-memory fabric) feed the same events.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.lnet.hdr import LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID


@dataclass(frozen=True, slots=True, kw_only=True)
class TxCompleted:
    """The LND finished (or failed) transmitting ``tx_id`` (``lnet_finalize`` from the LND)."""

    tx_id: int
    rc: int
    hstatus: HStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageReceived:
    """The LND received a whole LNet message on local NI ``ni`` from ``peer_nid``."""

    ni: NID
    peer_nid: NID
    hdr: LNetHdr
    payload: bytes
