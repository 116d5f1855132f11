"""One source of truth for the deadlines ``testbed check`` holds LNet to (issue 30 item 2,
explore seed 341): the checker's LND timeout and per-attempt deadline are the engine's own
formulas (``nodes/lnet/tunables.py``), for every transaction_timeout and retry_count LNet
accepts."""

from __future__ import annotations

from enginekit import C, make_node

from nodes.lnet.tunables import RANGES, Tunables
from testbed.observe.check_state import NodeState, attempt_timeout, lnd_timeout


def test_lnet_set_lnd_timeout_is_one_formula_for_the_engine_and_check() -> None:
    lo_tt, hi_tt = RANGES["transaction_timeout"][:2]
    lo_rc, hi_rc = RANGES["retry_count"][:2]
    seen = set()
    for tt in range(max(lo_tt, 1), min(hi_tt, 200) + 1):
        for rc in range(lo_rc, min(hi_rc, tt - 1, 40) + 1):
            t = Tunables()
            t.transaction_timeout, t.retry_count = tt, rc
            st = NodeState(transaction_timeout=float(tt), retry_count=rc)
            assert lnd_timeout(st) == t.lnd_timeout, (tt, rc)
            seen.add(t.lnd_timeout)
    assert len(seen) > 50


def test_get_msg_deadline_is_one_formula_for_the_engine_and_check() -> None:
    """The engine dates an attempt's deadline ``commit + attempt_timeout``; the checker dates
    the commit back from that deadline with the same figure."""
    for tt, rc in ((50, 2), (10, 0), (5, 1), (300, 5), (2, 0)):
        eng = make_node(1, C[:1])
        eng.tunables.transaction_timeout, eng.tunables.retry_count = tt, rc
        ni = eng.ni_by_nid(C[0])
        assert ni is not None
        ni.lnd_timeout = eng.tunables.lnd_timeout  # (what the node driver keeps it in step to)
        deadline = eng.sender.msg_deadline(ni, 100.0)
        st = NodeState(transaction_timeout=float(tt), retry_count=rc)
        assert deadline - 100.0 == attempt_timeout(st, None), (tt, rc)
