"""``testbed check``: clean logs pass, each invariant is flagged on a hand-made bad log, a
partial log says what it could not check, and a real sim run passes (docs/events.md §2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from observekit import TOPOLOGIES, flap_run

from testbed import cli
from testbed.observe.check import INVARIANTS, check_events, check_file
from testbed.observe.synthlog import generate

C_A, C_B = "10.10.0.1@tcp", "10.11.0.1@tcp"
S_A = "10.10.0.2@tcp"


def ev(t: float, kind: str, node: str | None = "c1", **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"t": t, "kind": kind, **fields}
    if node is not None:
        out["node"] = node
    return out


def send(t: float, msg: int, *, ni: str = C_A, attempt: int = 0, node: str = "c1",
         **kw: Any) -> dict[str, Any]:
    fields = {"event": "send", "msg": msg, "type": "PUT", "src": ni, "dst": S_A, "ni": ni,
              "lpni": S_A, "attempt": attempt, "fixed_ni": False, "forwarded": False}
    if attempt == 0:
        fields.update(deadline=t + 10.0, retry_count=2)
    fields.update(kw)
    return ev(t, "msg", node, **fields)


def resend(t: float, msg: int, attempt: int, node: str = "c1") -> dict[str, Any]:
    return ev(t, "msg", node, event="resend", msg=msg, type="PUT", src=C_A, dst=S_A,
              attempt=attempt, hstatus="REMOTE_DROPPED", health={"ni": 1000, "lpni": 900})


def complete(t: float, msg: int, status: int = 0, node: str = "c1") -> dict[str, Any]:
    return ev(t, "msg", node, event="complete", msg=msg, type="PUT", src=C_A, dst=S_A,
              hstatus="OK" if status == 0 else "REMOTE_DROPPED", status=status,
              forwarded=False)


def flagged(events: list[dict[str, Any]], name: str) -> int:
    return check_events(events).invariants[name].count


# --------------------------------------------------------------------------- clean logs
def test_clean_synthetic_log_checks_every_invariant() -> None:
    result = check_events(generate(30_000, seed=7))
    assert result.ok, result.render()
    assert result.checked == list(INVARIANTS)
    assert "PASS" in result.render()


def test_clean_message_life() -> None:
    log = [send(0.0, 1), resend(0.5, 1, 1), send(0.5, 1, attempt=1), complete(0.6, 1),
           ev(0.7, "msg", event="complete", msg=2, type="GET", src=C_A, dst=S_A,
              hstatus="LOCAL_ERROR", status=-113)]  # failed selection: no send
    result = check_events(log)
    assert result.ok, result.render()
    assert result.invariants["completion"].checked == 2


# --------------------------------------------------------------------------- completion
def test_completed_twice_is_flagged_with_both_completions() -> None:
    log = [send(0.0, 1), complete(0.1, 1), complete(0.2, 1)]
    result = check_events(log)
    inv = result.invariants["completion"]
    assert inv.count == 1
    assert [i for i, _e in inv.violations[0].proof] == [1, 2]
    assert "completed twice" in result.render() and "FAIL" in result.render()


def test_never_completed_past_deadline_is_flagged() -> None:
    log = [send(0.0, 1), ev(20.0, "lpni_status", nid=S_A, peer=S_A, healthy=True,
                            health=1000)]
    assert flagged(log, "completion") == 1
    still = check_events([send(0.0, 1), ev(5.0, "link_up", iface="eth0")])
    assert still.ok and "still in flight" in still.render()


def test_a_posted_message_may_outlive_a_deadline_its_callers_timeout_shortened() -> None:
    """Explore seed 341: a router's query ping carried router_ping_timeout (10 s) as its
    deadline, but it sat in the LND of a partitioned link: LNet finalizes a posted message
    only when the LND completes it (ksocknal_launch_packet: tx_deadline = now +
    ksocknal_timeout(); lib-md.c lnet_md_unlink leaves an MD a message holds as a zombie).
    With transaction_timeout 150 and retry_count 2 the LND timeout is 49 s."""
    tun = [ev(0.0, "tunable", name="transaction_timeout", value=150),
           ev(0.0, "tunable", name="retry_count", value=2)]
    end = ev(40.5, "link_up", iface="eth0")
    assert flagged([*tun, send(0.0, 1), end], "completion") == 0  # log ends 40.5 s after
    late = ev(51.5, "link_up", iface="eth0")
    assert flagged([*tun, send(0.0, 1), late], "completion") == 1  # 49 + the grace passed
    assert flagged([*tun, send(0.0, 1, dropped="REMOTE_DROPPED"), end], "completion") == 1


def test_send_after_completion_and_dead_node_excused() -> None:
    assert flagged([send(0.0, 1), complete(0.1, 1), send(0.2, 1, attempt=1)],
                   "completion") == 1
    died = [send(0.0, 1), ev(1.0, "node_died", rc=-9), ev(30.0, "link_up", iface="eth0")]
    result = check_events(died)
    assert result.ok and "excused" in result.render()


# --------------------------------------------------------------------------- resend
def test_resends_beyond_retry_count_are_flagged() -> None:
    log = [send(0.0, 1, retry_count=1), resend(0.1, 1, 1), send(0.1, 1, attempt=1),
           resend(0.2, 1, 2), send(0.2, 1, attempt=2), complete(0.3, 1)]
    result = check_events(log)
    assert result.invariants["resend"].count == 1
    assert "exceeds retry_count 1" in result.render()


def test_resend_after_deadline_and_attempt_gap_are_flagged() -> None:
    late = [send(0.0, 1), resend(10.5, 1, 1), send(10.5, 1, attempt=1), complete(10.6, 1)]
    assert flagged(late, "resend") == 1
    gap = [send(0.0, 1), send(0.1, 1, attempt=2), complete(0.2, 1)]
    assert flagged(gap, "resend") == 1


# --------------------------------------------------------------------------- health
def test_health_out_of_range_is_flagged() -> None:
    assert flagged([ev(0.0, "ni_error", nid=C_A, hstatus="LOCAL_DROPPED", health=1100)],
                   "health") == 1


def test_health_steps_follow_the_sensitivity() -> None:
    ok = [ev(0.0, "tunable", name="health_sensitivity", value=100),
          ev(1.0, "ni_health", nid=C_A, old=1000, new=900, cause="error"),
          ev(2.0, "ni_health", nid=C_A, old=900, new=1000, cause="recovery"),
          ev(3.0, "lpni_health", nid=S_A, old=1000, new=900, cause="error"),
          ev(4.0, "lpni_health", nid=S_A, old=900, new=1000, cause="ok"),
          ev(5.0, "ni_health", nid=C_A, old=1000, new=0, cause="manual"),
          ev(6.0, "ni_health", nid=C_A, old=0, new=1000, cause="reset")]
    assert check_events(ok).ok
    wrong_step = [ok[0], ev(1.0, "ni_health", nid=C_A, old=1000, new=850, cause="error")]
    assert flagged(wrong_step, "health") == 1
    wrong_way = [ev(1.0, "ni_health", nid=C_A, old=500, new=600, cause="error")]
    assert flagged(wrong_way, "health") == 1
    broken_chain = [ok[0], ev(1.0, "ni_health", nid=C_A, old=1000, new=900, cause="error"),
                    ev(2.0, "ni_health", nid=C_A, old=700, new=600, cause="error")]
    assert flagged(broken_chain, "health") == 1


def test_loopback_health_chain_restarts_at_zero_after_configure() -> None:
    """0@lo starts at health 0 after each ``lnet configure`` (api-ni.c lnet_startup_lndni
    skips the LOLND's ni_healthv, E17), so a chain 0 -> 1000 (``net set --all``), then again
    from 0 after a reconfigure, is fine; a tcp NI jumping back to 0 without a change is not."""
    lo = [ev(1.0, "ni_health", nid="0@lo", old=0, new=1000, cause="manual"),
          ev(2.0, "ni_health", nid="0@lo", old=0, new=1000, cause="manual")]
    assert check_events(lo).ok
    tcp = [ev(1.0, "ni_health", nid=C_A, old=0, new=1000, cause="manual"),
           ev(2.0, "ni_health", nid=C_A, old=0, new=1000, cause="manual")]
    assert flagged(tcp, "health") == 1


def test_health_sensitivity_inferred_then_enforced() -> None:
    log = [ev(1.0, "ni_health", nid=C_A, old=1000, new=800, cause="error"),
           ev(2.0, "ni_health", nid=C_A, old=800, new=700, cause="error")]
    result = check_events(log)
    assert result.invariants["health"].count == 1
    assert "inferred from event #0" in result.render()


# --------------------------------------------------------------------------- fatal NI
def _two_rails() -> list[dict[str, Any]]:
    return [send(0.0, 1, ni=C_B), complete(0.1, 1),
            ev(1.0, "ni_link", nid=C_A, link="down", cause="carrier")]


def test_send_on_fatal_ni_with_a_healthy_rail_is_flagged() -> None:
    log = [*_two_rails(), send(2.0, 2, ni=C_A), complete(2.1, 2)]
    result = check_events(log)
    inv = result.invariants["fatal_ni"]
    assert inv.count == 1
    assert inv.violations[0].proof[0][1]["kind"] == "ni_link"


def test_send_queued_before_the_ni_went_fatal_is_not_flagged() -> None:
    """lnet_post_send_locked never selects again: a message that chose an NI and waited for
    its credits goes out on it even if it went fatal meanwhile (seen on Mininet, suite_health
    test_failed_rail_loses_health_and_puts_are_resent). The choice is dated by the launch
    (deadline - transaction_timeout) or, for a resend, by the resend decision; a choice made
    after the NI went fatal is still a violation."""
    tt = ev(0.0, "tunable", name="transaction_timeout", value=10)
    launched = send(2.0, 2, ni=C_A, deadline=10.9)  # launched at 0.9, before the link went
    after = send(2.0, 3, ni=C_A, deadline=11.9)  # launched at 1.9: chosen on a fatal NI
    log = [tt, *_two_rails(), launched, after, complete(2.1, 2), complete(2.1, 3)]
    result = check_events(log)
    assert result.invariants["fatal_ni"].count == 1
    assert "message 3 " in result.invariants["fatal_ni"].violations[0].text
    assert "chosen before it went fatal" in result.render()
    rails, down = _two_rails()[:2], _two_rails()[2]
    resent = [*rails, send(0.5, 4, ni=C_B), resend(0.9, 4, 1), down,
              send(2.0, 4, ni=C_A, attempt=1), complete(2.1, 4)]
    assert check_events(resent).ok  # the resend chose at 0.9, before the link went down
    late = [*rails, send(0.5, 5, ni=C_B), down, resend(1.9, 5, 1),
            send(2.0, 5, ni=C_A, attempt=1), complete(2.1, 5)]
    assert check_events(late).invariants["fatal_ni"].count == 1


def test_a_resend_chosen_in_the_same_instant_before_the_link_went_is_not_flagged() -> None:
    """Explore seed 266: a resend chose the NI at t=458.45, and the carrier of that NI went
    down at t=458.45 too, later in the log; the resend waited for a credit and went out at
    458.75 on the NI it had chosen. The log's order within one instant says which came
    first; a resend logged after the link went down at that instant is still flagged."""
    rails, down = _two_rails()[:2], _two_rails()[2]
    same = [*rails, send(0.5, 4, ni=C_B), resend(1.0, 4, 1), down,
            send(1.3, 4, ni=C_A, attempt=1), complete(1.4, 4)]
    assert check_events(same).ok
    after = [*rails, send(0.5, 5, ni=C_B), down, resend(1.0, 5, 1),
             send(1.3, 5, ni=C_A, attempt=1), complete(1.4, 5)]
    assert check_events(after).invariants["fatal_ni"].count == 1


def test_a_first_attempt_committed_in_the_instant_its_ni_went_fatal_is_not_flagged() -> None:
    """Explore seed 1616 on mr-routers: c1 launched a PUT at 137.65 and it chose 10.10.0.1
    (the other rail's health was 0), waited for a credit, and went out on it at 138.154; that
    NI's carrier dropped at 137.65 too, logged after the launch (the engine never chose a
    fatal NI: checked with a selection probe). No record orders a first attempt's commit
    within its instant, so it is excused as a send in that instant is; one committed a
    microsecond later is flagged."""
    tun = [ev(0.0, "tunable", name="transaction_timeout", value=10),
           ev(0.0, "tunable", name="retry_count", value=2)]
    rails, down = _two_rails()[:2], _two_rails()[2]  # C_A down at 1.0
    same = send(1.5, 2, ni=C_A, deadline=1.0 + 10.0)  # committed at 1.0 (float: 1.0000...)
    assert check_events([*tun, *rails, down, same, complete(1.6, 2)]).ok
    late = send(1.5, 3, ni=C_A, deadline=1.00001 + 10.0)
    assert flagged([*tun, *rails, down, late, complete(1.6, 3)], "fatal_ni") == 1


def test_the_commit_of_a_first_attempt_is_dated_by_lnets_per_attempt_timeout() -> None:
    """get_msg_deadline: commit + lnd_timeout x (retry_count + 1) + 1, with lnd_timeout =
    max((tt - 1) / (retry_count + 1), 1) -- not the transaction timeout itself: tt 10, retry
    count 3 gives 2 x 4 + 1 = 9 s, and tt 2 gives 1 x 4 + 1 = 5 s."""
    rails, down = _two_rails()[:2], _two_rails()[2]  # C_A down at 1.0
    tt10 = [ev(0.0, "tunable", name="transaction_timeout", value=10)]
    after = send(2.0, 2, ni=C_A, deadline=1.5 + 9.0, retry_count=3)  # committed at 1.5
    assert flagged([*tt10, *rails, down, after, complete(2.1, 2)], "fatal_ni") == 1
    tt2 = [ev(0.0, "tunable", name="transaction_timeout", value=2)]
    before = send(2.0, 3, ni=C_A, deadline=0.9 + 5.0, retry_count=3)  # committed at 0.9
    assert check_events([*tt2, *rails, down, before, complete(2.1, 3)]).ok


def test_a_sibling_that_was_fatal_too_when_the_ni_was_chosen_does_not_count() -> None:
    """Both rails fatal when the message chose its NI (launch 1.9); the other came back at 2.5,
    before the held message went out on the chosen one at 3.0: no free choice was wrong
    (found by testbed explore seed 95 on mr-routers: a message held by an LNet delay rule)."""
    tt = ev(0.0, "tunable", name="transaction_timeout", value=10)
    b_down = ev(1.5, "ni_link", nid=C_B, link="down", cause="carrier")
    a_up = ev(2.5, "ni_link", nid=C_A, link="up", cause="carrier")
    held = send(3.0, 2, ni=C_B, deadline=11.9)
    assert check_events([tt, *_two_rails(), b_down, a_up, held, complete(3.1, 2)]).ok
    late = send(3.0, 3, ni=C_B, deadline=12.9)  # launched at 2.9, after C_A was back
    result = check_events([tt, *_two_rails(), b_down, a_up, late, complete(3.1, 3)])
    assert result.invariants["fatal_ni"].count == 1


def test_fixed_ni_and_same_instant_sends_are_not_flagged() -> None:
    fixed = [*_two_rails(), send(2.0, 2, ni=C_A, fixed_ni=True), complete(2.1, 2)]
    assert check_events(fixed).ok
    same = [send(0.0, 1, ni=C_B), complete(0.1, 1), send(1.0, 2, ni=C_A),
            ev(1.0, "ni_link", nid=C_A, link="down", cause="carrier"), complete(1.5, 2)]
    assert check_events(same).ok
    back_up = [*_two_rails(), ev(1.5, "ni_link", nid=C_A, link="up", cause="carrier"),
               send(2.0, 2, ni=C_A), complete(2.1, 2)]
    assert check_events(back_up).ok


# --------------------------------------------------------------------------- routes
GW = "10.10.0.3@tcp"


def test_route_down_without_evidence_is_flagged() -> None:
    log = [ev(1.0, "route_state", net="tcp1", gateway=GW, state="down", reason="ping")]
    result = check_events(log)
    assert result.invariants["route_down"].count == 1
    assert "no sign" in result.render()


@pytest.mark.parametrize("proof", [
    ev(0.5, "ni_link", "r1", nid="10.20.0.3@tcp1", link="down", cause="carrier"),
    ev(0.5, "routing", "r1", enabled=False),
    ev(0.5, "node_died", "r1", rc=-9),
    ev(0.5, "lpni_error", "c1", nid=GW, peer=GW, hstatus="REMOTE_TIMEOUT", health=900),
    ev(0.5, "peer_notify", "c1", ni=C_A, lpni=GW, alive=False),
])
def test_route_down_with_evidence_passes(proof: dict[str, Any]) -> None:
    log = [ev(0.0, "ni_status", "r1", nid=GW, status="up", healthy=True, health=1000,
              fatal_error=0),
           ev(0.1, "ni_status", "r1", nid="10.20.0.3@tcp1", status="up", healthy=True,
              health=1000, fatal_error=0),
           proof,
           ev(1.0, "route_state", net="tcp1", gateway=GW, state="down", reason="ping")]
    result = check_events(log)
    assert result.invariants["route_down"].checked == 1
    assert result.ok, result.render()


def test_old_failure_does_not_excuse_a_later_down() -> None:
    log = [ev(0.5, "lpni_error", nid=GW, peer=GW, hstatus="REMOTE_TIMEOUT", health=900),
           ev(0.6, "route_state", net="tcp1", gateway=GW, state="down", reason="ping"),
           ev(0.9, "route_state", net="tcp1", gateway=GW, state="up", reason="ping"),
           ev(2.0, "route_state", net="tcp1", gateway=GW, state="down", reason="ping")]
    assert flagged(log, "route_down") == 1


def test_failure_in_the_instant_of_the_last_up_excuses_the_down() -> None:
    """Explore seeds 593, 630, 715, 766: in one engine call c1 merged a gateway's pushed
    data (route up) and then failed its router discovery (a ping that timed out, or a push
    dropped locally: route down, router.c lnet_router_discovery_complete); the failure's
    events are logged before the ``route_state`` notices drained after the call. A
    failure of an earlier instant still does not excuse it."""
    up = ev(60.004, "route_state", net="tcp1", gateway=GW, state="up", reason="router ping")
    down = ev(60.004, "route_state", net="tcp1", gateway=GW, state="down",
              reason="router ping failed")
    timeout = ev(60.004, "lpni_error", nid=GW, peer=GW, hstatus="RESPONSE_TIMEOUT",
                 health=900)
    assert flagged([timeout, up, down], "route_down") == 0
    push = [send(60.004, 92, ni=C_A, fixed_ni=True, lpni=GW, dst=GW),
            complete(60.004, 92, status=-22)]
    assert flagged([*push, up, down], "route_down") == 0
    earlier = {**timeout, "t": 60.003}
    assert flagged([earlier, up, down], "route_down") == 1


def test_gateway_ni_down_then_up_before_its_push_lands_excuses_the_down() -> None:
    """Explore multihop seed 27: r2 marked its tcp2 NI down (nothing heard on it for
    router_ping_timeout + alive_router_check_interval, router.c lnet_update_ni_status_locked)
    and pushed; a ping of its own brought the NI up again before r1 merged the push and,
    reading the snapshot's down status, took its route to tcp2 down
    (lnet_router_discovery_ping_reply). A down from before the route was last up does not
    excuse it."""
    far = "10.20.0.3@tcp1"
    nis = [ev(0.0, "ni_status", "r1", nid=GW, status="up", healthy=True, health=1000,
              fatal_error=0),
           ev(0.1, "ni_status", "r1", nid=far, status="up", healthy=True, health=1000,
              fatal_error=0)]
    up = ev(15.004, "route_state", net="tcp1", gateway=GW, state="up", reason="router ping")
    ni_down = ev(23.001, "ni_status", "r1", nid=far, status="down", healthy=True,
                 health=1000, fatal_error=0)
    ni_up = {**ni_down, "t": 23.002, "status": "up"}
    down = ev(23.002, "route_state", net="tcp1", gateway=GW, state="down",
              reason="router ping")
    assert flagged([*nis, up, ni_down, ni_up, down], "route_down") == 0
    before = [{**ni_down, "t": 15.0}, {**ni_up, "t": 15.001}]
    assert flagged([*nis, *before, up, down], "route_down") == 1


# --------------------------------------------------------------------------- routing
def _fwd(t: float, msg: int) -> list[dict[str, Any]]:
    return [send(t, msg, node="r1", ni=GW, fixed_ni=True, forwarded=True, deadline=None),
            complete(t + 0.1, msg, node="r1")]


def test_forwarding_with_routing_off_is_flagged() -> None:
    assert flagged(_fwd(1.0, 1), "routing") == 1
    on = [ev(0.0, "routing", "r1", enabled=True), *_fwd(1.0, 1)]
    assert check_events(on).ok
    off = [*on, ev(2.0, "routing", "r1", enabled=False), *_fwd(3.0, 2)]
    result = check_events(off)
    assert result.invariants["routing"].count == 1
    assert result.invariants["routing"].violations[0].proof[0][1]["kind"] == "routing"


# --------------------------------------------------------------------------- partial logs
def test_log_without_message_trace_says_so() -> None:
    result = check_events([ev(0.0, "ni_error", nid=C_A, hstatus="LOCAL_DROPPED",
                              health=900)])
    assert result.ok
    assert set(result.unchecked) == {"completion", "resend", "fatal_ni", "route_down",
                                     "routing"}
    text = result.render()
    assert "NOT CHECKED completion" in text and "range only" in text


def test_sim_run_passes() -> None:
    from testbed.sim import SimTestbed

    tb = SimTestbed.up(TOPOLOGIES / "default.yaml", name="obschk", seed=3,
                       trace_messages=True)
    try:
        flap_run(tb, bursts=6, down_at=1, up_at=3, settle=40.0)
        events = tb.events()
    finally:
        tb.down()
    result = check_events(events)
    assert result.ok, result.render()
    # the message invariants were checked, not passed for want of a trace
    assert {"health", "completion", "resend", "fatal_ni"} <= set(result.checked)
    assert result.invariants["completion"].checked >= 6 * 20
    assert "inferred" not in result.render()  # the sensitivity came from a tunable event


# --------------------------------------------------------------------------- file and CLI
def test_check_file_skips_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [send(0.0, 1), complete(0.1, 1)])
                    + "\nnot json\n{\"t\": 1}\n")
    result = check_file(path)
    assert result.events == 2 and result.skipped == 2 and result.ok


def test_cli_check_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("".join(json.dumps(e) + "\n" for e in [send(0.0, 1), complete(0.1, 1)]))
    bad.write_text("".join(json.dumps(e) + "\n" for e in [send(0.0, 1), complete(0.1, 1),
                                                          complete(0.2, 1)]))
    assert cli.main(["check", "--events", str(good)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert cli.main(["check", "--events", str(bad)]) == 1
    assert "completed twice" in capsys.readouterr().out
    assert cli.main(["check", "--events", str(tmp_path / "missing.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "missing.jsonl" in err and "Traceback" not in err


# --------------------------------------------------------------------------- pytest hook
class _Config:
    def __init__(self, off: bool) -> None:
        self.off = off

    def getoption(self, name: str, default: Any = None) -> Any:
        from testbed.observe.pytest_check import OPTION

        return self.off if name == OPTION else default


class _Tb:
    name = "tbx"

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._events = events

    def events(self) -> list[dict[str, Any]]:
        return self._events


def test_teardown_hook_fails_only_bad_logs() -> None:
    from testbed.observe.pytest_check import addoption, teardown_problems

    bad = _Tb([send(0.0, 1), complete(0.1, 1), complete(0.2, 1)])
    problems = teardown_problems(_Config(False), bad)
    assert len(problems) == 1 and "completed twice" in problems[0]
    assert "--lnet-no-check" in problems[0]
    assert teardown_problems(_Config(True), bad) == []
    assert teardown_problems(_Config(False), _Tb([send(0.0, 1), complete(0.1, 1)])) == []
    seen: list[str] = []

    class _Group:
        def addoption(self, name: str, **kw: Any) -> None:
            seen.append(name)

    addoption(_Group())
    assert seen == ["--lnet-no-check"]


def test_a_resend_at_its_deadline_is_on_time_at_the_logs_resolution() -> None:
    """``t`` is rounded to the microsecond, a deadline may carry float error (explore seed
    307: resent at 110.25, deadline 110.2499999999982); a millisecond late is still late."""
    on_time = [send(100.25, 1, deadline=110.2499999999982), resend(110.25, 1, 1),
               send(110.25, 1, attempt=1), complete(110.3, 1)]
    assert check_events(on_time).ok
    late = [send(100.25, 2, deadline=110.2499999999982), resend(110.251, 2, 1),
            send(110.251, 2, attempt=1), complete(110.3, 2)]
    assert check_events(late).invariants["resend"].count == 1


def test_a_restart_keeps_the_routing_its_configuration_enabled() -> None:
    """The supervisor restarts a killed router as node_started (pid), the configuration
    (routing enabled), node_restarted (same pid): the restart's end is not a new process
    whose routing is off (soak.py flagged every forwarded message after a router kill)."""
    events = [ev(0.0, "node_started", "r1", pid=10), ev(0.1, "routing", "r1", enabled=True),
              *_fwd(1.0, 1), ev(2.0, "node_died", "r1", rc=-9),
              ev(3.0, "node_started", "r1", pid=11), ev(3.1, "routing", "r1", enabled=True),
              ev(3.2, "node_restarted", "r1", pid=11), *_fwd(4.0, 2)]
    assert flagged(events, "routing") == 0
    other = [*events[:-3], ev(3.2, "node_restarted", "r1", pid=12), *_fwd(4.0, 2)]
    assert flagged(other, "routing") == 1  # another process: its routing is unknown


def test_a_restart_without_a_pid_is_a_new_engine() -> None:
    """The sim's ``restart`` logs ``node_restarted`` with an incarnation and no pid (no
    process; no ``node_started`` before it): always a new engine, whose message numbers
    start again and whose predecessor's messages in flight are excused. Read as "the same
    process", every reused number was "sent again after its completion" and every message
    the old engine had in flight "never completed"."""
    events = [send(1.0, 1), complete(1.1, 1), send(1.2, 2),
              ev(2.0, "node_restarted", "c1", incarnation=2),
              send(3.0, 1), complete(3.1, 1), send(3.2, 2), complete(3.3, 2)]
    result = check_events(events)
    assert result.invariants["completion"].count == 0, result.render()
    assert any("1 message(s) of nodes that died" in n
               for n in result.invariants["completion"].notes), result.render()


def _router_attempt(t: float, msg: int, attempt: int, dropped: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"forwarded": True, "fixed_ni": False, "lpni": "10.20.0.3@tcp1",
                              "dst": "10.20.0.3@tcp1", "src": C_A}
    if dropped is not None:
        fields["dropped"] = dropped
    return send(t, msg, ni="10.20.0.1@tcp1", attempt=attempt, node="r1", **fields)


def test_a_routers_resends_after_dropped_attempts_pass_and_a_resend_never_sent_is_flagged(
        ) -> None:
    """A router forwarding to a next hop marked down (spec §1.5 step 1): each attempt is
    dropped at the hand-off (REMOTE_DROPPED) and resent in the same millisecond; the trace
    records each dropped attempt as a ``send`` with ``dropped``, so the checker follows the
    attempts, their deadlines and retry_count. The soak's trace lacked those sends and the
    check called the resends "of a message never sent"; a resend with no send at all (a
    message that was never committed) is still a violation."""
    routing = ev(0.0, "routing", "r1", enabled=True)
    ok = [routing, _router_attempt(1.0, 7, 0, "REMOTE_DROPPED"), resend(1.0, 7, 1, node="r1"),
          _router_attempt(1.0, 7, 1, "REMOTE_DROPPED"), resend(1.0, 7, 2, node="r1"),
          _router_attempt(1.001, 7, 2, None), complete(1.1, 7, node="r1")]
    result = check_events(ok)
    assert result.ok, result.render()
    assert result.invariants["resend"].checked == 5
    never = [routing, resend(1.0, 8, 1, node="r1"), complete(1.1, 8, node="r1")]
    result = check_events(never)
    assert result.invariants["resend"].count == 1
    assert "resend of a message never sent" in result.render()
    too_many = [routing, _router_attempt(1.0, 9, 0, "REMOTE_DROPPED"),
                *[e for a in (1, 2, 3) for e in (resend(1.0, 9, a, node="r1"),
                                                  _router_attempt(1.0, 9, a, "REMOTE_DROPPED"))],
                complete(1.1, 9, node="r1")]
    assert flagged(too_many, "resend") == 1  # retry_count 2 known from the first send
