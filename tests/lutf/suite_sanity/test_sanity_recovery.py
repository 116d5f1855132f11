"""sanity-lnet.sh tests 210, 211, 216, 218, 235: local and remote NI recovery with the node's
own NIDs, at lustre-release c881f8ebcb. Real LNet sends a local NI's recovery ping to the NI's
own NID through the LND (lib-move.c ``lnet_recover_local_nis``), and a peer NI's to the peer
NI (``lnet_recover_peer_nis``; here the self peer's), where LNet drop rules apply
(docs/sanity-lnet.md E1/E3); the tests run with today's defaults (issue 14 item 1).

``check_ping_count ni|peer_ni NID N T``: the NI's or peer NI's ``ping_count`` (``net|peer show
-v 2``) reaches N within T s; ``check_nid_in_recovq -l|-p NID N``: NID is (N=1) or is not
(N=0) listed by ``debug recovery``. Waits use ``advance_until`` (wall clock on Mininet,
virtual time on the sim, where 211's schedule is asserted to the poll: the monitor walks the
queues every second, pings back off as 2**ping_count up to ``max_recovery_ping_interval``)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import advance_until
from lutf.suite_sanity.sanity import fails, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def _nis(s: Any) -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(s.lnetctl("net show -v 2").out)
    return {ni["nid"]: ni for net in doc["net"] for ni in net["local NI(s)"]}


def _ping_count(s: Any, nid: str) -> int:
    return int(_nis(s)[nid]["health stats"]["ping_count"])


def _in_recovq(s: Any, queue: str, nid: str) -> int:
    """``debug recovery -l|-p | grep -wc "nid-0: NID"``."""
    out = s.lnetctl(f"debug recovery {queue}").out
    return sum(1 for line in out.splitlines() if line.split() == ["nid-0:", nid])


def _check_ping_count(tb: Any, s: Any, nid: str, expect: int, max_wait: float) -> None:
    advance_until(tb, lambda: _ping_count(s, nid) == expect, max_wait,
                  f"ping_count {expect} of {nid}")


def _check_recovq(tb: Any, s: Any, queue: str, nid: str, expect: int,
                  max_wait: float = 10) -> None:
    advance_until(tb, lambda: _in_recovq(s, queue, nid) == expect, max_wait,
                  f"{expect} x {nid} in recovery {queue}")


def _drop(s: Any, rule: str) -> None:
    res = s.lctl(f"net_drop_add {rule}")
    assert res.rc == 0, res


def _fail_recovery_210(tb: Any, s: Any, prim: str, counts: tuple[int, int]) -> None:
    """Every GET on tcp and tcp1 fails (local_error), every other message is dropped; the NI
    at health 0 stays queued while its ping_count reaches each of ``counts``."""
    try:
        for net in ("tcp", "tcp1"):
            _drop(s, f"-s *@{net} -d *@{net} -m GET -r 1 -e local_error")
        for net in ("tcp", "tcp1"):
            _drop(s, f"-s *@{net} -d *@{net} -r 1")
        run(s, f"net set --health 0 --nid {prim}")
        for count in counts:
            _check_ping_count(tb, s, prim, count, 10)
            _check_recovq(tb, s, "-l", prim, 1)
    finally:
        s.lctl("net_drop_del -a")


def _setup_210(s: Any) -> str:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp1 --if eth0")
    prim = s.lctl("list_nids").out.split()[0]
    run(s, f"discover {prim}")
    return prim


def _global(s: Any, key: str) -> int:
    return int(yaml.safe_load(s.lnetctl("global show").out)["global"][key])


def test_sanity_210_local_ni_recovery_checks(tb: Any) -> None:
    s = tb.node("s")
    prim = _setup_210(s)
    default = _global(s, "recovery_limit")
    run(s, "set recovery_limit 10")
    # failed pings back off: 2nd at 0 + 2, 3rd at 2 + 4 (recovery_limit is for peer NIs)
    _fail_recovery_210(tb, s, prim, (2, 3))
    prim = _setup_210(s)
    run(s, f"set recovery_limit {default}")
    default = _global(s, "max_recovery_ping_interval")
    run(s, "set max_recovery_ping_interval 4")
    try:
        _fail_recovery_210(tb, s, prim, (2, 4))  # at most 4 s apart: 0, 2, 6, 10
    finally:
        run(s, f"set max_recovery_ping_interval {default}")


def test_sanity_216_failed_send_to_own_nid_is_not_peer_recovery(tb: Any) -> None:
    s = tb.node("s")
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp1 --if eth0")
    nids = s.lctl("list_nids").out.split()
    run(s, f"discover {nids[0]}")
    run(s, f"ping --source {nids[0]} {nids[0]}")
    run(s, f"ping --source {nids[1]} {nids[1]}")
    try:
        for src in nids:
            for dst in nids:
                _drop(s, f"-r 1 -s {src} -d {dst} -e network_timeout")
        fails(s, f"ping {nids[0]}")
    finally:
        s.lctl("net_drop_del -a")
    _check_recovq(tb, s, "-p", nids[0], 0)
    _check_recovq(tb, s, "-l", nids[0], 1)


def test_sanity_218_local_recovery_pings_exercise_all_paths(tb: Any) -> None:
    s = tb.node("s")
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    nid1 = s.lctl("list_nids").out.split()[0]
    run(s, f"ping {nid1}")
    run(s, "net add --net tcp --if eth1")
    nid2 = s.lctl("list_nids").out.split()[-1]
    run(s, f"ping {nid2}")
    try:
        _drop(s, f"-s {nid1} -d {nid1} -e local_error -r 1")
        fails(s, f"ping --source {nid1} {nid1}")
        # the sick NI's recovery ping leaves from the healthy one, so it gets through
        advance_until(tb, lambda: [ni["health stats"]["health value"]
                                   for ni in _nis(s).values()].count(1000) == 2, 5,
                      "both NIs back at health 1000")
    finally:
        s.lctl("net_drop_del -a")


def test_sanity_235_ni_status_down_at_health_0_after_failures(tb: Any) -> None:
    s = tb.node("s")
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp1 --if eth0")
    nid1, nid2 = s.lctl("list_nids").out.split()

    def status(nid: str) -> str:
        return str(_nis(s)[nid]["status"])

    assert status(nid1) == "up" and status(nid2) == "up"
    try:
        _drop(s, f"-s {nid1} -d {nid1} -m GET -r 1 -e local_timeout")
        run(s, f"net set --health 100 --nid {nid1}")
        # the failing recovery ping takes the last 100: health 0, status down
        advance_until(tb, lambda: status(nid1) == "down", 60, f"{nid1} down")
        assert status(nid2) == "up"
    finally:
        s.lctl("net_drop_del -a")
    run(s, f"net set --health 900 --nid {nid1}")
    advance_until(tb, lambda: status(nid1) == "up", 60, f"{nid1} up")


def _peer_ping_count(s: Any, nid: str) -> int:
    """``check_ping_count peer_ni``: the ping_count of peer NI ``nid`` (``peer show -v 2``)."""
    doc = yaml.safe_load(s.lnetctl(f"peer show -v 2 --nid {nid}").out)
    for lpni in (lpni for peer in doc["peer"] for lpni in peer["peer ni"]):
        if lpni["nid"] == nid:
            return int(lpni["health stats"]["ping_count"])
    raise AssertionError(f"no peer NI {nid}")


def _fail_211(s: Any) -> None:
    """Every GET on tcp and tcp1 fails (remote_error), every other message is dropped."""
    for net in ("tcp", "tcp1"):
        _drop(s, f"-s *@{net} -d *@{net} -m GET -r 1 -e remote_error")
    for net in ("tcp", "tcp1"):
        _drop(s, f"-s *@{net} -d *@{net} -r 1")


class _Clock:
    """Seconds since ``start`` when each wait ends; on the sim (exact virtual clock, polls
    every 0.25 s) they must be the model's times to the poll."""

    def __init__(self, tb: Any) -> None:
        self.tb, self.sim = tb, tb.status().get("backend") == "sim"
        self.t0 = float(tb.now)

    def start(self) -> None:
        self.t0 = float(self.tb.now)

    def at(self, want: float, check: Any, max_wait: float, what: str) -> None:
        advance_until(self.tb, check, max_wait, what)
        took = float(self.tb.now) - self.t0
        if self.sim:
            assert took == pytest.approx(want, abs=1e-3), (what, took, want)


