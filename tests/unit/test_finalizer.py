"""lib-msg.c ``lnet_finalize``: one finalization at a time (nodes/lnet/finalizer.py).

A message that waited for credits past its deadline is dropped when the credit comes
(lib-move.c ``lnet_post_send_locked``), and finalizing it returns its credits, which posts
the next waiter (``lnet_return_tx_credits_locked``). Found by ``testbed explore`` on
mr-routers.yaml (seeds 225, 503, 843, 962): the chain ran deeper than Python's stack.
"""

from __future__ import annotations

import sys

import pytest
from enginekit import PORTAL, S, mr2_fabric

from nodes.lnet import NATIVE
from nodes.lnet.actions import MDEvent, Transmit
from nodes.lnet.errors import ETIMEDOUT
from nodes.lnet.events import TxCompleted
from nodes.lnet.finalizer import FinalizeContainer
from nodes.lnet.hstatus import HStatus


def test_a_queue_past_its_deadline_is_finalized_in_order_without_recursing() -> None:
    fab = mr2_fabric()  # c1 and s1, discovery settled: sends go straight to credits
    eng, now = fab.engines["c1"], fab.now
    first = None
    for i in range(3 * sys.getrecursionlimit()):  # deeper than any stack if drops recursed
        _handle, acts = eng.put(now, S[0], payload=b"x", portal=PORTAL, match_bits=i)
        first = first or next((a for a in acts if isinstance(a, Transmit)), None)
    assert first is not None
    lpni = eng.peers.find_lpni(first.lpni)
    assert lpni is not None and len(lpni.txq) > 2 * sys.getrecursionlimit() // 2
    waiting = [m.md.handle for m in lpni.txq if m.md is not None]
    # the first send completes long after every waiter's deadline: each is dropped in turn
    acts = eng.handle(TxCompleted(tx_id=first.tx_id, rc=0, hstatus=HStatus.OK), now + 10_000)
    failed = [a.handle for a in acts if isinstance(a, MDEvent) and a.unlinked
              and a.status == -ETIMEDOUT]
    assert failed == waiting  # every waiter of that peer NI, first queued first
    assert not lpni.txq and not [a for a in acts if isinstance(a, Transmit)]
    assert lpni.tx_credits == lpni.max_tx_credits - 7  # the 7 still with the LND hold theirs


class _Recorder:
    """A stand-in for the sender: ``_finalize_tx`` names its job and finalizes the one its
    ``rc`` names inside itself (the container calls the sender's method directly)."""

    def __init__(self, box: FinalizeContainer, order: list[str]) -> None:
        self.box, self.order = box, order

    def _finalize_tx(self, msg: object, now: float, rc: int, hstatus: HStatus,
                     no_resend: bool) -> list[object]:
        self.order.append(f"start {msg}")
        out = self.box.finalize(self, "b", now, 0, hstatus, no_resend) if rc else []  # type: ignore[arg-type]
        self.order.append(f"end {msg}")
        return [msg, *out]


@pytest.mark.skipif(NATIVE, reason="a stand-in sender: the compiled container takes only the "
                    "engine's (the pure-Python unit run, LNET_TESTBED_PURE_PYTHON=1, runs it)")
def test_a_finalization_started_inside_another_waits_for_it() -> None:
    box = FinalizeContainer()
    order: list[str] = []
    sender = _Recorder(box, order)
    assert box.finalize(sender, "a", 0.0, 1, HStatus.OK, False) == ["a", "b"]  # type: ignore[arg-type]
    assert order == ["start a", "end a", "start b", "end b"]
    assert box.pending is None
