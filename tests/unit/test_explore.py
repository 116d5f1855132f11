"""``testbed explore`` (issue 17): swarms, the liveness bound, shrinking, planted bugs, replay.

CI runs a handful of seeds; the 1,000-seed determinism run and the speed figures are
benchmarks (benchmarks/explore_speed.py, README "Exploring").
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nodes.lnet.decisions import Decisions
from nodes.lnet.engine import LNetEngine
from nodes.planted import PLANTED, PLANTED_ENV, from_environ, new_engine
from testbed import cli
from testbed.explore import emit, liveness, pool, runner, swarm, topo
from testbed.explore.bound import liveness_bound
from testbed.explore.model import Fault, Schedule, Stream
from testbed.explore.shrink import SHIFT, Shrinker, ddmin, perturbed, phase_of

ROOT = Path(__file__).resolve().parents[2]
MR = ROOT / "topologies" / "mr-routers.yaml"

#: what `testbed explore topologies/mr-routers.yaml --seed 5 --planted-bug fatal-ni-by-health
#: --out DIR` shrank its failure to: c1's eth0 flaps (carrier) while r1 is blackholed, so c1's
#: eth1 loses health and the bug picks the fatal eth0
FATAL_NI = Schedule(5, 33.65, {}, (
    Fault(1.0, "blackhole", 27.3, {"kind": "blackhole", "node": "r1", "direction": "in",
                                   "duration": 27.3, "seed": 1846819412}),
    Fault(4.2, "flap", 40.0, {"kind": "flap", "node": "c1", "iface": "eth0",
                              "style": "carrier", "down": 8.0, "up": 2.0, "count": 4,
                              "seed": 103066751})))


@pytest.fixture(scope="module")
def mr() -> topo.Topo:
    return topo.load(MR)


def test_a_seed_draws_the_same_swarm_and_schedule_in_any_process(mr: topo.Topo) -> None:
    """Swarm and schedule come from the seed alone; tunables stay in their real ranges,
    consistent as LNet insists, and recovery_interval (deprecated) is never drawn."""
    a, b = swarm.swarm(mr, 7), swarm.swarm(mr, 7)
    assert a == b and swarm.expand(a, mr, 300) == swarm.expand(b, mr, 300)
    assert swarm.swarm(mr, 8) != a
    kinds = set()
    for seed in range(60):
        sw = swarm.swarm(mr, seed)
        kinds |= {k.kind for k in sw.kinds}
        assert "recovery_interval" not in sw.tunables
        eff = mr.effective(sw.tunables)
        for vals in eff.values():
            assert vals["transaction_timeout"] > vals["retry_count"]
            assert vals["health_sensitivity"] or not vals["retry_count"]
            assert vals["alive_router_check_interval"] > 0
        for name, value in sw.tunables.items():
            assert value in swarm.TUNABLES[name]
        sch = swarm.expand(sw, mr, 300)
        assert all(0 <= f.at < 300 - swarm.TAIL and f.duration >= 0.5 for f in sch.faults)
        assert Schedule.from_dict(sch.as_dict()) == sch
        assert sw.render()[0].startswith(f"seed {seed}: faults ")
    assert kinds == set(swarm.KINDS)  # every kind comes up in a few dozen seeds


def test_liveness_bound_is_one_function_of_the_tunables() -> None:
    """Defaults (spec §0: tt 150, rc 2, sensitivity 100, cap 900, check 60, ping timeout
    50): settle = max(lnd_timeout*(rc+1)+1, tt) + the rule latency cap; backoff = the recovery
    ping cap + a tick, waited twice (the first successful ping's own next ping was set from
    the count before its reply reset it: explore seed 289); climb = 3 s per step of
    1000/sensitivity; routes = 3 checks + 2 ping timeouts; sensitivity 0 queues nothing for
    recovery."""
    b = liveness_bound({})
    assert (b.settle, b.backoff, b.climb, b.routes) == (155, 901, 30, 280)
    assert b.total == 155 + 2 * 901 + 30 + 5 and "bound 1992 s" in b.render()
    off = liveness_bound({"health_sensitivity": 0, "retry_count": 0})
    assert off.backoff == off.climb == 0 and off.total == off.settle + off.routes + off.slack
    assert liveness_bound({"alive_router_check_interval": 300}).routes == 900 + 100
    assert liveness_bound({"transaction_timeout": 10, "retry_count": 2}).settle == 10 + 5
    assert liveness_bound({"health_sensitivity": 30}).climb == 34 * 3


def test_ddmin_finds_a_one_minimal_subset() -> None:
    calls: list[list[int]] = []

    def fails(xs: list[int]) -> bool:
        calls.append(xs)
        return {3, 7} <= set(xs)

    assert ddmin(list(range(10)), fails) == [3, 7]
    assert ddmin([1, 2], lambda xs: True) == []
    assert len(calls) < 40


def test_planted_bugs_are_test_only_and_off_by_default() -> None:
    """No variable: the plain engine with LNet's own decisions; a bad name is one line."""
    assert from_environ({}) is None and from_environ({PLANTED_ENV: ""}) is None
    eng = new_engine(None, incarnation=3)
    assert type(eng) is LNetEngine
    bugged = new_engine("health-cap-stuck", incarnation=3)
    assert bugged.health.decisions.health_step is not Decisions().health_step
    assert set(PLANTED) == {"fatal-ni-by-health", "resend-extra", "health-cap-stuck"}
    with pytest.raises(ValueError, match="unknown planted bug 'nope'"):
        from_environ({PLANTED_ENV: "nope"})


