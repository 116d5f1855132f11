"""``lnetctl set <tunable> <value>``: what lnetctl and liblnetconfig print (spec §9.1).

Theory of operation: the real command has three layers and each has its own error, which we
reproduce byte for byte (lnet/utils/lnetctl.c ``jt_set_*``, liblnetconfig.c
``lustre_lnet_config_*``, api-ni.c/router.c module parameter setters):

1. lnetctl parses the value with ``parse_long`` (``strtol`` base 0, the whole string). Failure
   is a ``parser: - set:`` error, errno -1, exit status 255; its text has no quotes in the
   C string, so cYAML prints it unquoted (``routing`` also refuses anything but 0 and 1 here,
   with a two-line text).
2. liblnetconfig's own checks: ``response_tracking`` 0..3, ``recovery_limit`` >= 0,
   ``max_recovery_ping_interval`` > 0 (LUSTRE_CFG_RC_BAD_PARAM, -22) and router buffers
   >= -1 (LUSTRE_CFG_RC_OUT_OF_RANGE_PARAM, -34, entity ``buf``; -1 leaves a pool alone).
3. The kernel's setter: the engine's ``set_tunable`` (nodes/lnet/tunables.py). A module
   parameter written through sysfs that the kernel refuses comes back from
   ``write_sysfs_file`` as LUSTRE_CFG_RC_GENERIC_ERR (-61) with ``cannot configure <what>:
   <strerror(errno)>``; ``numa_range`` goes by ioctl: -errno and ``cannot configure
   numa_range to <v>: <strerror>``.

What reaches the kernel is what liblnetconfig sends: ``discovery`` and ``drop_asym_route`` are
written as 0/1 (``lustre_lnet_config_discovery`` writes ``enable ? 0 : 1`` to
lnet_peer_discovery_disabled, ``..._drop_asym_route`` ``drop ? 1 : 0``), so any integer is
accepted; ``numa_range`` travels in the ``__u32 sv_value`` of IOC_LIBCFS_SET_NUMA_RANGE, so -1
is stored (and shown by ``global show``) as 4294967295.

Testbed-only tunables (``forwarding``, router checker knobs) keep the engine's own text.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from nodes.lnet.errors import EINVAL, ERANGE, LNetConfigError
from nodes.lnet.tunables import Tunables
from nodes.tools.yamlfmt import error_doc

if TYPE_CHECKING:
    from nodes.driver import Runtime as NodeRuntime

Result = tuple[int, str, str]

#: liblnetconfig.h LUSTRE_CFG_RC_GENERIC_ERR: what write_sysfs_file returns on a failed write
LUSTRE_CFG_RC_GENERIC_ERR = -61

#: sysfs-written module parameters: tunable -> (error entity, words of "cannot configure")
SYSFS: dict[str, tuple[str, str]] = {
    "health_sensitivity": ("health_sensitivity", "health sensitivity"),
    "recovery_interval": ("recovery_interval", "recovery interval"),
    "router_sensitivity": ("router_sensitivity", "router health sensitivity"),
    "transaction_timeout": ("transaction_timeout", "transaction timeout"),
    "retry_count": ("retry_count", "retry count"),
    "response_tracking": ("response_tracking", "response tracking"),
    "recovery_limit": ("recovery_limit", "recovery limit"),
    "max_interfaces": ("max_interfaces", "max interfaces"),
    "discovery": ("discovery", "discovery"),
    "drop_asym_route": ("drop_asym_route", "drop asym route"),
    "max_recovery_ping_interval": ("maximum recovery ping interval",
                                   "maximum recovery ping interval"),
}
#: jt_set_* parser texts that do not follow "cannot parse <name> value"
PARSE_TEXT = {
    "recovery_interval": "cannot parse recovery interval value",
    "router_sensitivity": "cannot parse router sensitivity value",
    "health_sensitivity": "cannot parse health sensitivity value",
    "transaction_timeout": "cannot parse transaction timeout value",
    "max_recovery_ping_interval": "cannot parse maximum recovery interval value",
    "routing": "cannot parse routing value.\nmust be 0 for disable or 1 for enable",
}
#: tunables liblnetconfig writes as a boolean 0/1 (any non-zero integer enables)
BOOLEAN = ("discovery", "drop_asym_route")
#: tunables passed to the kernel in an unsigned 32-bit ioctl field
U32 = ("numa_range",)

#: liblnetconfig's own range checks: tunable -> (ok(value), errno, text)
LIB_CHECKS = {
    "response_tracking": (lambda v: 0 <= v <= 3, -EINVAL, "Valid values are: 0, 1, 2, or 3"),
    "recovery_limit": (lambda v: v >= 0, -EINVAL, "Must be greater than or equal to 0"),
    "max_recovery_ping_interval": (lambda v: v > 0, -EINVAL, "must be strictly positive"),
}
BUFFERS = ("tiny_buffers", "small_buffers", "large_buffers")

_LONG = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_LONG_MAX = 2**63 - 1


def parse_long(text: str) -> int | None:
    """lnetctl's ``parse_long``: ``strtol(text, &end, 0)`` that must consume the whole string
    (an empty string is 0, as strtol leaves ``end`` on the terminating NUL); None on failure."""
    if text == "":
        return 0
    m = _LONG.fullmatch(text)
    if m is None:
        return None
    digits = m.group(2)
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits[0] == "0" else 10
    value = int(digits, base) * (-1 if m.group(1) == "-" else 1)
    if not -_LONG_MAX - 1 <= value <= _LONG_MAX:
        return None  # errno == ERANGE
    return value


def c_int(value: int) -> int:
    """The ``long`` lnetctl parsed, passed on as the C ``int`` of lustre_lnet_config_*."""
    return (value + 2**31) % 2**32 - 2**31


def _exit(err: int) -> int:
    return (256 + err) % 256 or 1


def parser_error(text: str) -> str:
    """``cYAML_build_error(-1, -1, "parser", "set", text)`` as cYAML prints it: the text is
    unquoted and continuation lines are aligned after ``descr: `` (cyaml.c print_string)."""
    first, *more = text.split("\n")
    lines = ["parser:", "    - set:", "          errno: -1", f"          descr: {first}"]
    lines += [" " * len("          descr: ") + line for line in more]
    return "\n".join(lines) + "\n"


def _fail(entity: str, errno: int, descr: str) -> Result:
    return _exit(errno), "", error_doc("add", entity, errno, descr)


def set_tunable(rt: NodeRuntime, name: str, text: str) -> Result:
    """Run ``lnetctl set NAME TEXT`` against the node's engine (NAME is a known tunable)."""
    value = parse_long(text)
    if value is None or (name == "routing" and value not in (0, 1)):
        return 255, "", parser_error(PARSE_TEXT.get(name, f"cannot parse {name} value"))
    value = c_int(value)
    if name in BOOLEAN:
        value = int(value != 0)
    elif name in U32:
        value %= 2**32
    if name in LIB_CHECKS:
        ok, errno, descr = LIB_CHECKS[name]
        if not ok(value):
            return _fail(SYSFS[name][0], errno, descr)
    if name in BUFFERS:
        if value < -1:
            return _fail("buf", -ERANGE, "tiny, small and large must be >= 0")
        if value == -1:  # "-1 indicates to ignore changes to this field"
            return 0, "", ""
        if value == 0:  # lnet_nrb_*_calculate: 0 means the default number of buffers
            value = getattr(Tunables(), name)
    try:
        rt.execute(rt.engine.set_tunable(name, value, rt.now()))  # re-arms the timer
    except LNetConfigError as e:
        why = os.strerror(-e.errno)
        if name in SYSFS:
            entity, words = SYSFS[name]
            return _fail(entity, LUSTRE_CFG_RC_GENERIC_ERR, f"cannot configure {words}: {why}")
        if name == "numa_range":
            return _fail(name, e.errno, f"cannot configure numa_range to {c_int(value)}: {why}")
        if name in BUFFERS:
            return _fail("buf", e.errno, f"cannot configure buffers: {why}")
        if name == "routing":
            verb = "enable" if value else "disable"
            return (_exit(e.errno), "", error_doc("add" if value else "del", "routing",
                                                  e.errno, f"cannot {verb} routing {why}"))
        return _fail(name, e.errno, e.descr)
    return 0, "", ""
