"""Network and process faults on real Mininet testbeds, as a user observes them (issue 5).

Each test brings up its own testbed (``testbed_factory``: unique names, downed and checked for
leftovers at teardown) and checks, besides the effect, that reverting a fault leaves no
iptables rule, qdisc or interposer behind (``tb.fault.residue()``). ICMP probes come from
``faults.icmpping`` (the host has no ``ping``) run inside a node's namespace.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from itkit import PROJECT_ROOT, pytestmark, settle_peers  # noqa: F401  (the marks)

from testbed import runstate
from testbed.clean import leftovers
from testbed.mininet import MininetTestbed
from testbed.pytest.plugin import wait_for

FAST = """
name: ft
global: {health_sensitivity: 100, retry_count: 1, transaction_timeout: 2}
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
  lan1: {lnet: tcp, subnet: 10.11.0.0/24}
nodes:
  c1: {interfaces: [lan0, lan1], peers: [s1]}
  s1: {interfaces: [lan0, lan1], peers: [c1]}
"""


def icmp(tb: MininetTestbed, node: str, dst: str, count: int = 20, interval: float = 0.005,
         wait: float = 0.5, size: int = 56, linger: bool = False) -> dict[str, Any]:
    res = tb.node(node).exec([sys.executable, "-m", "faults.icmpping", dst, "-c", str(count),
                              "-i", str(interval), "-W", str(wait), "-s", str(size),
                              *(["--linger"] if linger else [])])
    assert res.rc == 0, res.err
    return json.loads(res.out)


def challenge_acks(tb: MininetTestbed, node: str) -> int:
    """TCP challenge ACKs the node's kernel sent (``nstat``, per network namespace)."""
    out = tb.node(node).exec(["nstat", "-az", "TcpExtTCPChallengeACK"]).out
    return int(next(ln.split()[1] for ln in out.splitlines() if "ChallengeACK" in ln))


def clean_after(tb: MininetTestbed) -> None:
    tb.fault.clear()
    assert tb.fault.residue() == []


@pytest.fixture
def fast_topology(tmp_path: Path) -> Path:
    path = tmp_path / "ft.yaml"
    path.write_text(FAST)
    return path


def test_loss_counts_and_seeded_replay(testbed_factory: Any) -> None:
    tb = testbed_factory()
    f = tb.fault.loss(node="c1", rate=0.5, seed=7, match={"proto": "icmp"})
    first = icmp(tb, "c1", "10.10.0.2", count=60)
    final = tb.fault.delete(f["id"])
    assert 10 <= len(first["lost"]) <= 50
    assert final["counters"]["dropped"] == len(first["lost"])
    assert final["counters"]["matched"] == 60
    assert tb.fault.residue() == []
    tb.fault.loss(node="c1", rate=0.5, seed=7, match={"proto": "icmp"})
    again = icmp(tb, "c1", "10.10.0.2", count=60)
    assert again["lost"] == first["lost"]  # same seed, same packets: same decisions
    clean_after(tb)
    assert icmp(tb, "c1", "10.10.0.2", count=10)["lost"] == []
    kinds = [e["kind"] for e in tb.events() if e["kind"].startswith("fault_")]
    assert kinds.count("fault_applied") == 2 and kinds.count("fault_reverted") == 2
    reverted = next(e for e in tb.events() if e["kind"] == "fault_reverted")
    assert reverted["seed"] == 7 and reverted["counters"]["dropped"] == len(first["lost"])


def timed_ping(c1: Any) -> float:
    """Seconds one ``lnetctl ping`` (an LNet GET out of c1's eth0 NI) takes."""
    t0 = time.monotonic()
    assert c1.lnetctl("ping", "--source", "10.10.0.1@tcp", "10.10.0.2@tcp").rc == 0
    return time.monotonic() - t0


