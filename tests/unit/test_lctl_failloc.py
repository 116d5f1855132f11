"""``lctl set_param|get_param fail_loc|fail_val`` (E11): libcfs's parsing and reading of the
two variables (lnet/libcfs/module.c ``proc_fail_loc``, ``debugfs_doint``; lib/kstrtox.c), and
``__cfs_fail_check_set`` for the modifier bits, on the sim's node daemon verbs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nodes.dlc.verbs.lctl_failloc import ParamError, kstrtoint, kstrtoull
from nodes.lnet.failloc import (
    CFS_FAIL_RAND,
    CFS_FAIL_RTR_HEALTH_INC,
    CFS_FAIL_SKIP,
    CFS_FAIL_SOME,
    CFS_FAIL_USR1,
    CFS_FAULT,
    FailLoc,
)
from testbed.sim import SimTestbed

U64 = 2**64 - 1


@pytest.mark.parametrize(("text", "value"), [
    ("0xe004", 0xE004), ("0XE004", 0xE004), ("57348", 57348), ("0160004", 0o160004),
    ("+0x8000e020", 0x8000E020), ("0", 0), ("0x1000e003\n", 0x1000E003), (str(U64), U64)])
def test_kstrtoul_base_0(text: str, value: int) -> None:
    assert kstrtoull(text, U64) == value


@pytest.mark.parametrize(("text", "errno"), [
    ("", 22), ("0x", 22), ("e004", 22), (" 1", 22), ("1 ", 22), ("-1", 22), ("08", 22),
    ("1\n\n", 22), (str(U64 + 1), 34)])
def test_kstrtoul_refuses(text: str, errno: int) -> None:
    with pytest.raises(ParamError) as bad:
        kstrtoull(text, U64)
    assert bad.value.errno == errno


def test_kstrtoint_range() -> None:
    assert kstrtoint("-1") == -1 and kstrtoint("-2147483648") == -2**31
    assert kstrtoint("0x7fffffff") == 2**31 - 1
    for text in ("2147483648", "-2147483649"):
        with pytest.raises(ParamError):
            kstrtoint(text)


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    topo = tmp_path / "one.yaml"
    topo.write_text("name: fl\nnetworks:\n  lan0: {lnet: tcp, subnet: 10.45.0.0/24}\n"
                    "nodes:\n  a: {interfaces: [lan0]}\n")
    return SimTestbed.up(topo, seed=1)


def test_set_and_get_param(tb: SimTestbed) -> None:
    a = tb.node("a")
    res = a.lctl("set_param", "fail_loc=0x1000e003", "fail_val=100")
    assert (res.rc, res.out) == (0, "fail_loc=0x1000e003\nfail_val=100\n")
    assert tb.runtimes["a"].engine.fail.loc == 0x1000E003
    assert a.lctl("get_param", "fail_loc", "fail_val").out == \
        "fail_loc=268492803\nfail_val=100\n"
    assert a.lctl("set_param", "-n", "fail_val=-1").out == ""
    assert a.lctl("get_param", "-n", "fail_val").out == "4294967295\n"  # %u
    for bad, why in (("fail_loc=0xe00g", "Invalid argument"), ("fail_loc=-1", "Invalid argument"),
                     ("fail_loc=" + "1" * 33, "Argument list too long"),
                     ("fail_val=4294967295", "Numerical result out of range")):
        res = a.lctl("set_param", bad)
        assert res.rc != 0 and res.err == f"error: set_param: setting {bad}: {why}\n", res
    assert tb.runtimes["a"].engine.fail.loc == 0x1000E003  # refused writes change nothing
    # a location no LNet code checks is written as the kernel writes it, and matches nothing
    assert a.lctl("set_param", "fail_loc=0x80000123").rc == 0
    assert a.lctl("get_param", "-n", "fail_loc").out == f"{0x80000123}\n"
    assert tb.node("a").lnetctl("ping", tb.node("a").nids[0]).rc == 0
    assert a.lctl("get_param", "-n", "fail_loc").out == f"{0x80000123}\n"  # never FAILED


def test_a_hit_sets_cfs_failed_as_get_param_shows() -> None:
    f = FailLoc(random.Random(0))
    f.set(CFS_FAIL_RTR_HEALTH_INC)
    assert f.check(CFS_FAIL_RTR_HEALTH_INC) and f.loc == 0x4000E004


def test_skip_rand_and_user_bits() -> None:
    """fail.c ``__cfs_fail_check_set``: SKIP lets fail_val checks pass first; RAND fails
    about one in fail_val; USR1 and CFS_FAULT do not change an LNet check; SOME with
    fail_val 0 never fails; writing fail_loc keeps the check counter."""
    f = FailLoc(random.Random(0))
    f.set(CFS_FAIL_SKIP | CFS_FAIL_RTR_HEALTH_INC, 2)
    assert [f.check(CFS_FAIL_RTR_HEALTH_INC) for _ in range(4)] == [False, False, True, True]
    f.set(CFS_FAIL_RAND | CFS_FAIL_RTR_HEALTH_INC, 4)
    hits = sum(f.check(CFS_FAIL_RTR_HEALTH_INC) for _ in range(4000))
    assert 800 < hits < 1200
    for bit in (CFS_FAIL_USR1, CFS_FAULT):
        f.set(bit | CFS_FAIL_RTR_HEALTH_INC)
        assert f.check(CFS_FAIL_RTR_HEALTH_INC) and f.check(CFS_FAIL_RTR_HEALTH_INC)
    f.set(CFS_FAIL_SOME | CFS_FAIL_RTR_HEALTH_INC, 0)
    assert not f.check(CFS_FAIL_RTR_HEALTH_INC)
