"""``lnetctl set <tunable>`` errors, byte for byte as real lnetctl prints them (spec §9.1).

Expected texts come from reading lnet/utils/lnetctl.c (``jt_set_*``: parse_long, parser
errors), lnet/utils/lnetconfig/liblnetconfig.c (``lustre_lnet_config_*``: own checks,
``write_sysfs_file`` -> LUSTRE_CFG_RC_GENERIC_ERR -61, ioctl -> -errno) and the kernel setters
in api-ni.c/router.c (which values they refuse). Runs on the sim backend: the daemon's own
lnetctl command modules, no root.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodes.dlc.verbs.lnetctl_set import c_int, parse_long, parser_error
from testbed.sim import SimTestbed


def _err(entity: str, errno: int, descr: str, cmd: str = "add") -> str:
    return f'{cmd}:\n    - {entity}:\n          errno: {errno}\n          descr: "{descr}"\n'


INVAL = "Invalid argument"

#: (tunable, value, exit status, stderr): every range check lnetctl/the kernel makes
CASES = [
    ("health_sensitivity", "1001", 195,
     _err("health_sensitivity", -61, f"cannot configure health sensitivity: {INVAL}")),
    ("health_sensitivity", "-1", 195,
     _err("health_sensitivity", -61, f"cannot configure health sensitivity: {INVAL}")),
    ("retry_count", "11", 195, _err("retry_count", -61, f"cannot configure retry count: {INVAL}")),
    ("transaction_timeout", "2", 195,  # must stay > retry_count (2)
     _err("transaction_timeout", -61, f"cannot configure transaction timeout: {INVAL}")),
    ("transaction_timeout", "0", 195,
     _err("transaction_timeout", -61, f"cannot configure transaction timeout: {INVAL}")),
    ("router_sensitivity", "101", 195,
     _err("router_sensitivity", -61, f"cannot configure router health sensitivity: {INVAL}")),
    ("response_tracking", "4", 234, _err("response_tracking", -22,
                                         "Valid values are: 0, 1, 2, or 3")),
    ("recovery_limit", "-1", 234, _err("recovery_limit", -22,
                                       "Must be greater than or equal to 0")),
    ("max_recovery_ping_interval", "0", 234,
     _err("maximum recovery ping interval", -22, "must be strictly positive")),
    ("tiny_buffers", "-2", 222, _err("buf", -34, "tiny, small and large must be >= 0")),
    ("large_buffers", "-7", 222, _err("buf", -34, "tiny, small and large must be >= 0")),
    ("routing", "2", 255, parser_error("cannot parse routing value.\n"
                                       "must be 0 for disable or 1 for enable")),
    ("retry_count", "x", 255, "parser:\n    - set:\n          errno: -1\n"
                              "          descr: cannot parse retry_count value\n"),
    ("health_sensitivity", "1e3", 255, parser_error("cannot parse health sensitivity value")),
    ("recovery_interval", "1.5", 255, parser_error("cannot parse recovery interval value")),
    ("router_sensitivity", "09", 255, parser_error("cannot parse router sensitivity value")),
    ("transaction_timeout", "ten", 255, parser_error("cannot parse transaction timeout value")),
    ("max_recovery_ping_interval", "0x", 255,
     parser_error("cannot parse maximum recovery interval value")),
    ("numa_range", "many", 255, parser_error("cannot parse numa_range value")),
]


@pytest.fixture(scope="module")
def c1() -> Iterator[Any]:
    tb = SimTestbed.up(None)  # default topology: retry_count 2, transaction_timeout 10
    yield tb.node("c1")
    tb.down()


@pytest.mark.parametrize(("tunable", "value", "rc", "err"), CASES,
                         ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_set_error_is_real_lnetctls(c1: Any, tunable: str, value: str, rc: int,
                                    err: str) -> None:
    """Exit status, stderr and nothing on stdout as lnetctl; the value is left unchanged."""
    before = c1.lnetctl("global show").out
    res = c1.lnetctl("set", tunable, value)
    assert (res.rc, res.out, res.err) == (rc, "", err)
    assert c1.lnetctl("global show").out == before


def test_routing_parser_error_layout() -> None:
    """cYAML prints a multi-line string unquoted, continuation aligned after ``descr: ``."""
    assert parser_error("a.\nb c") == ("parser:\n    - set:\n          errno: -1\n"
                                       "          descr: a.\n                 b c\n")


@pytest.mark.parametrize(("text", "value"), [
    ("10", 10), ("010", 8), ("0x1f", 31), ("-3", -3), ("+4", 4), (" 5", 5), ("", 0), ("0", 0),
    ("08", None), ("5 ", None), ("0x", None), ("1e3", None), ("abc", None), ("--1", None),
    (str(2**63), None),
])
def test_parse_long_is_strtol_base_0(text: str, value: int | None) -> None:
    assert parse_long(text) == value


def test_values_are_passed_as_c_int() -> None:
    assert (c_int(5), c_int(2**31), c_int(2**32 + 7), c_int(-1)) == (5, -2**31, 7, -1)


@pytest.mark.parametrize(("tunable", "value", "shown"), [
    ("numa_range", "0x10", 16), ("max_interfaces", "3", 4096),  # < 16: the kernel's default
    ("recovery_interval", "0", 1),  # deprecated: recovery_interval_set only warns
    ("recovery_limit", "017", 15), ("max_recovery_ping_interval", "64", 64),
    # lustre_lnet_config_discovery/_drop_asym_route write any non-zero as 1 ...
    ("discovery", "2", 1), ("discovery", "-1", 1), ("discovery", "0x100000000", 0),
    ("drop_asym_route", "7", 1), ("drop_asym_route", "-3", 1),
    # ... and numa_range travels as the __u32 sv_value of IOC_LIBCFS_SET_NUMA_RANGE
    ("numa_range", "-1", 2**32 - 1), ("numa_range", "-2", 2**32 - 2),
])
def test_accepted_values_as_the_kernel_stores_them(c1: Any, tunable: str, value: str,
                                                   shown: int) -> None:
    """Exit 0, silent, and ``global show`` prints what the kernel stored (spec §9.1)."""
    old = c1.yaml("global show")["global"][tunable]
    try:
        res = c1.lnetctl("set", tunable, value)
        assert (res.rc, res.out, res.err) == (0, "", "")
        assert c1.yaml("global show")["global"][tunable] == shown
        assert f"    {tunable}: {shown}\n" in c1.lnetctl("global show").out
    finally:
        c1.lnetctl("set", tunable, str(old))


def test_buffers_minus_one_is_ignored_and_zero_is_the_default(c1: Any) -> None:
    """``-1 indicates to ignore changes``; 0 makes lnet_nrb_*_calculate use the default."""
    def tiny() -> int:
        return c1.rt.engine.tunables.tiny_buffers

    assert c1.lnetctl("set tiny_buffers 512").rc == 0 and tiny() == 512
    assert c1.lnetctl("set tiny_buffers -1").rc == 0 and tiny() == 512
    assert c1.lnetctl("set tiny_buffers 0").rc == 0 and tiny() == 2048
