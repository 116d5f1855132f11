"""LNet's own fault rules (spec §8, seed 003 "Debugging Requirements"): drop and delay rules,
health error simulation, their counters, and the lctl/lnetctl verbs that manage them.

Rule-level tests drive ``FaultState`` directly with a seeded RNG; behaviour tests run the
engines on the sim backend (virtual clock) through the same lctl/lnetctl verbs a user types.
"""

from __future__ import annotations

import random

import pytest
import yaml
from enginekit import settle_sim

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.fault import FaultState
from nodes.lnet.faultrule import HSTATUS_RANDOM, FaultAttr, choose_hstatus
from nodes.lnet.hdr import MsgType
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from testbed.sim import SimTestbed

C0, C1 = NID.parse("10.10.0.1@tcp"), NID.parse("10.11.0.1@tcp")
S0, S1 = NID.parse("10.10.0.2@tcp"), NID.parse("10.11.0.2@tcp")
PUT, ACK, GET = int(MsgType.PUT), int(MsgType.ACK), int(MsgType.GET)


def _state(seed: int = 1) -> FaultState:
    return FaultState(random.Random(seed))


def _rx(fs: FaultState, n: int, *, src: NID = C0, dst: NID = S0, mtype: int = PUT,
        portal: int = 52, t: float = 0.0, local: NID | None = S0) -> list[int]:
    """Feed ``n`` messages to the RX path; return the indexes that were dropped."""
    return [i for i in range(n)
            if fs.drop_match(src, local, dst, mtype, portal, t, tx=False) is not None]


