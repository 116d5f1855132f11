"""The socklnd's failure -> (rc, health status) mapping: one table, shared by every fabric.

Theory of operation: pure data and two functions, no I/O and no asyncio, so the real socklnd
(``nodes/lnd/socklnd.py``) and the simulator's fabric report the *same* hstatus for the same
failure (spec §3.7; seed 003 hlth-lnd-*). What it encodes, from ksocklnd
(lnet/klnds/socklnd/socklnd_cb.c):

* ``ksocknal_txlist_done``: a tx failed while queued (connect failed, connection closed or
  deleted) gets NETWORK_TIMEOUT for -ETIMEDOUT, REMOTE_DROPPED for -ENETDOWN, -EHOSTUNREACH,
  -ENETUNREACH, -ECONNREFUSED and -ECONNRESET ("retransmit elsewhere"), LOCAL_ERROR for any
  other error ("we don't want to retransmit") — ``txlist_hstatus``;
* ``ksocknal_process_transmit``: a write that failed on the socket gets REMOTE_TIMEOUT for
  -ETIMEDOUT (TCP gave up: ``TCP_USER_TIMEOUT``), LOCAL_ERROR otherwise — ``transmit_hstatus``;
* ``ksocknal_tx_done``: a tx finished with bytes left over (``tx_resid != 0``, the connection
  went away under it) is -EIO, LOCAL_ERROR — ``FAILURES["conn_closed"]``.

Seed 003 (hlth-lnd-local-timeout / hlth-lnd-network-timeout) splits a timeout *before* a tx was
posted (LOCAL_TIMEOUT, resendable on another NI) from one after (NETWORK_TIMEOUT), as o2iblnd's
``kiblnd_abort_txs`` does; ksocklnd says NETWORK_TIMEOUT for both (docs/differences.md), so a
connect timeout and a stale queued tx use ``UNPOSTED_TIMEOUT``.

Every ``send`` ends in exactly one ``on_tx_done(tx_id, rc, hstatus)``. The audit against
ksocklnd (spec §3.7; seed 003 hlth-lnd-*; socklnd_cb.c/socklnd.c); a tx is *posted* once its
first byte went to the kernel and *complete* once its last did (``tx_resid == 0``); at most
one tx per connection is partly written (``sendq.py``). ``FAILURES`` names the rows, so a
fabric without sockets (the simulator) can say "link down" and get the socklnd's answer:

==========================================  ============  ================  ====================
failure (``FAILURES`` key)                  rc            hstatus           real code
==========================================  ============  ================  ====================
frame fully in the kernel (no zero-copy)    0             OK                ksocknal_tx_done
connect refused (nobody on port 988)        -ECONNREFUSED REMOTE_DROPPED    ksocknal_connect ->
                                                                            txlist_done
connect: no route / link down / reset       -ENETUNREACH, REMOTE_DROPPED    (same)
                                            -EHOSTUNREACH,
                                            -ENETDOWN,
                                            -ECONNRESET
connect/handshake failed otherwise          -errno        LOCAL_ERROR       (same)
(EADDRNOTAVAIL, EPROTO, ECONNABORTED...)
connect not done within the NI's timeout    -ETIMEDOUT    LOCAL_TIMEOUT (*) ksocknal_connect
(``unposted_timeout``)                                                      deadline
tx waited the timeout for a connection      -ETIMEDOUT    LOCAL_TIMEOUT (*) ksocknal_flush_stale_
(``unposted_timeout``)                                                      txs
send queue made no progress for the         posted tx:    NETWORK_TIMEOUT   ksocknal_find_timed_
timeout (SIOCOUTQ not draining): the        -ETIMEDOUT                      out_conn (o2iblnd's
peer's conns closed (``posted_timeout``,    queued txs:   LOCAL_TIMEOUT (*) kiblnd_abort_txs split
``unposted_timeout``)                       -ETIMEDOUT                      for queued vs posted)
reset by peer / EOF / protocol error /      -EIO          LOCAL_ERROR       close_conn_locked ->
stale incarnation / a frame half received                                   process_transmit
for the timeout ("Timeout receiving"): the                                  (-ESHUTDOWN) ->
conn(s) closed; posted and queued txs                                       tx_done(resid != 0)
(``conn_closed``)
socket error ETIMEDOUT (TCP gave up, see   -EIO          REMOTE_TIMEOUT    ksocknal_process_
socklnd.py): the posted tx                                                  transmit
(``posted_tcp_timeout``)
carrier loss on the NI's interface          -ENETDOWN     REMOTE_DROPPED    ksocknal_del_peer
(``link_down``): conns of the NI and conns                                  (txlist_done
routed over that interface closed, posted                                   -ENETDOWN); snd-085
and queued txs; later sends on the NI
LNet says the peer NI is dead               -ENETDOWN     REMOTE_DROPPED    ksocknal_notify_gw_
(``peer_down``)                                                             down
shutdown_ni / close (``ni_shutdown``)       -ECONNABORTED LOCAL_ABORTED     this API (ksocklnd:
                                                                            -ENETDOWN)
send on an NI that is not started           -ENETDOWN     LOCAL_ABORTED     this API
(``ni_not_started``)
payload length wrong or > LNET_MTU          -EINVAL       LOCAL_ERROR       caller bug
(``bad_payload``)
==========================================  ============  ================  ====================

(*) Seed 003 (hlth-lnd-local-timeout, hlth-lnd-network-timeout) separates a *local
timeout* (timed out before it was posted) from a *network timeout* (posted, not completed), as
o2iblnd does; today's ksocklnd reports NETWORK_TIMEOUT for both. We follow the seed
(docs/differences.md): LOCAL_TIMEOUT is resendable on another NI, NETWORK_TIMEOUT is not
(spec §3.2).
"""

