"""sanity-lnet.sh tests 204, 206, 252, 501, 502: health and resends under LNet drop rules,
``peer set --health``, a ping to a node whose LNet is down, at lustre-release c881f8ebcb.

``setup_health_test``: this host ``h`` and a remote node ``rn`` (single-rail: one NID each;
multi-rail: ``net add --net tcp1`` on the same interface on both), the remote discovered;
``lnet_health_pre``/``post`` read the resend counters and the summed health values around a
failing ping and put the parameters and health values back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import fails, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("pair.yaml")]
LOCAL_RESEND = ("local_interrupt", "local_dropped", "local_aborted", "local_no_route",
                "local_timeout")
LOCAL_NO_RESEND = ("local_error",)
REMOTE_RESEND = ("remote_dropped",)
REMOTE_NO_RESEND = ("remote_error", "remote_timeout")


class Health:
    """The state setup_health_test builds: node handles and NID lists."""

    def __init__(self, tb: Any, mr: bool) -> None:
        self.h, self.rn = tb.node("h"), tb.node("rn")
        for node in (self.h, self.rn):
            run(node, "lnet unconfigure")
            run(node, "lnet configure")
            run(node, "net add --net tcp --if eth0")
            if mr:
                run(node, "net add --net tcp1 --if eth0")
        self.lnids = self.h.lctl("list_nids").out.split()
        self.rnids = self.rn.lctl("list_nids").out.split()
        run(self.h, f"discover {self.rnids[0]}")

    def _stat(self, key: str) -> int:
        return int(yaml.safe_load(self.h.lnetctl("stats show").out)["statistics"][key])

    def _hsum(self, cmd: str) -> int:
        out = self.h.lnetctl(cmd).out
        return sum(int(line.split()[-1]) for line in out.splitlines()
                   if "health value:" in line)

    def pre(self) -> dict[str, int]:
        """``lnet_health_pre``: LTT 10 (set_ltt_node), the counters and health sums."""
        self.saved = yaml.safe_load(self.h.lnetctl("global show").out)["global"]
        retry = self.saved["retry_count"]
        run(self.h, f"net set --net tcp --lnd-timeout {(10 - 1) // (retry + 1)}")
        run(self.h, "set transaction_timeout 10")
        return self.sample()

    def sample(self) -> dict[str, int]:
        return {"resend": self._stat("resend_count"), "failed": self._stat("failed_resends"),
                "ok": self._stat("successful_resends"),
                "local": self._hsum("net show -v 2"),
                "remote": self._hsum(f"peer show --nid {self.rnids[0]} -v 2")}

    def post(self) -> dict[str, int]:
        """``lnet_health_post``: sample, then restore parameters and health to 1000."""
        after = self.sample()
        for key in ("transaction_timeout", "retry_count"):
            run(self.h, f"set {key} {self.saved[key]}")
        run(self.h, "net set --net tcp --lnd-timeout 0")
        run(self.h, "peer set --health 1000 --all")
        run(self.h, "net set --health 1000 --all")
        return after

    def drop_gets(self, hstatus: str, rate: int = 1) -> None:
        """``add_health_test_drop_rules``: every local NID to every NID, GETs."""
        for src in self.lnids:
            for dst in self.rnids + self.lnids:
                run(self.h, f"fault drop add -s {src} -d {dst} -m GET -e {hstatus} -r {rate}")

    def ping_test(self, hstatus: str) -> tuple[dict[str, int], dict[str, int]]:
        """``do_lnet_health_ping_test``."""
        before = self.pre()
        self.drop_gets(hstatus)
        fails(self.h, f"ping {self.rnids[0]}")
        after = self.post()
        run(self.h, "fault drop del -a")
        return before, after


@pytest.fixture
def sr(module_topology: Any) -> Iterator[Health]:
    yield Health(module_topology, mr=False)


@pytest.fixture
def mr(module_topology: Any) -> Iterator[Health]:
    yield Health(module_topology, mr=True)


def _no_resends(b: dict[str, int], a: dict[str, int]) -> None:
    assert (a["resend"], a["failed"], a["ok"]) == (b["resend"], b["failed"], b["ok"])


def test_sanity_204_no_health_or_resends_for_sr_local_failures(sr: Health) -> None:
    for hstatus in LOCAL_RESEND + LOCAL_NO_RESEND:
        before, after = sr.ping_test(hstatus)
        _no_resends(before, after)
        assert after["local"] != before["local"], hstatus  # check_local_health


def test_sanity_206_no_health_or_resends_for_sr_remote_failures(sr: Health) -> None:
    for hstatus in REMOTE_RESEND + REMOTE_NO_RESEND:
        before, after = sr.ping_test(hstatus)
        _no_resends(before, after)
        assert after["local"] == before["local"], hstatus
        assert after["remote"] == before["remote"], hstatus


def _peer_set_health(node: Health, value: int, nid_arg: str) -> None:
    """``do_peer_set_health_test``: health to VALUE, then lnet_health_post puts it back."""
    show = "peer show -v 2" + ("" if nid_arg == "--all" else f" {nid_arg}")
    top = sum(int(line.split()[-1]) for line in node.h.lnetctl(show).out.splitlines()
              if "health value:" in line)
    assert top >= 1000 and top % 1000 == 0
    before = node.pre()
    run(node.h, f"peer set --health {value} {nid_arg}")
    after = node.post()
    assert after["remote"] != before["remote"]  # check_remote_health
    now = sum(int(line.split()[-1]) for line in node.h.lnetctl(show).out.splitlines()
              if "health value:" in line)
    assert now == top


def _peer_set_health_test(node: Health) -> None:
    run(node.h, "fault drop add -s *@tcp -d *@tcp -r 1")
    try:
        for value in (0, 500):
            _peer_set_health(node, value, f"--nid {node.rnids[0]}")
            _peer_set_health(node, value, "--all")
    finally:
        run(node.h, "fault drop del -a")


def test_sanity_501_peer_set_health_sr(sr: Health) -> None:
    _peer_set_health_test(sr)


def test_sanity_502_peer_set_health_mr(mr: Health) -> None:
    _peer_set_health_test(mr)


def test_sanity_252_ping_to_down_peer_unlinks_quickly(sr: Health, module_topology: Any) -> None:
    """The remote node's LNet unloaded: ``ping --timeout 15`` fails before 15 s."""
    run(sr.rn, "lnet unconfigure")
    clock = getattr(module_topology, "fabric", None)
    import time

    t0 = clock.now if clock is not None else time.monotonic()
    fails(sr.h, f"ping --timeout 15 {sr.rnids[0]}")
    took = (clock.now if clock is not None else time.monotonic()) - t0
    assert took < 15, took


