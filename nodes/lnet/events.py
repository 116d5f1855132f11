"""Inputs to the engine: facts that happened, in LNet's vocabulary (STYLE rule 3).

The daemon (real sockets) and the simulator (in-memory fabric) feed the same events. They are
values, never changed once built; not ``frozen`` for speed only (see ``actions.py``). The
per-message ones have their ``__init__`` written out, compiled with the class (hdr.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.lnet.hdr import LNetHdr, Payload
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID


@dataclass(slots=True, unsafe_hash=True, kw_only=True, init=False)
class TxCompleted:
    """The LND finished (or failed) transmitting ``tx_id`` (``lnet_finalize`` from the LND)."""

    tx_id: int
    rc: int
    hstatus: HStatus

    def __init__(self, *, tx_id: int, rc: int, hstatus: HStatus) -> None:
        self.tx_id = tx_id
        self.rc = rc
        self.hstatus = hstatus


@dataclass(slots=True, unsafe_hash=True, kw_only=True, init=False)
class MessageReceived:
    """The LND received a whole LNet message on local NI ``ni`` from ``peer_nid``."""

    ni: NID
    peer_nid: NID
    hdr: LNetHdr
    payload: Payload

    def __init__(self, *, ni: NID, peer_nid: NID, hdr: LNetHdr, payload: Payload) -> None:
        self.ni = ni
        self.peer_nid = peer_nid
        self.hdr = hdr
        self.payload = payload


@dataclass(slots=True, unsafe_hash=True, kw_only=True)
class PeerNotify:
    """``lnet_notify(ni, nid, alive, reset, when)``: the LND (or userspace, ``ni=None``) tells
    LNet peer NI ``nid`` is alive or dead; ``reset`` asks LNet to fully recover its health
    (seed 002 rtr-mr-lnd-notify). ``when`` is the driver's clock; None means now."""

    ni: NID | None
    nid: NID
    alive: bool
    reset: bool = False
    when: float | None = None
