"""Outputs of the engine: imperatives for the driver (STYLE rule 3).

``Transmit`` and ``NotifyPeerDown`` go to the LND, ``MDEvent`` to the upper layer (the MD's
owner), ``Log`` to the node log. Timers are not actions: the driver asks
``next_deadline()`` after every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.lnet.hdr import LNetHdr
from nodes.lnet.nid import NID


@dataclass(frozen=True, slots=True, kw_only=True)
class Transmit:
    """LND: send ``hdr`` + ``payload`` from local NI ``ni`` to peer NI ``lpni``."""

    tx_id: int
    ni: NID
    lpni: NID
    hdr: LNetHdr
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class MDEvent:
    """Upper layer: an ``lnet_event`` on MD ``handle`` (SEND, ACK, REPLY, PUT, GET, UNLINK).

    ``status`` is 0 or a negative errno; ``unlinked`` says this is the MD's last event.
    """

    handle: int
    kind: str
    status: int
    unlinked: bool
    initiator: NID | None = None
    source: NID | None = None
    mlength: int = 0
    payload: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Log:
    """A console line, at the level LNet would use (``error``, ``warning``, ``info``)."""

    level: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifyPeerDown:
    """LND: peer NI ``lpni`` is dead (``lnd_notify_peer_down``; seed 002 rtr-mr-notify-dead):
    the socklnd closes its connections to that NID so what they hold fails over."""

    lpni: NID


Action = Transmit | MDEvent | Log | NotifyPeerDown