def _resends(node: Health, b: dict[str, int], a: dict[str, int]) -> None:
    """``check_resends``: retry_count resends, one failed, none successful."""
    retry = node.saved["retry_count"]
    assert (a["resend"] - b["resend"], a["failed"] - b["failed"], a["ok"] - b["ok"]) == (
        retry, 1, 0)


def test_sanity_205_health_and_resends_for_mr_local_failures(mr: Health) -> None:
    for hstatus in LOCAL_RESEND:
        before, after = mr.ping_test(hstatus)
        _resends(mr, before, after)
        assert after["local"] != before["local"], hstatus
    for hstatus in LOCAL_NO_RESEND:
        before, after = mr.ping_test(hstatus)
        _no_resends(before, after)
        assert after["local"] != before["local"], hstatus


def test_sanity_207_health_and_resends_for_mr_remote_errors(mr: Health) -> None:
    for hstatus in REMOTE_RESEND + REMOTE_NO_RESEND:
        before, after = mr.ping_test(hstatus)
        if hstatus in REMOTE_RESEND:
            _resends(mr, before, after)
        else:
            _no_resends(before, after)
        assert after["local"] == before["local"], hstatus
        assert after["remote"] != before["remote"], hstatus
        run(mr.h, "peer set --health 1000 --all")


def test_sanity_209_health_but_no_resends_for_network_timeout(module_topology: Any) -> None:
    for is_mr in (False, True):
        node = Health(module_topology, mr=is_mr)
        before = node.pre()
        node.drop_gets("network_timeout")
        fails(node.h, f"discover {node.rnids[0]}")
        after = node.post()
        run(node.h, "fault drop del -a")
        _no_resends(before, after)
        assert after["local"] != before["local"]
        assert (after["remote"] != before["remote"]) == is_mr


def test_sanity_233_successful_resends(mr: Health) -> None:
    """Intermittent failures (every second GET dropped): the ping succeeds by one
    successful resend."""
    for hstatus in LOCAL_RESEND + REMOTE_RESEND:
        before = mr.pre()
        mr.drop_gets(hstatus, rate=2)
        run(mr.h, f"ping --source {mr.lnids[0]} {mr.rnids[0]}")
        run(mr.h, "fault drop del -a")
        after = mr.post()
        assert after["ok"] - before["ok"] == 1, hstatus