from __future__ import annotations

import errno as E
from types import MappingProxyType

from nodes.lnet.hstatus import HStatus

#: seed 003 hlth-lnd-local-timeout: a tx that timed out before it was posted
UNPOSTED_TIMEOUT = HStatus.LOCAL_TIMEOUT

#: ``ksocknal_txlist_done``: errno -> hstatus of the txs it fails; absent errnos are
#: LOCAL_ERROR ("for all other errors we don't want to retransmit").
TXLIST_HSTATUS: MappingProxyType[int, HStatus] = MappingProxyType({
    E.ETIMEDOUT: HStatus.NETWORK_TIMEOUT,
    E.ENETDOWN: HStatus.REMOTE_DROPPED,
    E.EHOSTUNREACH: HStatus.REMOTE_DROPPED,
    E.ENETUNREACH: HStatus.REMOTE_DROPPED,
    E.ECONNREFUSED: HStatus.REMOTE_DROPPED,
    E.ECONNRESET: HStatus.REMOTE_DROPPED,
})

#: Named failures -> (rc, hstatus), one per row of the table in ``socklnd.py``.
FAILURES: MappingProxyType[str, tuple[int, HStatus]] = MappingProxyType({
    # ksocknal_tx_done: resid != 0 after close_conn_locked (reset, EOF, protocol error, stale)
    "conn_closed": (-E.EIO, HStatus.LOCAL_ERROR),
    # ksocknal_process_transmit: the socket write failed with ETIMEDOUT (TCP gave up)
    "posted_tcp_timeout": (-E.EIO, HStatus.REMOTE_TIMEOUT),
    # ksocknal_flush_stale_txs / connect deadline: never posted (seed 003)
    "unposted_timeout": (-E.ETIMEDOUT, UNPOSTED_TIMEOUT),
    # ksocknal_find_timed_out_conn: posted, the send queue made no progress
    "posted_timeout": (-E.ETIMEDOUT, HStatus.NETWORK_TIMEOUT),
    # carrier loss on the NI's interface: ksocknal_del_peer -> txlist_done(-ENETDOWN)
    "link_down": (-E.ENETDOWN, HStatus.REMOTE_DROPPED),
    # LNet's lnd_notify_peer_down (ksocknal_notify_gw_down): conns to that NID closed
    "peer_down": (-E.ENETDOWN, HStatus.REMOTE_DROPPED),
    # shutdown_ni / close of this API (ksocklnd: -ENETDOWN at ksocknal_shutdown)
    "ni_shutdown": (-E.ECONNABORTED, HStatus.LOCAL_ABORTED),
    # send on an NI that is not started
    "ni_not_started": (-E.ENETDOWN, HStatus.LOCAL_ABORTED),
    # payload length wrong or > LNET_MTU: the caller's bug
    "bad_payload": (-E.EINVAL, HStatus.LOCAL_ERROR),
})


def txlist_hstatus(rc: int) -> HStatus:
    """``ksocknal_txlist_done``: the hstatus of a queued tx failed with ``rc`` (< 0)."""
    return TXLIST_HSTATUS.get(-rc, HStatus.LOCAL_ERROR)


def connect_failure(rc: int) -> tuple[int, HStatus]:
    """``ksocknal_connect`` failed with ``rc``: what its queued txs end with. A timeout there
    is one before the tx was posted (``UNPOSTED_TIMEOUT``, seed 003); the rest are
    ``ksocknal_txlist_done``'s."""
    return rc, UNPOSTED_TIMEOUT if rc == -E.ETIMEDOUT else txlist_hstatus(rc)


def transmit_hstatus(err: int | None) -> HStatus:
    """``ksocknal_process_transmit``: a socket error ``err`` (errno, > 0) on the tx being
    written; ETIMEDOUT is the remote's (REMOTE_TIMEOUT), anything else LOCAL_ERROR."""
    return HStatus.REMOTE_TIMEOUT if err == E.ETIMEDOUT else HStatus.LOCAL_ERROR


def close_error(err: int | None, protocol: bool = False) -> int:
    """The error a failed connection is closed with (``ksocknal_close_conn_and_siblings(conn,
    error)``): the socket's ``-err``, -EPROTO for a protocol error, and 0 for a clean EOF
    (socklnd_cb.c ``ksocknal_process_receive``, LU-20023). Only a non-zero one is kept as
    ``ksnp_error``, which makes ``ksocknal_terminate_conn`` call ``ksocknal_peer_failed``
    (LNet hears the peer NI died) and takes the peer's other connections down with it. The
    daemon's socklnd and the simulator's fabric (a killed peer's, or a deleted NI's, FIN)
    both ask here."""
    if err is not None:
        return -abs(err) or -E.EIO
    return -E.EPROTO if protocol else 0


__all__ = ["FAILURES", "TXLIST_HSTATUS", "UNPOSTED_TIMEOUT", "close_error", "connect_failure",
           "transmit_hstatus", "txlist_hstatus"]