def test_delay_seen_by_icmp_and_lnetctl_ping(testbed_factory: Any) -> None:
    """A 40 +/- 2 ms egress delay on c1's eth0, seen by ICMP and by LNet.

    A loaded host can only make a round trip longer, never shorter, so the delay is bounded
    below exactly (nothing back before delay - jitter) and above by the fastest of many
    samples (the one the scheduler disturbed least), never by one wall-clock reading or by a
    wall-clock baseline; the interposer's own count shows LNet's packets were the held ones."""
    tb = testbed_factory()
    c1 = tb.node("c1")
    c1.lnetctl("ping", "10.10.0.2@tcp")  # connection up before timing
    f = tb.fault.delay(node="c1", iface="eth0", delay=40, jitter=2, seed=3)
    probe = icmp(tb, "c1", "10.10.0.2", count=40, interval=0.01)
    rtts = list(probe["rtt_ms"].values())
    assert probe["lost"] == [] and min(rtts) >= 38.0, rtts  # every request held >= 38 ms
    assert min(rtts) < 50.0, rtts  # held once, about 40 ms (not twice, not in seconds)
    assert probe["order"] == sorted(probe["order"])  # jitter without reorder keeps order
    pings = [timed_ping(c1) for _ in range(3)]
    assert min(pings) >= 0.038, pings  # each GET held on its way out
    delayed = tb.fault.delete(f["id"])["counters"]["delayed"]
    assert delayed >= 40 + 3, delayed  # besides the 40 echo requests, LNet's TCP segments
    clean_after(tb)


def test_reorder_duplicate_corrupt_on_icmp(testbed_factory: Any) -> None:
    tb = testbed_factory()
    tb.fault.reorder(node="c1", rate=0.3, gap=2, seed=2, match={"proto": "icmp"})
    order = icmp(tb, "c1", "10.10.0.2", count=20, interval=0.01)["order"]
    assert sorted(order) == list(range(20)) and order != sorted(order)
    tb.fault.clear()
    tb.fault.duplicate(node="c1", match={"proto": "icmp"})
    # lingering: a duplicate that comes after the last first reply counts too
    assert icmp(tb, "c1", "10.10.0.2", count=10, linger=True)["dups"] == 10
    tb.fault.clear()
    f = tb.fault.corrupt(node="c1", rate=1.0, bits=2, csum="bad", match={"proto": "icmp"})
    bad = icmp(tb, "c1", "10.10.0.2", count=10, wait=0.3)
    assert bad["received"] == 0  # every request reached s1 with a bad checksum
    assert tb.fault.delete(f["id"])["counters"]["corrupted"] == 10
    clean_after(tb)


def test_gilbert_elliott_loss_is_bursty(testbed_factory: Any) -> None:
    tb = testbed_factory()
    tb.fault.loss(node="c1", p=0.05, r=0.3, seed=11, match={"proto": "icmp"})
    lost = set(icmp(tb, "c1", "10.10.0.2", count=300, interval=0.001)["lost"])
    runs, run = [], 0
    for seq in range(300):
        if seq in lost:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    assert lost and statistics.mean(runs) > 1.8  # bad-state bursts, mean 1/r
    clean_after(tb)


def test_blackhole_lowers_health_of_that_rail_only(testbed_factory: Any,
                                                   tmp_path: Path) -> None:
    """The rails are separate LNet nets here (tcp, tcp1): on one net spanning both subnets
    LNet may pair c1's lan1 NI with s1's lan0 NID (selection ignores IP subnets, spec §2.5),
    and that cross path leaves through the blackholed interface too, so "the other rail"
    would not be one."""
    path = tmp_path / "ft2.yaml"
    path.write_text(FAST.replace("lan1: {lnet: tcp,", "lan1: {lnet: tcp1,"))
    tb = testbed_factory(path)
    c1 = tb.node("c1")
    settle_peers(tb)  # the static peers discovered before the rail goes dark (spec §5.3)
    tb.fault.blackhole(node="c1", iface="eth0")
    assert icmp(tb, "c1", "10.10.0.2", count=3, wait=0.2)["received"] == 0
    assert icmp(tb, "c1", "10.11.0.2", count=3)["received"] == 3  # carrier up, other rail ok
    reply = c1.put("10.10.0.2@tcp", count=20, size=1000)
    assert reply["completed"] >= 10  # the other rail carried traffic
    peers = c1.lnetctl_yaml("peer", "show", "-v", "3")["peer"][0]["peer ni"]
    health = {p["nid"]: p["health stats"]["health value"] for p in peers}
    assert health["10.10.0.2@tcp"] < 1000 and health["10.11.0.2@tcp1"] == 1000
    clean_after(tb)
    assert icmp(tb, "c1", "10.10.0.2", count=3)["received"] == 3


