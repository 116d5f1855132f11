"""The one table of LNet tunables: names, ranges and texts of the three layers (issue 12 item 4).

Theory of operation: ``lnetctl set NAME VALUE`` goes through three layers in real LNet, and
each refuses with its own text (lnetctl.c ``jt_set_*``, liblnetconfig.c
``lustre_lnet_config_*``, the kernel's module-parameter setters in api-ni.c/router.c):

1. lnetctl ``parse_long`` -> ``parse_text`` on failure (``parser: - set:`` errno -1);
2. liblnetconfig's own range check (``lib_range`` -> ``lib_errno``, ``lib_text``), then the
   value goes to the kernel as ``coerce`` says (``bool``: 0/1; ``u32``: the ioctl's __u32);
3. the kernel setter accepts ``kernel_range`` (the one table of ranges,
   ``nodes/lnet/tunables.py`` ``RANGES``, which the engine's ``Tunables.set`` applies) and a
   refusal comes back as "cannot configure ``words``: <strerror>" under ``entity``, through
   sysfs (``via == "sysfs"``, ``module_param``) or an ioctl.

``module_param`` is also the name a site gives at module load ("options lnet ..."). The
kernel's ranges are defined once, in ``RANGES`` (the engine is the kernel here, and the lowest
layer): the topology validator (``testbed/plan/schema.py``), the engine setters,
``MODULE_PARAMS`` and ``kernel_range`` below all read it; only liblnetconfig's own earlier
check (``lib_range``) is this table's. Testbed-only knobs (``routing`` is real; the router
checker and ``forwarding`` knobs are module parameters real lnetctl cannot set) keep the
engine's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodes.lnet.errors import EINVAL, ERANGE
from nodes.lnet.tunables import RANGES, S32_MAX


@dataclass(frozen=True, slots=True)
class TunableSpec:
    """One ``lnetctl set`` tunable; see the module docstring for the layers."""

    name: str
    lib_fn: str
    parse_text: str
    entity: str
    words: str
    via: str  # "sysfs" | "ioctl" | "buffers" | "routing" | "engine"
    module_param: str | None
    lib_range: tuple[int, int] | None = None
    lib_errno: int = -EINVAL
    lib_text: str = ""
    coerce: str | None = None  # "bool" | "u32"

    @property
    def kernel_range(self) -> tuple[int, int]:
        """What the kernel setter accepts: the one table, ``nodes.lnet.tunables.RANGES``."""
        return RANGES[self.name]


def _sysfs(name: str, param: str, words: str, *,
           parse: str | None = None, entity: str | None = None, **kw: object) -> TunableSpec:
    return TunableSpec(name=name, lib_fn=f"lustre_lnet_config_{name}",
                       parse_text=parse or f"cannot parse {name} value",
                       entity=entity or name, words=words, via="sysfs", module_param=param,
                       **kw)  # type: ignore[arg-type]


TUNABLES: dict[str, TunableSpec] = {t.name: t for t in (
    TunableSpec("numa_range", "lustre_lnet_config_numa_range", "cannot parse numa_range value",
                "numa_range", "numa_range", "ioctl", "lnet_numa_range",
                coerce="u32"),  # IOC_LIBCFS_SET_NUMA_RANGE: __u32 sv_value
    _sysfs("max_interfaces", "lnet_interfaces_max", "max interfaces"),
    # lustre_lnet_config_discovery writes `enable ? 0 : 1` to lnet_peer_discovery_disabled
    _sysfs("discovery", "lnet_peer_discovery_disabled", "discovery", coerce="bool"),
    _sysfs("drop_asym_route", "lnet_drop_asym_route", "drop asym route",
           coerce="bool"),
    _sysfs("retry_count", "lnet_retry_count", "retry count"),  # < tt, health on
    _sysfs("transaction_timeout", "lnet_transaction_timeout", "transaction timeout",
           parse="cannot parse transaction timeout value"),  # > retry_count
    _sysfs("health_sensitivity", "lnet_health_sensitivity", "health sensitivity",
           parse="cannot parse health sensitivity value"),
    _sysfs("recovery_interval", "lnet_recovery_interval", "recovery interval",
           parse="cannot parse recovery interval value"),  # deprecated: setter only warns
    _sysfs("router_sensitivity", "router_sensitivity_percentage", "router health sensitivity",
           parse="cannot parse router sensitivity value"),
    _sysfs("response_tracking", "lnet_response_tracking", "response tracking",
           lib_range=(0, 3), lib_text="Valid values are: 0, 1, 2, or 3"),
    _sysfs("recovery_limit", "lnet_recovery_limit", "recovery limit",
           lib_range=(0, S32_MAX), lib_text="Must be greater than or equal to 0"),
    _sysfs("max_recovery_ping_interval", "lnet_max_recovery_ping_interval",
           "maximum recovery ping interval",
           parse="cannot parse maximum recovery interval value",
           entity="maximum recovery ping interval", lib_range=(1, S32_MAX),
           lib_text="must be strictly positive"),
    # lustre_lnet_config_buffers(tiny, small, large): -1 leaves a pool alone, 0 = default size
    *(TunableSpec(f"{pool}_buffers", "lustre_lnet_config_buffers",
                  f"cannot parse {pool}_buffers value", "buf", "buffers", "buffers",
                  f"{pool}_router_buffers", lib_range=(-1, S32_MAX),
                  lib_errno=-ERANGE, lib_text="tiny, small and large must be >= 0")
      for pool in ("tiny", "small", "large")),
    TunableSpec("routing", "lustre_lnet_config_routing",
                "cannot parse routing value.\nmust be 0 for disable or 1 for enable",
                "routing", "routing", "routing", "forwarding"),
)}

#: module parameters of router.c that only a module load sets (no lnetctl verb): the engine
#: keeps them as tunables; ``lnetctl set`` accepts them as a testbed extension
#: (docs/differences.md) with the engine's checks.
ENGINE_ONLY = ("alive_router_check_interval", "router_ping_timeout",
               "avoid_asym_router_failure", "check_routers_before_use", "forwarding",
               # testbed-only (no LNet module or lnetctl has it): seed 004's recovery
               "testbed_seed_recovery_interval")

_LONG = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
LONG_MAX = 2**63 - 1


def parse_long(text: str) -> int | None:
    """lnetctl's ``parse_long``: ``strtol(text, &end, 0)`` consuming the whole string (an
    empty string is 0, strtol leaving ``end`` on the NUL); None on failure or ERANGE."""
    if text == "":
        return 0
    m = _LONG.fullmatch(text)
    if m is None:
        return None
    digits = m.group(2)
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits[0] == "0" else 10
    value = int(digits, base) * (-1 if m.group(1) == "-" else 1)
    return value if -LONG_MAX - 1 <= value <= LONG_MAX else None


def c_int(value: int) -> int:
    """A C ``long`` passed on as an ``int`` (gcc truncates modulo 2**32)."""
    return (value + 2**31) % 2**32 - 2**31


def coerced(spec: TunableSpec, value: int) -> int:
    """What liblnetconfig hands the kernel for the ``int`` it was given."""
    if spec.coerce == "bool":
        return int(value != 0)
    if spec.coerce == "u32":
        return value % 2**32
    return value


def lib_refusal(spec: TunableSpec, value: int) -> tuple[int, str] | None:
    """liblnetconfig's own check: (errno, descr) when it refuses ``value``, else None."""
    if spec.lib_range is None:
        return None
    lo, hi = spec.lib_range
    return None if lo <= value <= hi else (spec.lib_errno, spec.lib_text)