def test_sanity_211_remote_ni_recovery_checks(tb: Any) -> None:
    s = tb.node("s")
    clock = _Clock(tb)
    prim = _setup_210(s)
    default = _global(s, "recovery_limit")
    run(s, "set recovery_limit 10")
    try:
        _fail_211(s)
        clock.start()
        run(s, f"peer set --nid {prim} --health 0")  # onto the recovery queue
        clock.at(0, lambda: _in_recovq(s, "-p", prim) == 1, 10, f"{prim} queued")
        if clock.sim:  # failed pings back off: 1 s, then 2, 4, 8 s apart
            for count, when in ((1, 1), (2, 3), (3, 7)):
                clock.at(when, lambda c=count: _peer_ping_count(s, prim) == c, 10,
                         f"ping_count {count}")
        # silent for more than recovery_limit: ages out at the next ping (10-20 s)
        clock.at(15, lambda: _in_recovq(s, "-p", prim) == 0, 20, f"{prim} aged out")
        assert _peer_ping_count(s, prim) == 0  # reset when it ages out
    finally:
        s.lctl("net_drop_del -a")
    # back on the queue with recovery_limit 0 (no limit); 500 -> 1000 in three pings
    run(s, "set recovery_limit 0")
    clock.start()
    run(s, f"peer set --nid {prim} --health 500")
    clock.at(0, lambda: _in_recovq(s, "-p", prim) == 1, 10, f"{prim} queued")
    clock.at(6, lambda: _in_recovq(s, "-p", prim) == 0, 20, f"{prim} recovered")
    prim = _setup_210(s)
    run(s, f"set recovery_limit {default}")
    default = _global(s, "max_recovery_ping_interval")
    run(s, "set max_recovery_ping_interval 4")
    try:
        _fail_211(s)
        clock.start()
        run(s, f"peer set --nid {prim} --health 0")
        clock.at(1, lambda: _peer_ping_count(s, prim) == 1, 4, "ping_count 1")
        _check_recovq(tb, s, "-p", prim, 1)
        clock.start()  # pings 1 s, then 2, 4 and at most 4 s apart: the 4th 10 s later
        clock.at(10, lambda: _peer_ping_count(s, prim) == 4, 14, "ping_count 4")
        _check_recovq(tb, s, "-p", prim, 1)
    finally:
        s.lctl("net_drop_del -a")
        run(s, f"set max_recovery_ping_interval {default}")