def test_rst_kills_connection_and_socklnd_reconnects(testbed_factory: Any,
                                                    fast_topology: Path) -> None:
    tb = testbed_factory(fast_topology)
    c1 = tb.node("c1")
    assert c1.lnetctl("ping", "--source", "10.10.0.1@tcp", "10.10.0.2@tcp").rc == 0
    settle_peers(tb)  # the PUTs below go at once, not after a discovery round (spec §5.3)
    f = tb.fault.rst(node="c1", iface="eth0")
    c1.put("10.10.0.2@tcp", count=4, size=100)
    log = runstate.node_log(tb.rundir, "c1")
    s1_log = runstate.node_log(tb.rundir, "s1")
    wait_for(lambda: "Connection reset by peer" in log.read_text()
             and "Connection reset by peer" in s1_log.read_text(), timeout=5)
    # each forged RST resets its end directly (issue 11 item 11): one out of the receiver's
    # window earns a challenge ACK (RFC 5961 §3.2) and the reset then depends on the other
    # end answering it
    assert challenge_acks(tb, "s1") == 0 and challenge_acks(tb, "c1") == 0
    assert tb.fault.delete(f["id"])["counters"]["rst"] == 1
    assert c1.lnetctl("ping", "--source", "10.10.0.1@tcp", "10.10.0.2@tcp").rc == 0
    ups = [ln for ln in log.read_text().splitlines()
           if "connection up: 10.10.0.1@tcp -> 10.10.0.2@tcp" in ln]
    assert len(ups) >= 2  # re-established after the reset
    clean_after(tb)


def test_one_way_partition_lets_replies_through(testbed_factory: Any) -> None:
    tb = testbed_factory()
    tb.fault.partition(a=["c1"], b=["s1"], oneway=True)
    assert icmp(tb, "c1", "10.10.0.2", count=5, wait=0.2)["received"] == 0
    assert icmp(tb, "s1", "10.10.0.1", count=5)["received"] == 5  # s1 asks, c1 answers
    tb.fault.clear()
    tb.fault.partition(a=["c1"], b=["s1"])
    assert icmp(tb, "s1", "10.11.0.1", count=3, wait=0.2)["received"] == 0
    clean_after(tb)
    assert icmp(tb, "c1", "10.10.0.2", count=3)["received"] == 3


