"""sanity-lnet.sh tests 204, 205, 206, 207, 209, 212, 233, 252, 253, 254, 501, 502: health
and resends under LNet drop rules, ``peer set --health``, a ping to a node whose LNet is down,
messages delayed past their deadline, the LU-14627 discovery race, at lustre-release
c881f8ebcb.

``setup_health_test``: this host ``h`` and a remote node ``rn`` (single-rail: one NID each;
multi-rail: ``net add --net tcp1`` on the same interface on both), the remote discovered;
``lnet_health_pre``/``post`` read the resend counters and the summed health values around a
failing ping and put the parameters and health values back."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import fails, run
from testbed.pytest.plugin import wait_for

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


def _get_drops(node: Health) -> int:
    """The ``get:`` counts under ``dropped_stats`` of ``peer show -v 2 --nid RNIDS[0]``."""
    out = node.h.lnetctl(f"peer show -v 2 --nid {node.rnids[0]}").out.splitlines()
    return sum(int(out[i + j].split()[-1]) for i, line in enumerate(out)
               if line.strip() == "dropped_stats:" for j in (1, 2)
               if out[i + j].strip().startswith("get:"))


def _tx_credits(node: Health) -> int:
    """The largest ``available_tx_credits`` among the peer NIs of ``RNIDS[0]``'s peer."""
    out = node.h.lnetctl(f"peer show -v --nid {node.rnids[0]}").out
    return max(int(line.split()[-1]) for line in out.splitlines()
               if line.strip().startswith("available_tx_credits:"))


def _expired_message_drop(node: Health) -> None:
    """``do_expired_message_drop_test``: every peer NI tx credit held by GETs delayed past
    the transaction timeout; one more ping queues on the credit and is dropped when it gets
    one, past its deadline. The delayed GETs leave the delay list without the deadline check
    (``lnet_post_send_locked`` is not on that path): exactly one dropped GET."""
    h, saved = node.h, yaml.safe_load(node.h.lnetctl("global show").out)["global"]
    run(h, "set retry_count 0")
    ltt, delay = 10, 11
    run(h, f"net set --net tcp --lnd-timeout {(ltt - 1) // 1}")  # set_ltt_node, retry 0
    run(h, f"set transaction_timeout {ltt}")
    for lnid in node.lnids:
        for rnid in node.rnids:
            run(h, f"fault delay add -s {lnid} -d {rnid} -l {delay} -r 1 -m GET")
    pcs = [int(line.split()[-1]) for line in
           run(h, f"peer show -v --nid {node.rnids[0]}").out.splitlines()
           if "max_ni_tx_credits:" in line]
    assert len(pcs) == len(node.rnids), pcs
    pings = []
    for rnid, credits in zip(node.rnids, pcs, strict=True):
        lnid = next(n for n in node.lnids if n.split("@")[1] == rnid.split("@")[1])
        pings += [f"ping --timeout {delay + 2} --source {lnid} {rnid}"] * credits
    with concurrent.futures.ThreadPoolExecutor(len(pings) + 1) as pool:
        done = [pool.submit(h.lnetctl, cmd) for cmd in pings]
        # the shell's `&` jobs hold every credit before the next ping is issued; it must come
        # well within delay - ltt (1 s) of them, or its deadline outlives the delay
        wait_for(lambda: _tx_credits(node) <= 0, timeout=5, interval=0.02)
        done.append(pool.submit(h.lnetctl, f"ping --timeout {delay + 2} {node.rnids[0]}"))
        time.sleep(delay)
        run(h, "fault delay del -a")
        for fut in done:
            fut.result()
    assert _get_drops(node) == 1
    run(h, f"set retry_count {saved['retry_count']}")
    run(h, "net set --net tcp --lnd-timeout 0")
    run(h, f"set transaction_timeout {saved['transaction_timeout']}")


@pytest.mark.mininet_only("background lnetctl pings held on credits for 11 s of wall clock")
def test_sanity_253_message_delayed_beyond_deadline_dropped_sr(sr: Health) -> None:
    _expired_message_drop(sr)


@pytest.mark.mininet_only("background lnetctl pings held on credits for 11 s of wall clock")
def test_sanity_254_message_delayed_beyond_deadline_dropped_mr(mr: Health) -> None:
    _expired_message_drop(mr)


@pytest.mark.mininet_only("a discover in the background while the remote node discovers us")
def test_sanity_212_discovery_refcount_loss_lu14627(sr: Health) -> None:
    """LU-14627: a discovery PING that fails while a PUSH is outstanding used to lose the
    peer's reference; here both discoveries end, the rules go, and LNet shuts down and comes
    back (the real test's check is that unloading the modules does not trip an ASSERT)."""
    h, rn = sr.h, sr.rn
    run(h, f"discover --force {sr.rnids[0]}")
    run(rn, f"discover --force {sr.lnids[0]}")
    run(h, "fault drop add -s *@tcp -d *@tcp -r 1 -e local_error")
    fails(h, f"discover --force {sr.rnids[0]}")
    run(h, "fault drop del -a")
    for nid in sr.rnids:
        run(h, f"fault delay add -s *@tcp -d {nid} -r 1 -m GET -l 3")
        run(h, f"fault drop add -s *@tcp -d {nid} -r 1 -m GET -e local_error")
        run(h, f"fault delay add -s *@tcp -d {nid} -r 1 -m PUT -l 6")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        background = pool.submit(h.lnetctl, f"discover --force {sr.rnids[0]}")
        rn.lnetctl(f"discover --force {sr.lnids[0]}")
        assert background.result().rc != 0  # its PING is dropped with local_error
    run(h, "fault delay del -a")
    run(h, "fault drop del -a")
    run(h, "lnet unconfigure")
    run(h, "lnet configure")
    run(h, "net add --net tcp --if eth0")
    run(h, f"ping {sr.rnids[0]}")
