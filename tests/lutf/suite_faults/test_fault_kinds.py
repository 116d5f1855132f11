"""Each packet fault kind, measured by its effect on LNet, on Mininet, on the simulator and on
LXC guests (issue 32 item 1; run with ``--lnet-backend=sim`` for the simulator's models,
testbed/sim/netmodels.py, or ``--lnet-backend=hosts`` for namespaces through the host agent).
The LXC leg (``test_fault_kind_on_lxc_guests``, marked ``lxc_guests``: ``make smoke-vagrant``
runs it after the boxes are built, ``make test`` leaves it out) brings one_rail.yaml up once on
two ``--backend vagrant`` LXC guests and runs the same checks there: the interposer and tc
inside c1's guest, through its host agent (testbed/vagrant/agentfaults.py).

One rail (``one_rail.yaml``), c1 -> s1 traffic from the daemon's PUT bursts (portal 52) and
LNet pings; the fault on c1's egress. What is asserted is what LNet (or its socklnd) can see of
the fault, the same numbers on both backends:

* loss: TCP retransmits, so every PUT completes; the fault's drop rate within 2 points of the
  rate asked (Mininet: segments dropped of segments matched; sim: lost attempts of attempts);
* delay: each delayed GET held for the delay asked (median within 1 ms), measured on the
  packets between c1's egress hooks and its wire (sim: the round trip); delay_round_trip, on
  an idle host: the median LNet ping round trip grows by the delay added;
* rst: both daemons log the connection reset by peer (ksocknal_close_conn_and_siblings on
  ECONNRESET, both ends), and the next ping reconnects;
* reorder, duplicate: TCP hands the LND the same byte stream (no protocol error, each message
  received once: s1's recv_count grows by c1's send_count), at the rate asked (within 5
  points);
* corrupt: a bit of the PUT's lnet_hdr ``type`` top byte flipped, checksum fixed: s1's socklnd
  refuses the frame ("bad LNet message type", as ksocknal_process_receive) and closes;
* stall: a PUT sent into a 1 s stall completes when it ends (within 0.3 s of the
  ``fault_reverted`` event), none fails;
* bandwidth: a tbf / token bucket of 20 Mbit/s: PUT goodput within 5 % of the cap less the
  headers' share (66 bytes per 1448-byte segment).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from faults import wiretime
from testbed.clean import leftovers
from testbed.pytest.plugin import wait_for
from testbed.vagrant.boxes import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.topology("one_rail.yaml")]

S1 = "10.10.0.2@tcp"
PUT52 = {"type": "PUT", "portal": 52}


def _stats(node: Any) -> dict[str, int]:
    return dict(node.lnetctl_yaml("stats", "show")["statistics"])


def _rtt(tb: Any, node: Any, n: int) -> float:
    """Median seconds of ``n`` LNet pings to s1 (the testbed's clock)."""
    rtts = []
    for _ in range(n):
        t0 = tb.now
        assert node.ping(S1).rc == 0
        rtts.append(tb.now - t0)
    return statistics.median(rtts)


def _measured(kind: str, **figures: Any) -> None:
    """One line of what a kind measured (``pytest -rP`` shows it; the CI's logs keep it)."""
    print(f"measured {kind}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _sim(tb: Any) -> bool:
    return type(tb).__name__.startswith("Sim")


def _mininet(tb: Any) -> bool:
    return type(tb).__name__.startswith("Mininet")


def loss(tb: Any) -> None:
    c1 = tb.node("c1")
    f = tb.fault.loss(node="c1", rate=0.1, seed=4, match=PUT52)
    reply = c1.put(S1, count=1000, size=4096)
    c = tb.fault.delete(f["id"])["counters"]
    assert reply["completed"] == 1000, reply
    if _sim(tb):  # each lost attempt is a retransmission of the message
        measured = c["retransmits"] / (1000 + c["retransmits"])
    else:
        measured = c["dropped"] / c["matched"]
    _measured("loss", rate=round(measured, 4), asked=0.1, counters=c)
    assert abs(measured - 0.1) <= 0.02, c


def _runnable() -> int:
    """Tasks runnable now (``/proc/loadavg``'s fourth field, this one left out), the most of
    five looks 0.1 s apart: the 1-minute average still counts a parallel suite that ended."""
    seen = 0
    for _ in range(5):
        with open("/proc/loadavg") as f:
            seen = max(seen, int(f.read().split()[3].split("/")[0]) - 1)
        time.sleep(0.1)
    return seen


def delay(tb: Any) -> None:
    """A delay on c1's GETs (the LNet ping's request) holds each GET for the delay asked:
    the median of the time each GET spent between c1's egress hooks (before the interposer)
    and c1's wire (after it), both stamped by the kernel (faults/wiretime.py), within 1 ms
    of the delay, at 1 ms and at 21 ms, on every run whatever the load: the stamps are the
    kernel's, and the interposer runs SCHED_FIFO (faults/timely.py; on LXC guests too, with
    their cgroup's real-time budget, testbed/vagrant/rtbudget.py), its release lateness held
    to 1 ms at p95 (``late_us_p95``). The simulator's virtual clock: the round trip, exact.
    """
    c1 = tb.node("c1")
    if _sim(tb):
        delay_round_trip(tb)
        return
    for ms in (1.0, 21.0):
        out = f"/tmp/{tb.name}-wiretime-{int(ms)}.json"
        pid = wiretime.start(c1, S1.split("@")[0], out,
                             sys.executable if _mininet(tb) else "python3")
        f = tb.fault.delay(node="c1", delay=ms, match={"type": "GET"})
        for _ in range(50):
            assert c1.ping(S1).rc == 0
        c = tb.fault.delete(f["id"])["counters"]
        wire = wiretime.stop(c1, pid, out)
        held = wire["added_us"]
        _measured("delay", asked_ms=ms, held_median_ms=statistics.median(held or [0]) / 1000,
                  gets=len(held), late_us_p95=c.get("late_us_p95"), realtime=c.get("realtime"))
        assert len(held) >= 50 and c["delayed"] >= 50, (c, wire)  # each ping's GET
        assert abs(statistics.median(held) / 1000 - ms) <= 1.0, (ms, sorted(held))
        assert c["realtime"] == 1 and c["late_us_p95"] <= 1000, c


def delay_round_trip(tb: Any) -> None:
    """20 ms more delay on the ping's GET adds 20 ms to the median LNet ping round trip, on
    an idle host (the ``delay`` check holds on the packets whatever the load). The reference
    is a 1 ms delay, not none: a held GET lets both daemons fall asleep, and waking them
    costs time no delay setting should be blamed for. On a loaded host the daemons' and this
    client's wake-ups after sleeping through the hold (normal tasks: a 21 ms sleep overslept
    p95 3.8 ms at 20 runnable tasks on 2 CPUs, benchmarks/README.md) add milliseconds: skipped
    when more tasks are runnable than CPUs. The simulator: exact."""
    c1 = tb.node("c1")
    medians = []
    for ms in (1.0, 21.0):
        f = tb.fault.delay(node="c1", delay=ms, match={"type": "GET"})
        medians.append(_rtt(tb, c1, 50))
        tb.fault.delete(f["id"])
    added = (medians[1] - medians[0]) * 1000
    _measured("delay_round_trip", added_ms=round(added, 3), asked_ms=20.0)
    if _sim(tb):  # the virtual clock: exact
        assert abs(added - 20.0) <= 1.0, medians
        return
    load = _runnable()
    if load > (os.cpu_count() or 1):
        pytest.skip(f"round trips need an idle host (the delay kind checks each GET's hold "
                    f"on the packets): {load} tasks runnable on {os.cpu_count()} CPUs wake "
                    f"the daemons milliseconds late")
    # never less than asked; waking two daemons on a busy 2-core host in a parallel suite
    # measured up to +1.2 ms more (make test, 2026-12-03): 3 ms of slack above
    assert -1.0 <= added - 20.0 <= 3.0, medians


def rst(tb: Any) -> None:
    c1, s1 = tb.node("c1"), tb.node("s1")
    assert c1.ping(S1).rc == 0  # a connection to reset
    f = tb.fault.rst(node="c1", iface="eth0")
    c1.put(S1, count=4, size=100)
    wait_for(lambda: all("Connection reset by peer" in n.log() for n in (c1, s1)), timeout=5)
    c = tb.fault.delete(f["id"])["counters"]
    _measured("rst", both_logged=True, counters=c)
    assert c["rst"] == 1
    assert c1.ping(S1).rc == 0  # socklnd reconnects


def _stream_kind(kind: str, counter: str, **params: Any) -> Callable[[Any], None]:
    def run(tb: Any) -> None:
        c1, s1 = tb.node("c1"), tb.node("s1")
        sent0, recv0 = _stats(c1)["send_count"], _stats(s1)["recv_count"]
        errors0 = s1.log().count("protocol error")  # (a shared testbed: corrupt's are older)
        f = tb.fault.add(kind, node="c1", seed=9, match=PUT52, **params)
        reply = c1.put(S1, count=600, size=4096)
        c = tb.fault.delete(f["id"])["counters"]
        assert reply["completed"] == 600 and reply["failed"] == 0, reply
        sent = _stats(c1)["send_count"] - sent0
        assert _stats(s1)["recv_count"] - recv0 == sent  # each message once, none lost
        assert s1.log().count("protocol error") == errors0
        _measured(kind, rate=round(c[counter] / c["matched"], 4), asked=params["rate"],
                  sent=sent, completed=reply["completed"])
        assert abs(c[counter] / c["matched"] - params["rate"]) <= 0.05, c
    return run


def corrupt(tb: Any) -> None:
    c1, s1 = tb.node("c1"), tb.node("s1")
    assert c1.ping(S1).rc == 0
    f = tb.fault.corrupt(node="c1", offset=51, span=1, bits=1, match=PUT52)
    c1.put(S1, count=2, size=100)
    wait = 0
    while "bad LNet message type" not in s1.log() and wait < 50:
        c1.ping(S1)  # (the clock of either backend moves on)
        wait += 1
    tb.fault.delete(f["id"])
    _measured("corrupt", refused="bad LNet message type" in s1.log(), pings=wait)
    assert "bad LNet message type" in s1.log()


def stall(tb: Any) -> None:
    c1 = tb.node("c1")
    assert c1.ping(S1).rc == 0
    f = tb.fault.stall(node="c1", duration=1.0)
    t0 = tb.now
    reply = c1.put(S1, count=1, size=4096)
    done = tb.now
    assert reply["completed"] == 1 and reply["failed"] == 0, reply
    def reverted() -> list[float]:
        return [e["t"] for e in tb.events()
                if e["kind"] == "fault_reverted" and e.get("id") == f["id"]]

    wait_for(reverted, timeout=5)
    (end,) = reverted()
    _measured("stall", held_s=round(done - t0, 3), after_end_s=round(done - end, 3))
    # held until the stall ended (its clock starts when the fault is applied, before the
    # interposer is ready on Mininet), delivered right after
    assert done - t0 >= 0.4 and abs(done - end) <= 0.3, (t0, end, done)


def bandwidth(tb: Any, node: str = "c1", direction: str = "out") -> None:
    """The cap on c1's egress; or on ``node``'s ``direction`` (s1's ingress: the
    bridge-side end of its link, on guests the NIC's device on the machine running them)."""
    c1 = tb.node("c1")
    assert c1.put(S1, count=4, size=1 << 16)["completed"] == 4  # connections up
    # a queue of 1 s at the cap: TCP fills it rather than losing to tbf's drops
    tb.fault.bandwidth(node=node, iface="eth0", bw="20mbit", burst="32kb", latency=1000.0,
                       direction=direction)
    count, size = 40, 1 << 16
    t0 = tb.now
    reply = c1.put(S1, count=count, size=size)
    took = tb.now - t0
    tb.fault.clear()
    assert reply["completed"] == count, reply
    frame = size + 96
    share = frame / (frame + -(-frame // 1448) * 66)
    expected = 20e6 / 8 * share
    goodput = count * size / took
    _measured("bandwidth", node=node, direction=direction, goodput_ratio=round(
        goodput / expected, 4))
    assert abs(goodput / expected - 1) <= 0.05, (goodput, expected)


KINDS: dict[str, Callable[[Any], None]] = {
    "loss": loss, "delay": delay, "delay_round_trip": delay_round_trip, "rst": rst,
    "reorder": _stream_kind("reorder", "reordered", rate=0.2, gap=3, hold=50.0),
    "duplicate": _stream_kind("duplicate", "duplicated", rate=0.5),
    "corrupt": corrupt, "stall": stall, "bandwidth": bandwidth,
}


@pytest.mark.mininet
@pytest.mark.requirement("hlth-dbg-sim-network-timeout")
@pytest.mark.parametrize("kind", [  # the round trip's bound: alone on the host (Makefile)
    pytest.param(k, marks=pytest.mark.idle_host) if k == "delay_round_trip" else k
    for k in sorted(KINDS)])
def test_fault_kind_has_its_measured_effect(topology: Any, kind: str) -> None:
    """One kind on c1's egress; the effect LNet sees, measured (module docstring)."""
    try:
        KINDS[kind](topology)
    finally:
        topology.fault.clear()


@pytest.fixture(scope="module")
def lxc_guests() -> Iterator[Any]:
    """one_rail.yaml on two LXC guests (one per node), brought up once for every kind."""
    why = unavailable("lxc")
    if why is not None:
        pytest.skip(f"LXC guests: {why}")
    import testbed

    name = f"vfaults-{uuid.uuid4().hex[:8]}"
    tb = testbed.up(Path(__file__).with_name("one_rail.yaml"), backend="vagrant",
                    provider="lxc", name=name)
    try:
        yield tb
    finally:
        tb.down()
    assert leftovers(name) == []


@pytest.mark.lxc_guests
@pytest.mark.requirement("hlth-dbg-sim-network-timeout")
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fault_kind_on_lxc_guests(lxc_guests: Any, kind: str) -> None:
    """The same kind and check on LXC guests: the fault made inside c1's guest by its host
    agent, its counters read back through it; nothing of it left after ``fault clear``."""
    try:
        KINDS[kind](lxc_guests)
    finally:
        lxc_guests.fault.clear()
    c1 = lxc_guests.node("c1")
    assert "lntb:" not in c1.exec(["iptables", "-S"]).out
    assert "tbf" not in c1.exec(["tc", "qdisc", "show"]).out


@pytest.mark.lxc_guests
def test_ingress_bandwidth_on_lxc_guests(lxc_guests: Any) -> None:
    """A cap on s1's ingress: tbf on its guest NIC's host-side veth (on this machine, where
    the packets to the guest are), the same goodput; the qdisc gone after ``fault clear``."""
    import subprocess

    from testbed import names

    port = names.port_name(lxc_guests.name, 0, 1)  # s1's NIC on segment 0, host side

    def tbf() -> bool:
        return "tbf" in subprocess.run(["tc", "qdisc", "show", "dev", port], check=True,
                                       capture_output=True, text=True).stdout

    lxc_guests.fault.bandwidth(node="s1", iface="eth0", bw="20mbit", direction="in")
    assert tbf()
    lxc_guests.fault.clear()
    assert not tbf()
    try:
        bandwidth(lxc_guests, node="s1", direction="in")
    finally:
        lxc_guests.fault.clear()
    assert not tbf()
