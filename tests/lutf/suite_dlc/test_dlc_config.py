"""DLC configuration verbs: net/peer add and del, `set` ranges, errors with errno (spec §9).

One module-scoped default topology; every test puts back what it changed (the finally
blocks), so the order of the tests does not matter.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, lnet_error, local_nis, peer_nis, stats
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("default")]


@pytest.fixture(scope="module")
def c1(module_topology: Any) -> Any:
    return module_topology.node("c1")


@pytest.mark.requirement("cfg-005", "cfg-020", "cfg-060")
def test_ni_removed_and_added_back_on_the_same_net(c1: Any) -> None:
    """`net del --net tcp --if eth1` removes that NI only; `net add --net tcp --if eth1`
    brings it back on the same net: several NIs per net, added and removed at run time
    (cfg-020; lnetctl is the front end, cfg-060)."""
    try:
        res = c1.lnetctl("net del --net tcp --if eth1")
        assert res.rc == 0, res
        assert list(local_nis(c1, 0)) == [C1_NIDS[0]]
        assert c1.lctl("list_nids").out.split() == [C1_NIDS[0]]
    finally:
        res = c1.lnetctl("net add --net tcp --if eth1")
    assert res.rc == 0, res
    assert list(local_nis(c1, 0)) == list(C1_NIDS)
    assert c1.ping(S1_NIDS[1], source=C1_NIDS[1]).rc == 0  # and it carries traffic again


@pytest.mark.parametrize(("command", "errno", "words"), [
    ("net add --net tcp --if eth0", -17, "File exists"),
    ("net add --net tcp1 --if eth9", -22, "eth9"),
    ("net del --net tcp7", -2, "No such file"),
], ids=["add-existing-EEXIST", "add-no-such-if-EINVAL", "del-unknown-ENOENT"])
@pytest.mark.requirement("cfg-060")
def test_net_errors_carry_errno(c1: Any, command: str, errno: int, words: str) -> None:
    """Real lnetctl prints failures as error YAML on stderr (`errno`, `descr`) and exits
    non-zero; the configuration is left as it was (spec §9.1)."""
    before = local_nis(c1, 0)
    res = c1.lnetctl(command)
    assert res.rc != 0 and res.out == ""
    err = lnet_error(res)
    assert err["errno"] == errno and words in err["descr"], res.err
    assert local_nis(c1, 0).keys() == before.keys()


@pytest.mark.parametrize(("tunable", "good", "bad", "errno", "descr"), [
    ("health_sensitivity", 50, 1001, -61, "cannot configure health sensitivity: "
                                          "Invalid argument"),
    ("retry_count", 1, 11, -61, "cannot configure retry count: Invalid argument"),  # > tt 10
    ("transaction_timeout", 20, 0, -61, "cannot configure transaction timeout: "
                                        "Invalid argument"),
    ("recovery_limit", 5, -1, -22, "Must be greater than or equal to 0"),
    ("router_sensitivity", 40, 101, -61, "cannot configure router health sensitivity: "
                                         "Invalid argument"),
    ("response_tracking", 1, 4, -22, "Valid values are: 0, 1, 2, or 3"),
], ids=lambda v: str(v))
@pytest.mark.requirement("hlth-cfg-dlc", "hlth-cfg-retry", "hlth-cfg-sensitivity",
                         "hlth-cfg-transaction-timeout")
def test_set_checks_ranges(c1: Any, tunable: str, good: int, bad: int, errno: int,
                           descr: str) -> None:
    """`lnetctl set` applies in-range values (visible in `global show`) and refuses the
    values the kernel (api-ni.c setters: sysfs write fails, liblnetconfig reports -61) or
    liblnetconfig itself (-22) refuses, with real lnetctl's text, keeping the old value
    (spec §9.1)."""
    old = c1.yaml("global show")["global"][tunable]
    try:
        assert c1.lnetctl(f"set {tunable} {good}").rc == 0
        assert c1.yaml("global show")["global"][tunable] == good
        res = c1.lnetctl(f"set {tunable} {bad}")
        assert res.rc == (256 + errno) % 256 and res.out == ""
        assert lnet_error(res) == {"errno": errno, "descr": descr}, res.err
        assert c1.yaml("global show")["global"][tunable] == good
    finally:
        assert c1.lnetctl(f"set {tunable} {old}").rc == 0


@pytest.mark.requirement("hlth-lnt-msg-timeout", "hlth-cfg-retry")
def test_lnd_timeout_follows_transaction_timeout_and_retries(c1: Any) -> None:
    """The LND timeout is derived: (transaction_timeout - 1) / (retry_count + 1), at least 1
    (lnet_set_lnd_timeout; seed 003 "message timeout = transaction timeout / retries")."""
    g = c1.yaml("global show")["global"]
    try:
        assert c1.lnetctl("set transaction_timeout 31").rc == 0
        assert c1.lnetctl("set retry_count 4").rc == 0
        assert c1.yaml("global show")["global"]["lnd_timeout"] == 6
    finally:
        c1.lnetctl(f"set retry_count {g['retry_count']}")
        c1.lnetctl(f"set transaction_timeout {g['transaction_timeout']}")
    assert c1.yaml("global show")["global"]["lnd_timeout"] == g["lnd_timeout"]


@pytest.mark.requirement("cfg-080", "snd-065")
def test_nid_of_another_peer_is_rejected(c1: Any) -> None:
    """Adding a peer NID that already belongs to another peer fails with -EEXIST (cfg-080,
    snd-065) and the NID stays with its peer. As real lnetctl does
    (lustre_lnet_handle_peer_nidlist), the new primary NID was created first and stays."""
    prim = "10.10.0.99@tcp"
    try:
        res = c1.lnetctl(f"peer add --prim_nid {prim} --nid {S1_NIDS[1]}")
        assert res.rc != 0
        err = lnet_error(res)
        assert err["errno"] == -17 and S1_NIDS[1] in err["descr"]
        assert set(peer_nis(c1, S1_NIDS[0])) == set(S1_NIDS)
        assert S1_NIDS[1] not in peer_nis(c1, prim)
    finally:
        c1.lnetctl(f"peer del --prim_nid {prim}")


@pytest.mark.requirement("cfg-070", "cfg-075")
def test_peer_with_nids_on_two_nets_added_and_deleted(c1: Any) -> None:
    """`peer add --prim_nid P --nid LIST` creates one peer whose NIs may sit on different
    nets (cfg-075); `peer del` removes it (cfg-070)."""
    prim, other = "10.10.0.77@tcp", "10.20.0.77@tcp1"
    try:
        assert c1.lnetctl(f"peer add --prim_nid {prim} --nid {other}").rc == 0
        assert set(peer_nis(c1, prim)) == {prim, other}
        assert c1.yaml(f"peer show --nid {other}")["peer"][0]["primary nid"] == prim
    finally:
        res = c1.lnetctl(f"peer del --prim_nid {prim}")
    assert res.rc == 0, res
    assert prim not in {p["primary nid"] for p in c1.yaml("peer show")["peer"]}


@pytest.mark.requirement("dbg-120", "hlth-stt-reset")
def test_stats_reset_zeroes_counters(c1: Any) -> None:
    """`stats reset` zeroes the LNet counters (dbg-120); traffic then counts up again."""
    assert c1.ping(S1_NIDS[0]).rc == 0
    assert stats(c1)["send_count"] > 0
    assert c1.lnetctl("stats reset").rc == 0
    after = stats(c1)
    assert after["send_count"] == 0 and after["recv_count"] == 0
    assert c1.ping(S1_NIDS[0]).rc == 0
    wait_for(lambda: stats(c1)["send_count"] > 0, 5, message="send_count after a ping")


@pytest.mark.parametrize("argv", ["bogus", "net frob", "peer add", "set retry_count x"])
def test_bad_arguments_are_one_line_or_yaml_errors(c1: Any, argv: str) -> None:
    """Bad lnetctl input gives a non-zero status and a short error, never a traceback."""
    res = c1.lnetctl(argv)
    assert res.rc != 0
    assert "Traceback" not in res.out + res.err
    assert 0 < len((res.out + res.err).strip().splitlines()) <= 6