# ------------------------------------------------------------------------------ rate/interval
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("rate", [3, 5, 10])
def test_rate_drops_exactly_one_per_window(seed: int, rate: int) -> None:
    """spec §8.2: a rate rule drops exactly one message in each window of `rate` matches."""
    fs = _state(seed)
    rule = fs.add("drop", FaultAttr(src=None, dst=None, rate=rate), 0.0)
    dropped = _rx(fs, rate * 20)
    assert len(dropped) == 20
    assert sorted({i // rate for i in dropped}) == list(range(20))
    assert (rule.stat.fs_count, rule.stat.decided, rule.stat.fs_put) == (rate * 20, 20, 20)


@pytest.mark.parametrize("seed", range(8))
def test_rate_two_drops_the_first_and_rate_one_drops_all(seed: int) -> None:
    """net_fault.c: rate 2 always drops the first matched message; rate 1 drops all."""
    fs = _state(seed)
    fs.add("drop", FaultAttr(src=None, dst=None, rate=2), 0.0)
    assert _rx(fs, 2)[0] == 0
    fs1 = _state(seed)
    fs1.add("drop", FaultAttr(src=None, dst=None, rate=1), 0.0)
    assert _rx(fs1, 7) == list(range(7))


@pytest.mark.parametrize("seed", range(5))
def test_interval_drops_once_per_interval(seed: int) -> None:
    """spec §8.2: one message a second against a 10 s interval rule: one drop per 10 s."""
    fs = _state(seed)
    rule = fs.add("drop", FaultAttr(src=None, dst=None, interval=10), 0.0)
    drops = [t for t in range(100) if _rx(fs, 1, t=float(t))]
    assert len(drops) == 10
    assert sorted({t // 10 for t in drops}) == list(range(10))
    assert rule.stat.fs_count == 100 and rule.stat.decided == 10


def test_random_drops_about_half_without_counting_matches() -> None:
    """-n: drop iff rand(interval) >= interval/2; fs_count is not incremented."""
    fs = _state(3)
    rule = fs.add("drop", FaultAttr(src=None, dst=None, interval=10, random=True), 0.0)
    n = len(_rx(fs, 400))
    assert 150 < n < 250
    assert rule.stat.fs_count == 0 and rule.stat.decided == n


# ------------------------------------------------------------------------------ matching
def test_nid_wildcards_and_local_nid() -> None:
    """SRC/DST are NID, * or *@net; -o matches the receiving NI, never on TX."""
    fs = _state()
    fs.add("drop", FaultAttr(src=NID.parse("255.255.255.255@tcp"), dst=S1, rate=1), 0.0)
    assert _rx(fs, 1, src=C1, dst=S1) == [0]
    assert _rx(fs, 1, src=C1, dst=S0) == []
    assert _rx(fs, 1, src=NID.parse("10.0.0.1@tcp1"), dst=S1) == []
    fs = _state()
    fs.add("drop", FaultAttr(src=None, dst=None, local_nid=S1, rate=1, drop_all=True), 0.0)
    assert _rx(fs, 1, local=S0) == [] and _rx(fs, 1, local=S1) == [0]
    assert fs.drop_match(C0, None, S1, PUT, 52, 0.0, tx=True) is None


def test_portal_and_message_masks() -> None:
    """-p only filters PUT/GET (ACK/REPLY masked out); -m selects types; none = all."""
    fs = _state()
    rule = fs.add("drop", FaultAttr(src=None, dst=None, rate=1, ptl_mask=1 << 52), 0.0)
    assert rule.attr.msg_mask == 0b0110
    assert _rx(fs, 1, portal=52) == [0] and _rx(fs, 1, portal=4) == []
    assert _rx(fs, 1, mtype=ACK, portal=-1) == []
    assert _rx(fs, 1, mtype=GET, portal=52) == [0]
    fs = _state()
    fs.add("drop", FaultAttr(src=None, dst=None, rate=1, msg_mask=1 << GET), 0.0)
    assert _rx(fs, 1, mtype=PUT) == [] and _rx(fs, 1, mtype=GET) == [0]
    with pytest.raises(LNetConfigError):
        _state().add("drop", FaultAttr(src=None, dst=None, rate=1, ptl_mask=1,
                                       msg_mask=1 << ACK), 0.0)


def test_health_rules_act_on_tx_only_and_plain_rules_on_rx_only() -> None:
    """spec §8.2: -e rules are TX error simulation, others RX silent drops, -x both."""
    fs = _state()
    fs.add("drop", FaultAttr(src=None, dst=None, rate=1, health_mask=1 << 5), 0.0)
    assert _rx(fs, 3) == []
    assert fs.drop_match(C0, None, S0, PUT, 52, 0.0, tx=True) == HStatus.LOCAL_ERROR
    fs = _state()
    fs.add("drop", FaultAttr(src=None, dst=None, rate=1), 0.0)
    assert fs.drop_match(C0, None, S0, PUT, 52, 0.0, tx=True) is None
    fs = _state()
    rule = fs.add("drop", FaultAttr(src=None, dst=None, rate=100, drop_all=True), 0.0)
    assert _rx(fs, 2) == [0, 1]
    assert fs.drop_match(C0, None, S0, PUT, 52, 0.0, tx=True) is not None
    assert rule.stat.decided == 3 and rule.stat.fs_count == 0  # -x skips the rate logic


def test_newest_rule_first_and_stop_at_first_drop() -> None:
    """Rules are added at the head; earlier rules count matches even when a later one drops."""
    fs = _state()
    old = fs.add("drop", FaultAttr(src=None, dst=None, rate=1), 0.0)
    new = fs.add("drop", FaultAttr(src=None, dst=None, rate=1000), 0.0)
    assert fs.drop_rules == [new, old]
    dropped = _rx(fs, 10)
    assert len(dropped) == 10
    assert new.stat.fs_count == 10 and old.stat.decided + new.stat.decided == 10
    assert old.stat.fs_count == 10 - new.stat.decided


def test_chosen_hstatus_algorithm() -> None:
    """spec §8.2: random r in [0,11), 0->1; kept if in the mask, else rounded to a set bit."""
    rng = random.Random(5)
    for _ in range(50):
        assert choose_hstatus(rng, 1 << 8) == HStatus.REMOTE_DROPPED
    seen = {choose_hstatus(rng, HSTATUS_RANDOM) for _ in range(300)}
    assert HStatus.OK not in seen and len(seen) == 10
    both = {choose_hstatus(rng, (1 << 1) | (1 << 10)) for _ in range(300)}
    assert both == {HStatus.LOCAL_INTERRUPT, HStatus.NETWORK_TIMEOUT}


def test_delete_and_reset() -> None:
    """del removes rules matching src and dst (None: any); reset zeroes the counters."""
    fs = _state()
    fs.add("drop", FaultAttr(src=C0, dst=S0, rate=1), 0.0)
    fs.add("drop", FaultAttr(src=C1, dst=S1, rate=1), 0.0)
    fs.add("drop", FaultAttr(src=C0, dst=S1, rate=1), 0.0)
    _rx(fs, 4)
    fs.reset("drop", 1.0)
    assert all(r.stat.fs_count == 0 and r.stat.decided == 0 for r in fs.drop_rules)
    assert fs.delete("drop", C0, S0, 1.0) == 1
    assert fs.delete("drop", None, None, 1.0) == 2 and fs.drop_rules == []


# ------------------------------------------------------------------------------ on the sim
@pytest.fixture
def sim() -> SimTestbed:
    """The default topology (seed 000 Figure 2) on the sim backend: c1 and s1, two rails;
    the static peers discovered first, so rules see only the test's messages (spec §5.3)."""
    return settle_sim(SimTestbed.up(seed=7))


def _ok(tb: SimTestbed, node: str, cmd: str) -> str:
    kind, _, args = cmd.partition(" ")
    res = tb.node(node).verb(kind, args.split())
    assert res.rc == 0, res
    return res.out


def _put(tb: SimTestbed, dst: str = "10.10.0.2@tcp") -> dict:
    return tb.node("c1").put(dst, count=1, size=100)


def _stats(tb: SimTestbed, node: str = "c1") -> dict:
    return yaml.safe_load(_ok(tb, node, "lnetctl stats show"))["statistics"]


def _ni_health(tb: SimTestbed) -> list[int]:
    return [ni.healthv for ni in tb.runtimes["c1"].engine.local_nis()]


def _lpni_health(tb: SimTestbed) -> list[int]:
    peer = tb.runtimes["c1"].engine.peers.find_peer(S0)
    return [lp.healthv for lp in peer.lpnis]


def test_lctl_add_list_del_output(sim: SimTestbed) -> None:
    """portals.c output lines: Added/list/found total/Removed (spec §8.1)."""
    out = _ok(sim, "c1", "lctl net_drop_add -s *@tcp -d 10.10.0.2@tcp -r 4 -m PUT -p 52")
    assert out == "Added drop rule 255.255.255.255@tcp->10.10.0.2@tcp (1/4)\n"
    _ok(sim, "c1", "lctl net_drop add -s * -d * -i 3 -e local_timeout")
    lines = _ok(sim, "c1", "lctl net_drop_list").splitlines()
    assert lines[0] == "LNet drop rules:"
    assert lines[1] == ("<?>-><?> (1/0 | 3) ptl 0, msg f, 0/0, PUT 0, ACK 0, GET 0, REP 0")
    assert lines[2] == ("255.255.255.255@tcp->10.10.0.2@tcp (1/4 | 0) ptl 0x10000000000000, "
                        "msg 2, 0/0, PUT 0, ACK 0, GET 0, REP 0")
    assert lines[3] == "found total 2"
    assert _ok(sim, "c1", "lctl net_drop_del -a") == "Removed 2 drop rules\n"
    assert _ok(sim, "c1", "lctl net_drop_list").splitlines()[-1] == "found total 0"
    out = _ok(sim, "c1", "lctl net_delay_add -s * -d 10.10.0.2@tcp -r 1 -l 2")
    assert out == "Added delay rule <?>->10.10.0.2@tcp (1/1)\n"
    assert "(1/1 | 0, latency 2)" in _ok(sim, "c1", "lctl net_delay_list")
    assert _ok(sim, "c1", "lctl net_delay_del -s * -d 10.10.0.2@tcp") == \
        "Removed 1 delay rules\n"


@pytest.mark.requirement("hlth-dbg-sim-ack-timeout", "hlth-tst-lutf-hooks")
def test_rx_rule_drops_silently_and_counts(sim: SimTestbed) -> None:
    """A rule without -e on the receiver drops the PUT; the sender times out (spec §8.2)."""
    _ok(sim, "s1", "lctl net_drop_add -s * -d * -r 1 -m put")
    reply = _put(sim)
    assert reply["failed"] == 1 and list(reply["errors"]) == ["UNLINK:-110"]
    assert _stats(sim, "s1")["drop_count"] == 1
    show = yaml.safe_load(_ok(sim, "s1", "lnetctl fault drop show"))["fault"][0]
    assert (show["ds_dropped"], show["fs_count"], show["fs_put"]) == (1, 1, 1)
    assert list(show) == ["rule_type", "fa_src", "fa_dst", "fa_ptl_mask", "fa_msg_mask",
                          "da_rate", "da_interval", "ds_dropped", "fs_count", "fs_put",
                          "fs_ack", "fs_get", "fs_reply"]
    _ok(sim, "s1", "lnetctl fault drop reset")
    show = yaml.safe_load(_ok(sim, "s1", "lnetctl fault drop show"))["fault"][0]
    assert show["ds_dropped"] == 0 and show["fs_count"] == 0
    _ok(sim, "s1", "lnetctl fault drop del --all")
    assert _ok(sim, "s1", "lnetctl fault drop show") == ""
    assert _put(sim)["completed"] == 1


@pytest.mark.requirement("hlth-dbg-sim-local-timeout", "hlth-dbg-sim-remote-timeout",
                         "hlth-dbg-sim-network-timeout", "hlth-tst-lutf-hooks")
@pytest.mark.parametrize("error, local, remote, resent", [
    ("local_timeout", True, False, True),     # LOCAL_* resendable: NI health down, resend
    ("local_error", True, False, False),      # LOCAL_ERROR: NI health down, no resend
    ("remote_dropped", False, True, True),    # REMOTE_DROPPED: peer NI down, resend
    ("remote_error", False, True, False),     # REMOTE_ERROR: peer NI down, no resend
    ("network_timeout", True, True, False),   # both sides down, no resend
])
def test_health_error_classes(sim: SimTestbed, error: str, local: bool, remote: bool,
                              resent: bool) -> None:
    """-e: the tx fails with that hstatus, so health and resend follow spec §3.2."""
    _ok(sim, "c1", f"lctl net_drop_add -s * -d * -r 2 -m put -e {error}")
    reply = _put(sim)
    assert (reply["completed"] == 1) == resent
    assert (min(_ni_health(sim)) < 1000) == local
    assert (min(_lpni_health(sim)) < 1000) == remote
    stats = _stats(sim)
    assert stats[f"{error}_count"] == 1
    assert stats["resend_count"] + stats["successful_resends"] >= (1 if resent else 0)
    if not resent:
        assert list(reply["errors"]) == ["SEND:-22"]  # socklnd fails it with -EINVAL


@pytest.mark.requirement("hlth-dbg-sim-reply-timeout")
def test_reply_drop_times_out_the_get(sim: SimTestbed) -> None:
    """A rule dropping REPLYs on the initiator: the GET (ping) ends by its timeout."""
    _ok(sim, "c1", "lctl net_drop_add -s * -d * -r 1 -m reply")
    res = sim.node("c1").lnetctl("ping 10.10.0.2@tcp --timeout 3")
    assert res.rc != 0 and "failed to ping" in res.err
    assert _stats(sim)["drop_count"] == 1
    assert sim.now >= 3


def test_health_error_on_single_rail_peer_changes_neither(sim: SimTestbed) -> None:
    """A remote error towards a one-NI peer touches no health (spec §3.2 step 3)."""
    _ok(sim, "c1", "lctl net_drop_add -s * -d * -r 1 -m put -e remote_error")
    before_ni, before_lpni = _ni_health(sim), _lpni_health(sim)
    reply = sim.node("c1").put("10.10.0.99@tcp", count=1, size=0)  # unknown: a non-MR peer
    assert reply["failed"] == 1
    assert _ni_health(sim) == before_ni and _lpni_health(sim) == before_lpni
    lpni = sim.runtimes["c1"].engine.peers.find_lpni(NID.parse("10.10.0.99@tcp"))
    assert lpni is not None and lpni.healthv == 1000


def test_drop_all_fails_every_attempt_on_tx(sim: SimTestbed) -> None:
    """-x with -e on the sender: every transmission fails; retries are exhausted."""
    _ok(sim, "c1", "lctl net_drop_add -s * -d * -r 1 -x -m put -e local_timeout")
    reply = _put(sim)
    assert reply["failed"] == 1
    rule = yaml.safe_load(_ok(sim, "c1", "lnetctl fault drop show"))["fault"][0]
    assert rule["ds_dropped"] == 3  # 1 + retry_count (2) transmissions


def test_delay_holds_for_latency_on_virtual_clock(sim: SimTestbed) -> None:
    """spec §8.3: a delay rule holds the PUT for `latency` seconds, then sends it."""
    _ok(sim, "c1", "lnetctl fault delay add --source * --dest * --rate 1 --latency 5 "
                   "--message put")
    t0 = sim.now
    assert _put(sim)["completed"] == 1
    acks = [e for e in sim.event_log if e["event"] == "md" and e["kind"] == "ACK"]
    assert 5.0 <= acks[-1]["t"] - t0 < 5.1
    rule = yaml.safe_load(_ok(sim, "c1", "lnetctl fault delay show"))["fault"][0]
    assert rule["ls_delayed"] == 1 and rule["la_latency"] == 5


def test_rx_delay_and_release_on_delete(sim: SimTestbed) -> None:
    """An RX delay rule holds the message; deleting the rule releases it at once."""
    _ok(sim, "s1", "lctl net_delay_add -s * -d * -r 1 -l 100 -m put")
    c1 = sim.runtimes["c1"]
    handle, mark = c1.start(lambda: c1.engine.put(sim.now, S0, payload=b"x", portal=52))
    sim.run(5)  # less than the topology's transaction_timeout (10 s)
    assert c1.final(handle, mark) is None
    assert sim.runtimes["s1"].engine.faults.held_count() == 1
    _ok(sim, "s1", "lctl net_delay_del -a")
    sim.run(1)
    evs = c1.final(handle, mark)
    assert evs is not None and evs[-1].kind == "ACK"
    acks = [e for e in sim.event_log if e["event"] == "md" and e["kind"] == "ACK"]
    assert 5.0 <= acks[-1]["t"] < 5.1


@pytest.mark.parametrize("cmd, msg", [
    ("lctl net_drop_add", "please provide source"),
    ("lctl net_drop_add -s * -d *", "either drop rate or interval"),
    ("lctl net_drop_add -s * -d * -r 2 -i 3", "either drop rate or interval"),
    ("lctl net_drop_add -s * -d * -r 2 -n", "interval to randomize"),
    ("lctl net_drop_add -s bogus -d * -r 2", "Invalid NID : bogus"),
    ("lctl net_drop_add -s * -d * -r 2 -m foo", "unknown message type foo"),
    ("lctl net_drop_add -s * -d * -r 2 -p 64", "invalid portal: 64"),
    ("lctl net_drop_add -s * -d * -r 2 -e worse", "unknown health error"),
    ("lctl net_drop_add -s * -d * -r x", "invalid rate"),
    ("lctl net_drop_add -s * -r 1", "both source and destination"),
    ("lctl net_drop_add -s * -d * -r 1 -Z", "unrecognized"),
    ("lctl net_delay_add -s * -d * -r 1", "latency cannot be zero"),
    ("lctl net_delay_add -s * -d * -r 1 -l 1 -e local_error", "unrecognized"),
    ("lctl net_drop_del -s *", "provide source and destination"),
    ("lctl net_drop_del -a -s *", "cannot be combined"),
    ("lnetctl fault drop add --source * --dest * --rate 1 --interval 2", "either drop rate"),
    ("lnetctl fault drop add --source * --dest * --rate 1 --bogus", "unrecognized"),
    ("lnetctl fault delay add --source * --dest * --rate 1", "latency cannot be zero"),
    ("lnetctl fault drop frob", "usage"),
])
def test_bad_arguments_give_one_line_errors(sim: SimTestbed, cmd: str, msg: str) -> None:
    """Bad input: one line on stderr, a non-zero status, no traceback, no rule added."""
    kind, _, args = cmd.partition(" ")
    res = sim.node("c1").verb(kind, args.split())
    assert res.rc != 0
    assert msg in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) in (1, 2) and res.out == ""
    assert sim.runtimes["c1"].engine.faults.drop_rules == []