def test_a_clean_seed_passes_and_two_runs_log_the_same_events(mr: topo.Topo) -> None:
    """Both phases run (the liveness phase adds virtual time past the safety phase); the same
    schedule twice in one process gives the same event log hash."""
    sch = swarm.expand(swarm.swarm(mr, 1), mr, 60)
    a = runner.run(mr, sch, digest=True)
    b = runner.run(mr, sch, digest=True)
    assert a.ok, a.violation and a.violation.render()
    assert a.virtual > 60 and a.sends > 0 and a.events == b.events
    assert a.digest == b.digest and a.chunks == b.chunks


def test_determinism_across_worker_processes_with_different_hash_seeds() -> None:
    """`--check-determinism`: each seed on two spawned workers of the local process pool
    (pool.py, the engine without dask: PYTHONHASHSEED differs)."""
    from testbed.explore.driver import explore

    lines: list[str] = []
    rep = explore(str(MR), [2, 3], time_s=40.0, cluster="pool:2", check_determinism=True,
                  say=lines.append)
    assert not rep.mismatches and len(rep.results) == 2
    assert {r["hashseed"] for r in rep.results.values()} <= {
        str(pool.HASH_SEED_BASE), str(pool.HASH_SEED_BASE + 1)}
    assert ("determinism: 2 seeds x 2 runs on different workers, 2 under different str "
            "hashes (PYTHONHASHSEED), 0 mismatches") in lines
    assert any(line.startswith("speed: ") and "seeds/hour" in line for line in lines)


def test_a_planted_bug_fails_its_invariant_and_the_real_engine_does_not(
        mr: topo.Topo) -> None:
    """The shrunk fatal-ni-by-health schedule: fatal_ni with the bug, clean without it."""
    bad = runner.run(mr, FATAL_NI, planted="fatal-ni-by-health", phases="safety")
    assert bad.violation is not None and bad.violation.invariant == "fatal_ni"
    assert "(link down)" in bad.violation.text
    assert runner.run(mr, FATAL_NI, phases="safety").ok


def test_shrinking_keeps_the_invariant_and_drops_what_does_not_matter(
        mr: topo.Topo) -> None:
    """Two irrelevant units (a stream between routers' peers, a short delay on s1) and a
    tunable that does not matter go; the two faults that cause it stay."""
    noisy = FATAL_NI.with_(
        time=40.0, tunables={"router_ping_timeout": 10},
        faults=(*FATAL_NI.faults, Fault(2.0, "delay", 2.0, {
            "kind": "delay", "node": "s1", "delay": 50.0, "rate": 1.0, "duration": 2.0,
            "seed": 1})),
        streams=(Stream(3.0, "s1", "put", "10.20.0.1@tcp1", 1.0, 5, 4096),))
    sh = Shrinker(mr, "fatal_ni", "safety", planted="fatal-ni-by-health")
    assert sh.fails(noisy)
    small = sh.shrink(noisy)
    assert len(small.faults) == 2 and not small.streams and not small.tunables
    assert {f.kind for f in small.faults} == {"blackhole", "flap"}
    assert sh.runs > 3


