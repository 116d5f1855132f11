"""Outputs of the engine: imperatives for the driver (STYLE rule 3).

``Transmit`` and ``NotifyPeerDown`` go to the LND, ``MDEvent`` to the upper layer (the MD's
owner), ``Log`` to the node log, ``MsgTrace`` (only while ``engine.trace_messages`` is set) to
the event log. Timers are not actions: the driver asks ``next_deadline()`` after a call
(only when ``engine.deadline_changed`` says the earliest deadline may have moved).

Actions are values, never changed once built; not ``frozen`` for speed only (as ``LNetHdr``,
hdr.py: a frozen dataclass sets each field through ``object.__setattr__``, ~3x the cost of
building one per message); ``unsafe_hash`` keeps a frozen one's hash and equality. The
ones built per message (``Transmit``, ``MDEvent``, ``MsgTrace``) write their ``__init__`` out
(``init=False``): mypyc compiles a dataclass's methods but not the ``__init__`` the
``dataclasses`` module generates, which ran as Python (a tenth of the simulator's time in
explore's workload with the engine compiled); it takes every field by name, with the
dataclass's defaults, as the generated one did (``tests/unit/test_engine_inits.py`` checks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nodes.lnet.hdr import LNetHdr, Payload
from nodes.lnet.nid import NID


@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
class Transmit:
    """LND: send ``hdr`` + ``payload`` from local NI ``ni`` to peer NI ``lpni``."""

    tx_id: int
    ni: NID
    lpni: NID
    hdr: LNetHdr
    payload: Payload

    def __init__(self, *, tx_id: int, ni: NID, lpni: NID, hdr: LNetHdr,
                 payload: Payload) -> None:
        self.tx_id, self.ni, self.lpni, self.hdr, self.payload = tx_id, ni, lpni, hdr, payload


@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
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
        self.handle, self.kind, self.status, self.unlinked = handle, kind, status, unlinked
        self.initiator, self.source, self.mlength = initiator, source, mlength
        self.payload, self.target = payload, target


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


@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
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

    def __init__(self, *, event: str, msg: int, type: str, src: str, dst: str,
                 ni: str | None = None, lpni: str | None = None, attempt: int | None = None,
                 fixed_ni: bool | None = None, forwarded: bool = False,
                 deadline: float | None = None, retry_count: int | None = None,
                 hstatus: str | None = None, status: int | None = None,
                 health: tuple[tuple[str, int], ...] | None = None,
                 dropped: str | None = None, at: float = 0.0) -> None:
        self.event, self.msg, self.type, self.src, self.dst = event, msg, type, src, dst
        self.ni, self.lpni, self.attempt, self.fixed_ni = ni, lpni, attempt, fixed_ni
        self.forwarded, self.deadline, self.retry_count = forwarded, deadline, retry_count
        self.hstatus, self.status, self.health = hstatus, status, health
        self.dropped, self.at = dropped, at

    def to_json(self) -> dict[str, object]:
        """The JSON fields of TRACE-SCHEMA (``health`` as ``{"ni": v, "lpni": v}``)."""
        out: dict[str, object] = {"event": self.event, "msg": self.msg, "type": self.type,
                                  "src": self.src, "dst": self.dst}
        self._rest_into(out)
        return out

    def record(self, t: float, node: str) -> dict[str, object]:
        """The simulator's event-log record of it: ``{"t", "kind": "msg", "node"}`` then
        ``to_json()``'s fields, built as one dict (one per traced message). The fields a
        ``send`` or a ``complete`` always has go in one display: CPython sizes a dict for
        the entries of its display, so one of 11 or more never grows (one of 8 grew once
        for every record: a resize per record, ~4 % of explore's run)."""
        if self.ni is not None and self.lpni is not None and self.attempt is not None \
                and self.fixed_ni is not None and self.deadline is not None:  # a send
            out: dict[str, object] = {
                "t": t, "kind": "msg", "node": node, "event": self.event, "msg": self.msg,
                "type": self.type, "src": self.src, "dst": self.dst, "ni": self.ni,
                "lpni": self.lpni, "attempt": self.attempt, "fixed_ni": self.fixed_ni,
                "forwarded": self.forwarded, "deadline": self.deadline}
            self._tail_into(out)
            return out
        if self.ni is None and self.lpni is None and self.attempt is None \
                and self.fixed_ni is None and self.deadline is None \
                and self.retry_count is None and self.hstatus is not None \
                and self.status is not None:  # a complete
            out = {"t": t, "kind": "msg", "node": node, "event": self.event, "msg": self.msg,
                   "type": self.type, "src": self.src, "dst": self.dst,
                   "forwarded": self.forwarded, "hstatus": self.hstatus, "status": self.status}
            if self.health is not None:
                out["health"] = dict(self.health)
            if self.dropped is not None:
                out["dropped"] = self.dropped
            return out
        out = {"t": t, "kind": "msg", "node": node, "event": self.event, "msg": self.msg,
               "type": self.type, "src": self.src, "dst": self.dst}
        self._rest_into(out)
        return out

    def _rest_into(self, out: dict[str, object]) -> None:
        """``to_json``'s fields after ``dst``, in field order, added to ``out``: written out
        field by field, which mypyc compiles to attribute reads (``tests/unit/
        test_msg_trace.py`` checks that every field but ``at`` is there, in order)."""
        if self.ni is not None:
            out["ni"] = self.ni
        if self.lpni is not None:
            out["lpni"] = self.lpni
        if self.attempt is not None:
            out["attempt"] = self.attempt
        if self.fixed_ni is not None:
            out["fixed_ni"] = self.fixed_ni
        out["forwarded"] = self.forwarded
        if self.deadline is not None:
            out["deadline"] = self.deadline
        self._tail_into(out)

    def _tail_into(self, out: dict[str, object]) -> None:
        """The fields after ``deadline``, in field order (``_rest_into``'s end)."""
        if self.retry_count is not None:
            out["retry_count"] = self.retry_count
        if self.hstatus is not None:
            out["hstatus"] = self.hstatus
        if self.status is not None:
            out["status"] = self.status
        if self.health is not None:
            out["health"] = dict(self.health)
        if self.dropped is not None:
            out["dropped"] = self.dropped

    def json_line(self, t: float, node: str, offset: float) -> str:
        """``record(t + offset, node)`` as the daemon's trace line: the text of
        ``json.JSONEncoder(sort_keys=True).encode`` of it, ``deadline`` shifted by
        ``offset`` too (both rounded to the microsecond), written out in sorted key order
        (compiled: a third of what building the dict and encoding it cost, and the trace is
        most of a busy daemon's lines; ``tests/unit/test_msg_trace.py`` checks it is the
        encoder's text for every shape and for strings that need escaping)."""
        parts = []
        if self.attempt is not None:
            parts.append(f'"attempt": {self.attempt}')
        if self.deadline is not None:
            parts.append(f'"deadline": {round(self.deadline + offset, 6)!r}')
        if self.dropped is not None:
            parts.append(f'"dropped": {_quote(self.dropped)}')
        parts.append(f'"dst": {_quote(self.dst)}')
        parts.append(f'"event": {_quote(self.event)}')
        if self.fixed_ni is not None:
            parts.append('"fixed_ni": true' if self.fixed_ni else '"fixed_ni": false')
        parts.append('"forwarded": true' if self.forwarded else '"forwarded": false')
        if self.health is not None:
            health = ", ".join(f"{_quote(k)}: {v}" for k, v in sorted(dict(self.health).items()))
            parts.append(f'"health": {{{health}}}')
        if self.hstatus is not None:
            parts.append(f'"hstatus": {_quote(self.hstatus)}')
        parts.append('"kind": "msg"')
        if self.lpni is not None:
            parts.append(f'"lpni": {_quote(self.lpni)}')
        parts.append(f'"msg": {self.msg}')
        if self.ni is not None:
            parts.append(f'"ni": {_quote(self.ni)}')
        parts.append(f'"node": {_quote(node)}')
        if self.retry_count is not None:
            parts.append(f'"retry_count": {self.retry_count}')
        parts.append(f'"src": {_quote(self.src)}')
        if self.status is not None:
            parts.append(f'"status": {self.status}')
        parts.append(f'"t": {round(t + offset, 6)!r}')
        parts.append(f'"type": {_quote(self.type)}')
        return "{" + ", ".join(parts) + "}"


def _quote(text: str) -> str:
    """``text`` as JSON encodes it: as is between quotes when nothing in it needs escaping
    (NIDs, type and status names), else the encoder's escapes."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return json.dumps(text)


Action = Transmit | MDEvent | Log | NotifyPeerDown | MsgTrace
