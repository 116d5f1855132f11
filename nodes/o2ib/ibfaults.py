"""The IB fault kinds on one node's o2iblnd (issue 28): what each does to the emulated HCA.

* ``qp_error``: the QPs of matching connections enter ERROR with a send in flight (now if
  one is outstanding, else with the next one posted: ``QueuePair.async_error``): everything
  posted flushes (WR_FLUSH_ERR → ``kiblnd_tx_complete``: -EIO, REMOTE_DROPPED) and the
  connection closes; ``fault del`` disarms a QP that has not posted since;
* ``rnr``: this node's QPs answer SENDs Receiver Not Ready for a while; the sender retries
  every 10 ms up to ``rnr_retry_count`` times (7: forever), then RNR_RETRY_EXC_ERR;
* ``fail_next_rdma``: the next n RDMAs this node serves fail REM_OP_ERR (both QPs to ERROR);
* ``port_down``: IB_EVENT_PORT_ERR on a NI's port: its QPs stop (as ``qp_error``) and its
  connection requests fail -ENETDOWN; the runtime marks the NI fatal (``ni_fatal_error_on``);
* ``cm-reject`` is ``O2ibLND.forced_reject``: every CONNREQ (to
  ``forced_reject_ni``, if set) rejected with that reason;
* ``apply``: the kinds of ``faults/ibspec.py`` (``testbed fault add``) switched on or off.
"""

from __future__ import annotations

from nodes.lnet.nid import NID
from nodes.o2ib import connd
from nodes.o2ib.kibtx import ConnState, Output
from nodes.o2ib.msg import RejectReason
from nodes.o2ib.o2iblnd import O2ibLND

ENETDOWN = 100


def qp_error(lnd: O2ibLND, ni: NID | None = None, peer: NID | None = None) -> list[Output]:
    """The ``qp-error`` fault: the QPs of matching connections enter ERROR with a send in
    flight (everything posted flushes; the connection closes); ``qp_errors`` counts them."""
    for c in list(lnd.streams.values()):
        if c.state == ConnState.ESTABLISHED and (ni is None or c.ni == ni) and (
                peer is None or c.peer == peer):
            c.now = lnd.now
            c.run(c.cm.qp_error_in_flight())
            lnd.qp_errors += 1
    return lnd.drain()


def qp_error_off(lnd: O2ibLND, ni: NID | None = None) -> None:
    """``fault del`` of ``qp-error``: a QP still waiting for a send to err with is left
    alone."""
    for c in lnd.streams.values():
        if ni is None or c.ni == ni:
            c.cm.qp.error_armed = False


def rnr(lnd: O2ibLND, seconds: float, ni: NID | None = None) -> None:
    """The ``rnr`` fault: this node's QPs (of ``ni``) answer SENDs Receiver Not Ready for a
    while."""
    for c in lnd.streams.values():
        if ni is None or c.ni == ni:
            c.cm.qp.rnr_until = lnd.now + seconds


def fail_next_rdma(lnd: O2ibLND, n: int, ni: NID | None = None) -> None:
    """The ``rdma-error`` fault: the next ``n`` RDMAs each QP (of ``ni``) of this node serves
    fail REM_OP_ERR."""
    for c in lnd.streams.values():
        if ni is None or c.ni == ni:
            c.cm.qp.fail_next_rdma(n)
    lnd.rdma_faults = n


def port_down(lnd: O2ibLND, ni: NID) -> list[Output]:
    """IB_EVENT_PORT_ERR on ``ni``'s port: its QPs stop (sends fail, connections close
    -ENETDOWN); the caller marks the NI fatal (``ni_fatal_error_on``). An active connect
    still resolving (INIT: no conn yet in o2iblnd) gets ADDR_ERROR, ``kiblnd_peer_connect_failed
    (peer_ni, 1, ...)``: the peer's ``connecting`` drops (``kiblnd_connreq_done`` would count
    it as a passive one and leave the peer connecting for ever)."""
    for c in [c for c in lnd.streams.values() if c.ni == ni]:
        if c.state == ConnState.ESTABLISHED:
            c.now = lnd.now
            c.run(c.cm.qp_error())
        elif c.state == ConnState.INIT and c.stream in lnd.resolving:
            connd.resolve_failed(lnd, c.stream)
        elif c.state < ConnState.ESTABLISHED:
            connd.connreq_done(lnd, c, -ENETDOWN)
    return lnd.drain()


def apply(lnd: O2ibLND, kind: str, ni: NID, params: dict[str, object], on: bool,
          now: float) -> list[Output]:
    """One IB fault kind of ``faults/ibspec.py`` switched on (``on``) or off on ``ni``, at
    ``now``: the one entry the sim (testbed/sim/o2ibsim.py) and a node daemon
    (nodes/o2ib/o2ibio.py) share. ``port-down`` is the port's link going down: the caller's
    link path (it marks the NI fatal first, then calls :func:`port_down`)."""
    lnd.now = max(lnd.now, now)
    if kind == "qp-error":
        if not on:
            qp_error_off(lnd, ni)
            return []
        return qp_error(lnd, ni)
    if kind == "rnr":
        rnr(lnd, float(str(params["ms"])) / 1000.0 if on else 0.0, ni)
    elif kind == "rdma-error":
        fail_next_rdma(lnd, int(str(params["count"])) if on else 0, ni)
    elif kind == "cm-reject":
        lnd.forced_reject = RejectReason[str(params["reason"]).upper()] if on else None
        lnd.forced_reject_ni = ni if on else None
    else:
        raise ValueError(f"{kind}: not an IB fault kind applied by the LND")
    return lnd.drain()