def test_a_perturbed_run_moves_each_step_a_little_and_the_fatal_ni_schedule_survives_it(
        mr: topo.Topo) -> None:
    """The shrinker's robustness check (shrink.py): each step moves by at most SHIFT, the
    same way for the same k; FATAL_NI, whose test fails 5 of 5 on Mininet, still fails
    with its steps moved and its messages jittered."""
    a, b = perturbed(FATAL_NI, 1), perturbed(FATAL_NI, 1)
    assert a == b and a != perturbed(FATAL_NI, 2)
    for old, new in zip(FATAL_NI.faults, a.faults, strict=True):
        assert old.at != new.at and abs(old.at - new.at) <= SHIFT
        assert replace(new, at=old.at) == old
    sh = Shrinker(mr, "fatal_ni", "safety", planted="fatal-ni-by-health", robust=2)
    assert sh.fails(FATAL_NI) and sh.runs == 3


def test_a_perturbed_run_starts_the_schedule_at_a_drawn_phase_of_the_engines_timers(
        mr: topo.Topo) -> None:
    """On Mininet the daemons' ticks (monitor, router checker, recovery pings) run from their
    own start, so where they fall against a test's steps differs from run to run: each
    perturbed run idles a drawn phase in [0, the router check interval) before the
    schedule's origin (the same one for the same seed and k)."""
    p1 = phase_of(FATAL_NI, 1, 5.0)
    assert p1 == phase_of(FATAL_NI, 1, 5.0) and 0.0 <= p1 < 5.0
    assert p1 != phase_of(FATAL_NI, 2, 5.0)
    assert Shrinker(mr, "fatal_ni", "safety")._period(FATAL_NI) == 5.0  # the topology's
    short = Schedule(1, 2.0)
    base = runner.run(mr, short, phases="safety")
    moved = runner.run(mr, short, phases="safety", phase=3.25)
    assert base.ok and moved.ok and moved.virtual == pytest.approx(base.virtual + 3.25)


def test_a_tunable_mix_lnet_refuses_is_a_setup_failure_not_a_crash(mr: topo.Topo) -> None:
    """The shrinker tries other values of one tunable with the rest as they are: health
    sensitivity 0 beside retry_count 3 is refused at bring-up (health-cap-stuck seed 31)."""
    v = runner.run(mr, Schedule(1, 5.0, {"health_sensitivity": 0, "retry_count": 3})).violation
    assert v is not None and (v.phase, v.invariant) == ("setup", "bringup")
    assert "retry_count must be 0 when health_sensitivity is 0" in v.text


