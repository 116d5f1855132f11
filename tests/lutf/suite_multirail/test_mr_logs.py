"""Multi-Rail debugging lines in the node's log (seed 000 dbg-110, dbg-115).

Each node daemon writes the engine's console lines to ``<rundir>/nodes/<node>.log`` at their
LNet level (``tb.node(x).log()``; format ``<time> <node> lnet ERROR: <text>``). Per-test
default topology (c1 and s1, two rails on ``tcp``), since the tests break rails and health.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, ok, stats
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default"),
              pytest.mark.mininet_only("reads the node daemon's log file (LNet error level)")]


def _errors(node: Any, pattern: str) -> list[re.Match[str]]:
    return list(re.finditer(rf"^\S+ \S+ {node.name} lnet ERROR: {pattern}$", node.log(),
                            re.MULTILINE))


@pytest.mark.requirement("dbg-110")
def test_local_ni_state_changes_are_logged_at_error_level(topology: Any) -> None:
    """dbg-110: every local NI state change is an error-level line naming the NI: each NI
    added at bring-up, the carrier of eth1 going down and up (the socklnd's link event
    sets/clears the NI's fatal state, ``lnet_set_link_fatal_state``), the NI's status going
    down when a failure takes its health to 0 and up again when the local recovery ping
    restores it (spec §3.1: status follows health at 0 and 1000; §3.5), a manual ``lnetctl
    net set --health 0`` (spec §3.6), and an NI removed and added again by ``net del/add``.
    Real LNet prints NI state changes with CERROR/CNETERR, i.e. on the console."""
    c1 = topology.node("c1")
    nid = re.escape(C1_NIDS[1])
    for i, n in enumerate(C1_NIDS):
        assert _errors(c1, f"local NI {re.escape(n)} added on eth{i}: status up"), c1.log()
    assert not _errors(c1, f"local NI {nid} link .*")
    topology.link("c1", "eth1", "down")
    wait_for(lambda: _errors(c1, f"local NI {nid} link down: fatal state set"), 10,
             message="error line for the link going down")
    topology.link("c1", "eth1", "up")
    wait_for(lambda: _errors(c1, f"local NI {nid} link up: fatal state cleared"), 10,
             message="error line for the link coming back")
    # health to 0 in one failure: sensitivity 1000, every PUT fails with LOCAL_ERROR (not
    # resent, spec §3.3), so exactly the NI that sent the one PUT goes down
    wait_for(lambda: c1.yaml("net show")["net"][1]["local NI(s)"][1]["status"] == "up", 10)
    ok(c1, "lnetctl", "set health_sensitivity 1000")
    ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m put -e local_error")
    reply = c1.put(S1_NIDS[0], count=1, size=4096)
    assert reply["ok"] and reply["failed"] == 1, reply
    down = _errors(c1, r"local NI (\S+) status down: health 0 after LOCAL_ERROR")
    assert len(down) == 1 and down[0].group(1) in C1_NIDS, c1.log()[-2000:]
    # one local recovery ping (+1000 at this sensitivity) brings it back up: in today's LNet
    # the health check of the REPLY the NI sends to its own recovery ping (OK) comes before
    # lnet_handle_recovery_reply's increment (recovery ping), so either is the cause
    sick = re.escape(down[0].group(1))
    wait_for(lambda: _errors(c1, f"local NI {sick} status up: health 1000 after "
                                 "(recovery ping|OK)"),
             10, message="error line for the recovery ping raising the NI")
    ok(c1, "lnetctl", f"net set --nid {C1_NIDS[0]} --health 0")
    first = re.escape(C1_NIDS[0])
    wait_for(lambda: _errors(c1, f"local NI {first} status down: health 0 after lnetctl net "
                                 "set --health"), 10, message="error line for net set --health")
    ok(c1, "lnetctl", "net del --net tcp --if eth1")
    wait_for(lambda: _errors(c1, f"local NI {nid} removed from eth1"), 10,
             message="error line for the NI removed")
    ok(c1, "lnetctl", "net add --net tcp --if eth1")
    wait_for(lambda: len(_errors(c1, f"local NI {nid} added on eth1: status up")) == 2, 10,
             message="error line for the NI added again")


@pytest.mark.requirement("dbg-115", "hlth-lnt-resend-reselect")
def test_resend_logs_the_failed_nid_and_the_new_pair(topology: Any) -> None:
    """dbg-115: a PUT whose send fails and is resent gives one error line naming the local
    NID that failed (with the peer NI and the health status) and the local/remote NID pair it
    is switched to. Every PUT sent to s1's rail-1 NID fails locally (LOCAL_TIMEOUT, an LNet
    drop rule with a health error, spec §8.2): that lowers the sending NI's health, so the
    first resend leaves from c1's *other* NI (spec §3.3: full reselection). One line per
    resend: as many lines as ``resend_count`` in ``stats show``."""
    c1 = topology.node("c1")
    ok(c1, "lctl", f"net_drop_add -s * -d {S1_NIDS[1]} -r 1 -m put -e local_timeout")
    reply = c1.put(S1_NIDS[0], count=20, size=4096)
    assert reply["ok"], reply
    pattern = (rf"PUT to \S+: send from (\S+) to {re.escape(S1_NIDS[1])} failed "
               r"\(LOCAL_TIMEOUT\); resending from (\S+) to (\S+) \(try (\d)\)")
    lines = _errors(c1, pattern)
    assert lines, c1.log()[-3000:]
    failed, new_ni, new_peer_ni, _try = lines[0].groups()
    assert failed in C1_NIDS and new_ni in C1_NIDS and new_peer_ni in S1_NIDS
    assert new_ni != failed, lines[0].group(0)
    assert all(m.group(4) in ("2", "3") for m in lines)  # retry_count 2: tries 2 and 3
    assert len(lines) == stats(c1)["resend_count"]
