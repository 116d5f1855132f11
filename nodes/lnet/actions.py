"""Outputs of the engine: imperatives for the driver (STYLE rule 3).

``Transmit`` and ``NotifyPeerDown`` go to the LND, ``MDEvent`` to the upper layer (the MD's
owner), ``Log`` to the node log, ``MsgTrace`` (only while ``engine.trace_messages`` is set) to
the event log. Timers are not actions: the driver asks ``next_deadline()`` after a call
(only when ``engine.deadline_changed`` says the earliest deadline may have moved).

Actions are values, never changed once built; not ``frozen`` for speed only (as ``LNetHdr``,
hdr.py: a frozen dataclass sets each field through ``object.__setattr__``, ~3x the cost of
building one per message); ``unsafe_hash`` keeps a frozen one's hash and equality. The
per-message ones (``Transmit``, ``MDEvent``) have their ``__init__`` written out, compiled with
the class (hdr.py says why).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields

from nodes.lnet.hdr import LNetHdr, Payload
from nodes.lnet.nid import NID


@dataclass(slots=True, unsafe_hash=True, kw_only=True, init=False)
class Transmit:
    """LND: send ``hdr`` + ``payload`` from local NI ``ni`` to peer NI ``lpni``."""

    tx_id: int
    ni: NID
    lpni: NID
    hdr: LNetHdr
    payload: Payload

    def __init__(self, *, tx_id: int, ni: NID, lpni: NID, hdr: LNetHdr,
                 payload: Payload) -> None:
        self.tx_id = tx_id
        self.ni = ni
        self.lpni = lpni
        self.hdr = hdr
        self.payload = payload


@dataclass(slots=True, unsafe_hash=True, kw_only=True, init=False)
class MDEvent:
    """Upper layer: an ``lnet_event`` on MD ``handle`` (SEND, ACK, REPLY, PUT, GET, UNLINK).

    ``status`` is 0 or a negative errno; ``unlinked`` says this is the MD's last event.
    On a target MD (PUT, GET) ``target`` is the local NID the message was addressed to
    (``lnet_event.target``), ``source`` the sender's NID, ``initiator`` its primary NID.
    """

    handle: int
    kind: str
    status: int
    unlinked: bool
    initiator: NID | None = None
    source: NID | None = None
    mlength: int = 0
    payload: Payload = b""
    target: NID | None = None

    def __init__(self, *, handle: int, kind: str, status: int, unlinked: bool,
                 initiator: NID | None = None, source: NID | None = None, mlength: int = 0,
                 payload: Payload = b"", target: NID | None = None) -> None:
        self.handle = handle
        self.kind = kind
        self.status = status
        self.unlinked = unlinked
        self.initiator = initiator
        self.source = source
        self.mlength = mlength
        self.payload = payload
        self.target = target


@dataclass(slots=True, unsafe_hash=True, kw_only=True)
class Log:
    """A console line, at the level LNet would use (``error``, ``warning``, ``info``)."""

    level: str
    text: str


@dataclass(slots=True, unsafe_hash=True, kw_only=True)
class NotifyPeerDown:
    """LND: peer NI ``lpni`` is dead (``lnd_notify_peer_down``; seed 002 rtr-mr-notify-dead):
    the socklnd closes its connections to that NID so what they hold fails over."""

    lpni: NID


@dataclass(slots=True, unsafe_hash=True, kw_only=True)
class MsgTrace:
    """One record of a message's life on this node (/work/wt/TRACE-SCHEMA.md, issue 16 item 4).

    ``event``: ``send`` (one per attempt: a Transmit, or with ``dropped`` the hstatus of
    an attempt dropped at the hand-off -- a drop rule, a router's dead next hop, a deadline
    passed while waiting for credits), ``resend`` (the decision to send
    again after a failed attempt) or ``complete`` (the message's one final outcome here).
    ``msg`` is engine-unique and the same across resends; ``type`` the LNet message type;
    ``src``/``dst`` the header source and final destination. Send: ``ni``/``lpni`` of the
    attempt, ``attempt`` (0 first), ``fixed_ni`` (the NI was not the selector's free choice:
    explicit source, a response, a route or forwarding constraint), ``forwarded`` (a router
    forwarding someone else's message); the first send also ``deadline`` and
    ``retry_count``. Resend: ``attempt`` of the next try and the failed ``hstatus``.
    Complete: ``hstatus`` and ``status`` (0 or a negative errno). Resend/complete after a
    failure: ``health`` of the NI and peer NI after the update. Fields that do not apply are
    None (left out of ``to_json``).
    """

    event: str
    msg: int
    type: str
    src: str
    dst: str
    ni: str | None = None
    lpni: str | None = None
    attempt: int | None = None
    fixed_ni: bool | None = None
    forwarded: bool = False
    deadline: float | None = None
    retry_count: int | None = None
    hstatus: str | None = None
    status: int | None = None
    health: tuple[tuple[str, int], ...] | None = None
    dropped: str | None = None
    #: the engine's ``now`` when it decided this (not a JSON field: each driver writes its
    #: record's ``t``, the daemon from this, so a record is never stamped after the decision)
    at: float = 0.0

    def to_json(self) -> dict[str, object]:
        """The JSON fields of TRACE-SCHEMA (``health`` as ``{"ni": v, "lpni": v}``)."""
        out: dict[str, object] = {name: value for name, value in zip(
            _TRACE_FIELDS, _trace_values(self), strict=True) if value is not None}
        if self.health is not None:  # (its key keeps its place)
            out["health"] = dict(self.health)
        return out


_TRACE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MsgTrace) if f.name != "at")
#: every field of a ``MsgTrace`` in one C call (``to_json`` runs per traced message)
_trace_values = operator.attrgetter(*_TRACE_FIELDS)

Action = Transmit | MDEvent | Log | NotifyPeerDown | MsgTrace
