"""The socklnd's failure -> (rc, hstatus) table (``nodes/lnd/errmap.py``), shared with the sim.

Spec §3.7 and seed 003 hlth-lnd-*: ksocknal_txlist_done, ksocknal_process_transmit and the
seed's local-vs-network timeout split.
"""

from __future__ import annotations

import errno

from nodes.lnd import errmap
from nodes.lnet.hstatus import HStatus


def test_connect_failure_splits_unposted_timeout_from_txlist_done() -> None:
    assert errmap.connect_failure(-errno.ETIMEDOUT) == (-errno.ETIMEDOUT,
                                                        HStatus.LOCAL_TIMEOUT)
    assert errmap.connect_failure(-errno.ECONNREFUSED) == (-errno.ECONNREFUSED,
                                                           HStatus.REMOTE_DROPPED)
    assert errmap.connect_failure(-errno.EPROTO) == (-errno.EPROTO, HStatus.LOCAL_ERROR)


def test_transmit_hstatus_is_remote_timeout_only_for_etimedout() -> None:
    assert errmap.transmit_hstatus(errno.ETIMEDOUT) == HStatus.REMOTE_TIMEOUT
    for e in (errno.ECONNRESET, errno.EPIPE, None):
        assert errmap.transmit_hstatus(e) == HStatus.LOCAL_ERROR


def test_failure_rows_are_negative_errnos_with_the_seed_statuses() -> None:
    f = errmap.FAILURES
    assert all(rc < 0 for rc, _ in f.values())
    assert f["posted_timeout"][1] == HStatus.NETWORK_TIMEOUT
    assert f["unposted_timeout"][1] == HStatus.LOCAL_TIMEOUT
    assert f["link_down"] == (-errno.ENETDOWN, HStatus.REMOTE_DROPPED)
    assert f["ni_shutdown"][1] == HStatus.LOCAL_ABORTED
