"""The simulator's faults on the one fault manager (issue 29 item 3: "one fault manager whose
per-backend part only applies and undoes resources"): ``testbed/faultbook.py`` ``FaultBook``
keeps the sim's faults and walks their schedule (``advance``), ``testbed/sim/netfaults.py``
only applies and undoes, each fault's next transition on the fabric's queue."""

from __future__ import annotations

from typing import Any

import pytest
from enginekit import settle_sim

import testbed
from faults.spec import parse_fault
from testbed.faultbook import FaultBook, FaultRecord


@pytest.fixture
def tb() -> Any:
    tb = settle_sim(testbed.up(backend="sim", seed=3))
    yield tb
    tb.down()


def test_a_sim_fault_that_fails_is_an_event_not_a_traceback(
        tb: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A kill due once its node is already dead fails in ``FaultBook.advance``: the fault is
    "failed", the log says ``fault_failed`` with the one-line error, nothing on stderr (a
    swarm fails faults on purpose: the book is ``quiet`` on the sim), and the fabric goes on."""
    later = tb.fault.kill(node="c1", start=5)
    tb.fault.kill(node="c1")
    tb.run(6)
    failed = [e for e in tb.events() if e["kind"] == "fault_failed"]
    assert [(e["id"], e["error"]) for e in failed] == [
        (later["id"], "TestbedError: node c1: not running (killed by fault f2)")]
    assert {f["id"]: f["state"] for f in tb.fault.list()}[later["id"]] == "failed"
    assert "Traceback" not in capsys.readouterr().err
    assert tb.faults.book.faults is tb.faults.faults  # (one home for the sim's faults)


def test_a_fault_without_a_seed_gets_one_from_the_testbed_seed(tb: Any) -> None:
    """``FaultBook.draw`` on the sim: the testbed's seed and the fault's id, so a replay is
    exact; another testbed seed, another fault seed."""
    first = tb.fault.delay(node="c1", delay=1)["seed"]
    other = settle_sim(testbed.up(backend="sim", seed=4))
    same = settle_sim(testbed.up(backend="sim", seed=3))
    try:
        assert same.fault.delay(node="c1", delay=1)["seed"] == first
        assert other.fault.delay(node="c1", delay=1)["seed"] != first
    finally:
        other.down()
        same.down()


def test_advance_walks_one_fault_and_tick_walks_them_all() -> None:
    """``advance`` is the one walk of a fault's due transitions (``tick`` runs it for each
    fault): the sim calls it for the fault whose deadline came up on its queue, in order."""
    done: list[tuple[str, str, int]] = []
    book = FaultBook(lambda f, k: done.append(("apply", f.fid, k)),
                     lambda f, k: done.append(("revert", f.fid, k)), lambda f: None,
                     draw=lambda fid: int(fid[1:]) * 10)
    a = book.create(parse_fault({"kind": "delay", "node": "c1", "delay": 1, "duration": 2},
                                nodes={"c1": ["eth0"]}), 0.0)
    b = book.create(parse_fault({"kind": "delay", "node": "c1", "delay": 1, "start": 1},
                                nodes={"c1": ["eth0"]}), 0.0)
    assert isinstance(a, FaultRecord) and isinstance(b, FaultRecord)
    assert (a.seed, b.seed) == (10, 20)
    book.advance(b, 3.0)
    assert done == [("apply", "f2", 0)]
    book.tick(3.0)
    assert done == [("apply", "f2", 0), ("apply", "f1", 0), ("revert", "f1", 0)]


def test_a_raising_transition_fails_its_fault_only() -> None:
    failed: list[str] = []

    def apply(f: FaultRecord, k: int) -> None:
        raise OSError("boom")

    book = FaultBook(apply, lambda f, k: None, lambda f: failed.append(f.fid), quiet=True)
    f = book.create(parse_fault({"kind": "delay", "node": "c1", "delay": 1},
                                nodes={"c1": ["eth0"]}), 0.0)
    assert isinstance(f, FaultRecord)
    book.advance(f, 0.0)
    assert (f.state, f.error, failed) == ("failed", "OSError: boom", ["f1"])
    book.advance(f, 1.0)  # a failed fault is not walked again
    assert failed == ["f1"]
