"""The simulator's models of the packet faults (testbed/sim/netmodels.py, issue 32 item 1),
without root: the LUTF measurements of tests/lutf/suite_faults/test_fault_kinds.py on an
in-process sim testbed (virtual time: exact and deterministic), and the paths those do not
reach: a stall outliving the LND timeout, corrupt payload bits, a bad checksum."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import testbed
from tests.lutf.suite_faults.test_fault_kinds import KINDS, PUT52, S1

ONE_RAIL = Path(__file__).parents[1] / "lutf" / "suite_faults" / "one_rail.yaml"


@pytest.fixture
def tb() -> Iterator[Any]:
    tb = testbed.up(ONE_RAIL, backend="sim", seed=5)
    try:
        assert tb.node("c1").ping(S1).rc == 0
        yield tb
    finally:
        tb.down()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_has_the_effect_measured_on_mininet(tb: Any, kind: str) -> None:
    KINDS[kind](tb)


def test_a_stall_longer_than_the_lnd_timeout_closes_the_connection(tb: Any) -> None:
    """Held for 5 s, past the LND timeout (2 s here), the socklnd's monitor closes the
    connection and the posted tx fails with -ETIMEDOUT, NETWORK_TIMEOUT (as
    ksocknal_find_timed_out_conn)."""
    tb.fault.stall(node="c1", duration=5.0)
    reply = tb.node("c1").put(S1, count=1, size=4096)
    assert reply["failed"] == 1, reply
    done = [e for e in tb.events() if e["kind"] == "tx_done" and e["node"] == "c1"]
    assert done[-1]["hstatus"] == "NETWORK_TIMEOUT" and done[-1]["rc"] == -110
    assert "timeout sending data to 10.10.0.2@tcp" in tb.node("c1").log()


def test_corrupt_payload_bits_are_delivered_and_a_bad_checksum_is_retransmitted(
        tb: Any) -> None:
    c1 = tb.node("c1")
    f = tb.fault.corrupt(node="c1", offset=200, span=64, bits=3, match=PUT52)
    assert c1.put(S1, count=5, size=4096)["completed"] == 5  # undetected, as ksocklnd
    assert tb.fault.delete(f["id"])["counters"]["corrupted"] == 5
    assert "protocol error" not in tb.node("s1").log()
    tb.fault.corrupt(node="c1", csum="bad", match=PUT52)
    t0 = tb.now
    assert c1.put(S1, count=1, size=4096)["completed"] == 1
    assert tb.now - t0 >= 0.2  # the kernel dropped it; TCP sent it again after an RTO