def test_the_emitted_pytest_fails_with_the_bug_and_passes_without(mr: topo.Topo,
                                                                   tmp_path: Path) -> None:
    """The written file replays the schedule through the plugin on --lnet-backend=sim."""
    v = runner.run(mr, FATAL_NI, planted="fatal-ni-by-health", phases="safety").violation
    assert v is not None
    path = emit.write(tmp_path, mr, FATAL_NI, v, original=FATAL_NI, runs=1,
                      planted="fatal-ni-by-health")
    text = path.read_text()
    assert "r.fault('flap', node='c1'" in text and "assert_safe(r)" in text
    # the faults stay on until the last one ends (the flap: 4.2 + 40), not only until the
    # shrunk run proved it (33.65): on Mininet the timers' phase picks the cycle (emit.py)
    assert "r.at(44.2)  # the end of the safety phase: the last fault's end" in text
    assert emit.safety_end(FATAL_NI, v) == 44.2
    assert emit.safety_end(FATAL_NI, runner.Violation("liveness", "health", "")) == 33.65
    assert "--seed 5 --planted-bug fatal-ni-by-health" in text

    def pytest_rc(bug: str) -> tuple[int, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env[PLANTED_ENV] = bug
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-p", "no:xdist", str(path), "--lnet-backend=sim"],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300, check=False)
        return res.returncode, res.stdout + res.stderr

    rc, out = pytest_rc("fatal-ni-by-health")
    assert rc == 1 and "first violated invariant: fatal_ni" in out, out[-2000:]
    rc, out = pytest_rc("")
    assert rc == 0, out[-2000:]


def test_liveness_forgets_what_a_restarted_node_had_heard() -> None:
    """A new incarnation's peer NIs have lpni_last_alive 0: not owed a recovery."""
    ev = liveness._Evidence()
    ev.feed([{"t": 5.0, "kind": "recv", "node": "c1", "peer": "10.10.0.2@tcp"}])
    assert ev.heard == {("c1", "10.10.0.2@tcp"): 5.0}
    ev.feed([{"t": 5.0, "kind": "recv", "node": "c1", "peer": "10.10.0.2@tcp"},
             {"t": 9.0, "kind": "node_restarted", "node": "c1"}])
    assert ev.heard == {}
    assert liveness._owed(False, None, True, 0, 100.0) == ""
    assert "heard from at t=5" in liveness._owed(False, 5.0, True, 0, 100.0)
    assert liveness._owed(False, 5.0, True, 10, 100.0) == ""  # aged out
    assert liveness._owed(True, None, True, 0, 100.0) == "still on the recovery queue"


def test_liveness_owes_a_peer_ni_of_the_nodes_own_nid_nothing_off_the_queue() -> None:
    """Explore seed 261: r2's recovery ping to its own NID timed out (an LNet delay rule held
    the REPLY), the response timeout blamed r2's peer NI of that NID (by NID, lib-move.c
    ``lnet_finalize_expired_responses``) before it was ever heard from, so it was not queued;
    the late REPLY then made it heard from without a health check. LNet keeps its own
    interfaces out of peer NI recovery (lib-msg.c ``lnet_health_check``): nothing brings it
    back, and the liveness phase must not ask for it; on the queue it is still owed."""
    assert liveness._owed(False, 217.0, True, 0, 700.0, own=True) == ""
    assert "heard from" in liveness._owed(False, 217.0, True, 0, 700.0)
    assert liveness._owed(True, 217.0, True, 0, 700.0, own=True) == \
        "still on the recovery queue"


def test_a_probe_a_router_dropped_for_a_peer_ni_it_held_down_is_owed_a_second_try(
        mr: topo.Topo) -> None:
    """Explore seed 758 (discovery 0, recovery_limit 0): r1's LND notified s1's 10.20.0.3 dead
    during the faults (``lnet_notify``), its health stayed 1000 so nothing refreshed the DOWN
    status after the heal; the liveness probe from c1 was the first message r1 forwarded to it
    and r1 dropped it (lib-move.c ``lnet_check_message_drop``, REMOTE_DROPPED, no resend to a
    single-NI peer), which sent the NI into recovery and its ping brought it back. c1 only saw
    its ACK never come: a second probe is owed, and it must complete."""
    drop = {"kind": "msg", "event": "send", "forwarded": True, "dropped": "REMOTE_DROPPED",
            "node": "r1", "lpni": "10.20.0.3@tcp1", "dst": "10.20.0.3@tcp1"}
    assert liveness.router_dropped([drop], "10.20.0.3@tcp1")
    assert not liveness.router_dropped([drop], "10.21.0.3@tcp1")
    assert not liveness.router_dropped([{**drop, "forwarded": False}], "10.20.0.3@tcp1")
    assert not liveness.router_dropped([{**drop, "dropped": "LOCAL_DROPPED"}], "10.20.0.3@tcp1")
    out = runner.run(mr, swarm.expand(swarm.swarm(mr, 758), mr, 600.0))
    assert out.ok, out.violation and out.violation.render()


def test_a_probe_whose_discovery_reply_a_router_dropped_is_owed_a_second_try(
        mr: topo.Topo) -> None:
    """Explore seeds 304, 625, 737, 826 (discovery 0, a node killed during the faults): the
    liveness probe from c1 to s1 waited on a discovery ping of s1; its REPLY came back
    through r2, which still held c1's 10.11.0.1 DOWN and dropped it (lib-move.c
    ``lnet_check_message_drop``, REMOTE_DROPPED), sending that NI into recovery, whose ping
    brought it back. c1 saw its ping time out and the PUT fail with -110 a transaction
    timeout later: a drop on the way back to the sender owes a second probe too."""
    drop = {"kind": "msg", "event": "send", "forwarded": True, "dropped": "REMOTE_DROPPED",
            "node": "r2", "type": "REPLY", "lpni": "10.11.0.1@tcp", "dst": "10.11.0.1@tcp"}
    c1 = liveness.own_nids([{"kind": "ni_add", "node": "c1", "nid": "10.10.0.1@tcp"},
                            {"kind": "ni_add", "node": "c1", "nid": "10.11.0.1@tcp"},
                            {"kind": "ni_add", "node": "s1", "nid": "10.20.0.3@tcp1"}], "c1")
    assert c1 == {"10.10.0.1@tcp", "10.11.0.1@tcp"}
    assert liveness.router_dropped([drop], "10.20.0.3@tcp1", c1)
    assert not liveness.router_dropped([drop], "10.20.0.3@tcp1")
    assert not liveness.router_dropped([drop], "10.20.0.3@tcp1", {"10.10.0.1@tcp"})
    out = runner.run(mr, swarm.expand(swarm.swarm(mr, 304), mr, 600.0))
    assert out.ok, out.violation and out.violation.render()


def test_a_peer_ni_lowered_before_it_was_heard_from_and_untried_since_is_owed_nothing(
        mr: topo.Topo) -> None:
    """Explore seed 628: r1 restarted; s1's ping reply reported 10.20.0.3 DOWN, a remote
    failure that took its health to 0 while r1 had never heard from it (lpni_last_alive 0:
    peer.c ``lnet_peer_ni_add_to_recoveryq_locked`` refuses it); the GETs later heard from it
    had their REPLYs fail (one health check, tx side, a local failure), and nothing else
    tried to queue it. Real LNet leaves it at 0 off the queue; a failure or health change
    after the first receive still makes it owed."""
    nid = "10.20.0.3@tcp1"
    lowered = [{"t": 1.0, "kind": "node_restarted", "node": "r1"},
               {"t": 2.0, "kind": "lpni_health", "node": "r1", "nid": nid, "new": 0},
               {"t": 2.0, "kind": "lpni_error", "node": "r1", "nid": nid},
               {"t": 3.0, "kind": "recv", "node": "r1", "peer": nid}]
    ev = liveness._Evidence()
    ev.feed(lowered)
    assert ev.never_queued("r1", nid)
    ev.feed([*lowered, {"t": 4.0, "kind": "lpni_error", "node": "r1", "nid": nid}])
    assert not ev.never_queued("r1", nid)  # failed once heard from: queued
    heard_first = [lowered[0], lowered[3], *lowered[1:3]]
    ev = liveness._Evidence()
    ev.feed(heard_first)
    assert not ev.never_queued("r1", nid)
    ev = liveness._Evidence()
    ev.feed([*lowered, {"t": 5.0, "kind": "node_restarted", "node": "r1"}])
    assert not ev.never_queued("r1", nid)  # a new incarnation knows nothing yet
    out = runner.run(mr, swarm.expand(swarm.swarm(mr, 628), mr, 600.0))
    assert out.ok, out.violation and out.violation.render()


@pytest.mark.parametrize(("argv", "message"), [
    (["--seeds", "0"], "explore: --seeds must be at least 1, not 0"),
    (["--seed", "1", "--seeds", "2"], "explore: give --seeds N or --seed S, not both"),
    (["--time", "5"], "explore: --time must be 10..86400 virtual seconds, not 5"),
    (["--planted-bug", "nope"], "explore: --planted-bug: unknown planted bug 'nope'"),
])
def test_cli_errors_are_one_line(argv: list[str], message: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explore", str(MR), *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_one_seed_prints_swarm_verdict_and_figures(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explore", str(MR), "--seed", "6", "--time", "30", "--workers",
                     "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 6: faults ") and "  ok (" in out
    assert "summary: 1 seeds, 1 ok, 0 failed" in out and "x real time" in out


def test_cli_a_failure_says_how_to_reproduce(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explore", str(MR), "--seed", "5", "--time", "150", "--workers", "0",
                     "--planted-bug", "fatal-ni-by-health"]) == 1
    out = capsys.readouterr().out
    assert "first violated invariant: fatal_ni (safety phase)" in out
    assert (f"reproduce with: testbed explore {MR} --seed 5 --planted-bug "
            "fatal-ni-by-health") in out