def test_flap_carrier_with_schedule_and_bandwidth(testbed_factory: Any) -> None:
    tb = testbed_factory()
    f = tb.fault.flap(node="c1", iface="eth0", down=0.3, up=0.2, count=2, seed=5)
    wait_for(lambda: next(x for x in tb.fault.list() if x["id"] == f["id"])["state"] == "done",
             timeout=5)
    links = [e["kind"] for e in tb.events() if e["kind"].startswith("link_")]
    assert links == ["link_down", "link_up", "link_down", "link_up"]
    assert tb.status()["nodes"]["c1"]["interfaces"]["eth0"]["state"] == "up"
    t0 = time.monotonic()
    tb.fault.carrier(node="c1", iface="eth1", start=1.0, duration=1.0)
    assert tb.status()["nodes"]["c1"]["interfaces"]["eth1"]["state"] == "up"
    assert time.monotonic() - t0 < 1.0  # checked before the scheduled start

    def eth1_link() -> list[str]:
        return [e["kind"] for e in tb.events()
                if e["kind"].startswith("link_") and e.get("iface") == "eth1"]

    wait_for(lambda: eth1_link() == ["link_down"], timeout=5)
    assert icmp(tb, "c1", "10.11.0.2", count=2, wait=0.1)["received"] == 0
    wait_for(lambda: eth1_link() == ["link_down", "link_up"], timeout=5)
    wait_for(lambda: icmp(tb, "c1", "10.11.0.2", count=1, wait=0.2)["received"] == 1,
             timeout=5)
    tb.fault.bandwidth(node="c1", iface="eth0", bw="2mbit", burst="4kb")
    t0 = time.monotonic()
    icmp(tb, "c1", "10.10.0.2", count=40, interval=0.0, size=1400, wait=2)
    assert time.monotonic() - t0 > 0.15  # 40 x 1.4 kB at 2 Mbit/s is ~0.23 s
    clean_after(tb)


def test_lnet_type_targeting_and_stall(testbed_factory: Any, fast_topology: Path) -> None:
    tb = testbed_factory(fast_topology)
    c1 = tb.node("c1")
    assert c1.lnetctl("ping", "10.10.0.2@tcp").rc == 0
    # 52: lnet_selftest's bulk portal, where the daemon's PUT bursts go
    f = tb.fault.loss(node="c1", rate=1.0, match={"type": "PUT", "portal": 52})
    assert c1.lnetctl("ping", "10.10.0.2@tcp").rc == 0  # a GET: not matched
    reply = c1.put("10.10.0.2@tcp", count=3, size=100)
    assert reply["completed"] == 0
    gone = tb.fault.delete(f["id"])["counters"]
    assert gone["dropped"] >= 3 and gone["matched"] == gone["dropped"]
    # flip a bit of the top byte of the PUT's lnet_hdr type (TCP payload byte 24 + 27), TCP
    # checksum fixed: the segment is accepted, s1's socklnd sees a bad frame and closes
    tb.fault.corrupt(node="c1", offset=51, span=1, bits=1, match={"type": "PUT"})
    c1.put("10.10.0.2@tcp", count=2, size=100)
    s1_log = runstate.node_log(tb.rundir, "s1")
    wait_for(lambda: "bad LNet message type" in s1_log.read_text(), timeout=5)
    tb.fault.clear()
    s = tb.fault.stall(node="c1", iface="eth1", duration=1.0)
    assert s["state"] == "active"
    assert c1.put("10.11.0.2@tcp", count=1, size=100)["completed"] == 1
    clean_after(tb)


def test_process_faults_stop_kill_restart(testbed_factory: Any) -> None:
    tb = testbed_factory()
    old = tb.status()["nodes"]["s1"]["pid"]
    # (long enough that a loaded box still reads the stopped state before the resume)
    tb.fault.stop(node="s1", duration=3.0)
    assert "State:\tT" in Path(f"/proc/{old}/status").read_text()
    wait_for(lambda: "State:\tT" not in Path(f"/proc/{old}/status").read_text(), timeout=10)
    tb.fault.restart(node="s1")
    new = tb.status()["nodes"]["s1"]["pid"]
    assert new != old and tb.status()["nodes"]["s1"]["alive"]
    nets = tb.node("s1").lnetctl_yaml("net", "show")["net"]
    assert [ni["nid"] for n in nets for ni in n["local NI(s)"]][1:] == [
        "10.10.0.2@tcp", "10.11.0.2@tcp"]  # configuration re-applied
    assert tb.node("c1").lnetctl("ping", "10.10.0.2@tcp").rc == 0
    tb.fault.kill(node="s1", duration=0.3)
    wait_for(lambda: any(e["kind"] == "node_restarted" and e["pid"] != new
                         for e in tb.events()), timeout=30)
    assert tb.node("s1").lnetctl("net", "show").rc == 0
    clean_after(tb)


def test_yaml_faults_cli_events_and_bad_input(testbed_factory: Any, tmp_path: Path) -> None:
    topo = tmp_path / "fy.yaml"
    topo.write_text(FAST + "faults:\n  - {kind: loss, node: c1, rate: 1.0, seed: 9, "
                    "name: lossy, match: {proto: icmp}}\n")
    tb = testbed_factory(topo)
    assert [(f["name"], f["state"], f["seed"]) for f in tb.fault.list()] == [
        ("lossy", "active", 9)]
    assert icmp(tb, "c1", "10.10.0.2", count=3, wait=0.2)["received"] == 0
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT),
               **{runstate.ENV_RUNROOT: str(tb.root)})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "testbed.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60, check=False)

    out = cli("fault", "-n", tb.name, "add", "delay", "node=s1", "delay=5", "seed=4")
    assert out.returncode == 0 and "seed 4" in out.stdout
    listing = cli("fault", "-n", tb.name, "list").stdout
    assert "name=lossy" in listing and "dropped=3" in listing
    assert re.search(r"^f2 +delay ", listing, re.M), listing
    bad = cli("fault", "-n", tb.name, "add", "loss", "node=c1", "rate=2")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "rate: 2.0 out of range" in bad.stderr and "Traceback" not in bad.stderr
    assert cli("fault", "-n", tb.name, "del", "lossy").returncode == 0
    assert cli("fault", "-n", tb.name, "clear").returncode == 0
    events = [json.loads(x) for x in cli("events", "-n", tb.name, "--json").stdout.splitlines()]
    assert {"fault_added", "fault_applied", "fault_reverted", "fault_deleted"} <= {
        e["kind"] for e in events}
    assert tb.fault.residue() == []


def test_kill_9_of_supervisor_leaves_nothing_after_clean(testbed_factory: Any) -> None:
    tb = testbed_factory()
    tb.fault.delay(node="c1", delay=10)
    tb.fault.bandwidth(node="c1", iface="eth0", bw="10mbit", direction="in")
    state = runstate.read_state(tb.rundir)
    pid = state["supervisor_pid"]
    inter = [r["pid"] for f in state["faults"].values() for r in f["resources"]
             if r["type"] == "interposer"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not runstate.pid_alive(pid), timeout=5)
    assert any("interposer process" in x for x in leftovers(tb.name, tb.root))
    removed = tb.down()
    assert any(f"interposer process {inter[0]}" in x for x in removed)
    assert leftovers(tb.name, tb.root) == []


def test_every_put_of_a_burst_is_matched_and_counted_at_once(testbed_factory: Any,
                                                             fast_topology: Path) -> None:
    """Issue 32 items 2 and 3: a ``type: PUT`` rule follows c1's socklnd stream, so each of
    300 PUTs of 4 KiB is classified and the segments carrying them are acted on (here: a
    loss rule at rate 0, every matched segment decided and accepted); the counters read right
    after the burst already hold all of them (they lagged ~1 s before)."""
    tb = testbed_factory(fast_topology)
    c1 = tb.node("c1")
    assert c1.lnetctl("ping", "10.10.0.2@tcp").rc == 0  # the connection exists before the rule
    f = tb.fault.loss(node="c1", rate=0.0, match={"type": "PUT", "portal": 52})  # both rails
    reply = c1.put("10.10.0.2@tcp", count=300, size=4096)
    assert reply["completed"] == 300, reply
    c = next(x for x in tb.fault.list() if x["id"] == f["id"])["counters"]
    assert c["messages_matched"] == 300, c
    assert c["matched"] >= 300 * 4192 // 65536 and c["accepted"] == c["seen"], c
    assert c["flow_bytes"] < 4096 * max(1, c["flows"]), c
    clean_after(tb)