def test_a_worker_crash_names_the_project_frame_it_went_through() -> None:
    """An engine crash found by a seed is reported as one line with where it happened (a
    recursion: the frame that repeats), so the failure is actionable."""
    def loop(n: int) -> int:
        return loop(n + 1)

    try:
        loop(0)
    except RecursionError as exc:
        text = pool.describe(exc)
    assert text.startswith("RecursionError: maximum recursion depth exceeded")
    assert "(at tests/unit/test_explore.py" not in text  # tests/ is not a project frame
    try:
        topo.load(ROOT / "no-such-topology.yaml")
    except Exception as exc:  # whatever it raises, described in one line
        text = pool.describe(exc)
    assert "\n" not in text and "(at testbed/" in text


def test_a_long_router_queue_failing_at_once_does_not_recurse(mr: topo.Topo) -> None:
    """Explore seed 341 (120 s): a router returning credits woke a queued forward whose send
    failed at once, which returned its credits and woke the next, one stack frame set per
    queued message (``lnet_return_rx_credits_locked`` -> ``take_buffer`` -> send ->
    ``finalize_tx`` -> ...) until RecursionError. Now the waiters run in a loop."""
    sch = swarm.expand(swarm.swarm(mr, 341), mr, 120)
    res = runner.run(mr, sch)
    assert res.sends > 0 and res.virtual >= 120
