"""Global LNet tunables: defaults, ``lnetctl set`` range checks and ``global show`` order.

Theory of operation: one ``Tunables`` object per node holds today's module parameters (spec §0)
with the cross-checks of api-ni.c (``sensitivity_set``, ``retry_count_set``,
``transaction_to_set``). ``set()`` raises LNetConfigError with the errno lnetctl would report.
Deprecated knobs (``recovery_interval``, ``router_sensitivity``) are accepted and shown and, as
in today's LNet (spec §11.10), have no effect at their defaults. Where a seed and today's LNet
disagree, the seed's behaviour stays behind a knob real LNet would not misread (issue 14 item
1, issue 26 item 5, docs/differences.md): ``router_sensitivity`` below its default 100 (``set
router_sensitivity N`` or ``router_sensitivity_percentage=N``) makes router.py honour it as
seed 002 requires; ``recovery_interval`` does nothing at all, as api-ni.c
``recovery_interval_set`` (it warns "deprecated" and stores nothing: ``global show`` prints 1),
and seed 004's pre-2.15 local NI recovery (one ping every N seconds, each adding exactly
``health_sensitivity``) is the testbed-only ``testbed_seed_recovery_interval`` (``lnetctl set
testbed_seed_recovery_interval N`` or the topology's ``global:`` key of that name; 0 = off), a
name no real lnetctl or module accepts. The defaults are today's LNet, and an export/import
round trip (which writes the defaults back) keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from nodes.echo import clip
from nodes.lnet.errors import EINVAL, ERANGE, LNetConfigError

LNET_MAX_HEALTH_VALUE: Final = 1000
LNET_INTERFACES_MAX_DEFAULT: Final = 4096
LNET_INTERFACES_MIN: Final = 16
U32_MAX: Final = 2**32 - 1
S32_MAX: Final = 2**31 - 1

#: The one table of tunable ranges (issue 12 item 4): name -> the inclusive range the kernel
#: accepts for it, whether it comes from ``lnetctl set`` or as the module parameter at load.
#: The engine's setters below check it, ``MODULE_PARAMS`` takes its ranges from it, the topology
#: validator (``testbed/plan/schema.py``) and ``nodes/dlc/tunables.py`` (whose ``lib_range`` is
#: liblnetconfig's own, earlier check) read it. Sources: api-ni.c module parameters and their
#: ``kernel_param_ops`` setters, router.c for the router ones.
RANGES: Final[dict[str, tuple[int, int]]] = {
    "numa_range": (0, U32_MAX),  # lnet_numa_range: uint; IOC_LIBCFS_SET_NUMA_RANGE __u32
    "max_interfaces": (0, U32_MAX),  # intf_max_set: uint, below the minimum -> the default
    "discovery": (0, 1),  # discovery_set (lnet_peer_discovery_disabled)
    "drop_asym_route": (0, 1),  # drop_asym_route_set
    "retry_count": (0, U32_MAX),  # retry_count_set: uint, and <= transaction_timeout
    "transaction_timeout": (1, U32_MAX),  # transaction_to_set refuses 0
    "health_sensitivity": (0, LNET_MAX_HEALTH_VALUE),  # sensitivity_set
    "recovery_interval": (1, U32_MAX),  # recovery_interval_set: "at least 1 second"
    "router_sensitivity": (0, 100),  # rtr_sensitivity_set: a percentage
    "response_tracking": (0, 3),  # response_tracking_set: lnet_mt_type
    "recovery_limit": (0, U32_MAX),  # recovery_limit_set: uint
    "max_recovery_ping_interval": (1, U32_MAX),  # max_recovery_ping_interval_set: > 0
    "routing": (0, 1),  # lnet_dyn_configure (IOC_LIBCFS_CONFIG_RTR): enable 0/1
    # tiny/small/large_router_buffers: int module parameters; lnet_rtrpools_adjust refuses <= 0
    "tiny_buffers": (1, S32_MAX),
    "small_buffers": (1, S32_MAX),
    "large_buffers": (1, S32_MAX),
    # router.c module parameters (int): a site's module options; lnetctl set is a testbed
    # extension for them (docs/differences.md). <= 0 turns the router checker off.
    "alive_router_check_interval": (-(2**31), S32_MAX),
    "router_ping_timeout": (0, S32_MAX),
    "avoid_asym_router_failure": (0, 1),
    "check_routers_before_use": (0, 1),
    "forwarding": (0, 1),  # forwarding="enabled"|"disabled"
    "auto_down": (0, 1),
    "peer_buffer_credits": (0, S32_MAX),
    "lock_prim_nid": (0, 1),
    "local_nid_dist_zero": (0, 1),
    # testbed-only: seed 004's fixed-interval local NI recovery, seconds (0 = today's LNet)
    "testbed_seed_recovery_interval": (0, U32_MAX),
}


@dataclass(slots=True)
class Tunables:
    """Values as shown by ``lnetctl global show`` (spec §9.3), plus router/module parameters."""

    numa_range: int = 0
    max_interfaces: int = LNET_INTERFACES_MAX_DEFAULT
    discovery: int = 1
    drop_asym_route: int = 0
    retry_count: int = 2
    transaction_timeout: int = 150
    health_sensitivity: int = 100
    recovery_interval: int = 1
    router_sensitivity: int = 100
    response_tracking: int = 3
    recovery_limit: int = 0
    max_recovery_ping_interval: int = 900
    # not in `global show`, but settable
    routing: int = 0
    tiny_buffers: int = 2048
    small_buffers: int = 16384
    large_buffers: int = 1024
    # router module parameters (router.c, spec §0/§6); `forwarding` = forwarding=enabled
    alive_router_check_interval: int = 60
    router_ping_timeout: int = 50
    avoid_asym_router_failure: int = 1
    check_routers_before_use: int = 0
    forwarding: int = 0
    # api-ni.c lock_prim_nid (module parameter, default 1): LNetAddPeer locks the primary NID
    # Lustre gives first (peer.c, addpeer.py); not in `global show`, read-only after load
    lock_prim_nid: int = 1
    peer_buffer_credits: int = 0  # router.c: router buffer credits per peer (nets.py)
    # testbed-only: seed 004's local NI recovery interval (module doc); 0 = off
    testbed_seed_recovery_interval: int = 0

    @property
    def lnd_timeout(self) -> int:
        """``lnet_set_lnd_timeout``: max((tt-1)/(rc+1), 1), shown as lnd_timeout (spec §0)."""
        return derived_lnd_timeout(self.transaction_timeout, self.retry_count)

    def global_show(self) -> dict[str, int]:
        """The ``global:`` block in lnetctl's key order (spec §9.3)."""
        return {
            "numa_range": self.numa_range,
            "max_interfaces": self.max_interfaces,
            "discovery": self.discovery,
            "drop_asym_route": self.drop_asym_route,
            "retry_count": self.retry_count,
            "transaction_timeout": self.transaction_timeout,
            "health_sensitivity": self.health_sensitivity,
            "recovery_interval": self.recovery_interval,
            "router_sensitivity": self.router_sensitivity,
            "lnd_timeout": self.lnd_timeout,
            "response_tracking": self.response_tracking,
            "recovery_limit": self.recovery_limit,
            "max_recovery_ping_interval": self.max_recovery_ping_interval,
        }

    def set(self, name: str, value: int) -> None:
        """Apply ``lnetctl set NAME VALUE`` with the kernel's checks; raise LNetConfigError."""
        setter = _SETTERS.get(name)
        if setter is None:
            raise LNetConfigError(-EINVAL, f"unknown tunable '{clip(str(name))}'")
        setter(self, value)


#: LNet's own tunables (the testbed-only knob is not one)
TUNABLE_NAMES: Final = tuple(f.name for f in fields(Tunables)
                             if f.name != "testbed_seed_recovery_interval")


def _bad(what: str, value: int, errno: int = EINVAL) -> LNetConfigError:
    return LNetConfigError(-errno, f"cannot configure {what} to {value}: Invalid argument")


def _check(name: str, v: int, text: str) -> None:
    lo, hi = RANGES[name]
    if not lo <= v <= hi:
        raise LNetConfigError(-EINVAL, text)


def _set_sensitivity(t: Tunables, v: int) -> None:
    _check("health_sensitivity", v, "cannot configure health sensitivity: Invalid argument")
    if v == 0 and t.health_sensitivity != 0:
        t.retry_count = 0  # api-ni.c sensitivity_set: health off means retries off
    t.health_sensitivity = v


def _set_retry_count(t: Tunables, v: int) -> None:
    text = "cannot configure retry count: Invalid argument"
    _check("retry_count", v, text)
    if v > t.transaction_timeout or (v > 0 and t.health_sensitivity == 0):
        raise LNetConfigError(-EINVAL, text)
    t.retry_count = v


def _set_transaction_timeout(t: Tunables, v: int) -> None:
    text = "cannot configure transaction timeout: Invalid argument"
    _check("transaction_timeout", v, text)
    if v <= t.retry_count:
        raise LNetConfigError(-EINVAL, text)
    t.transaction_timeout = v


def _set_range(name: str):  # type: ignore[no-untyped-def]
    lo, hi = RANGES[name]

    def setter(t: Tunables, v: int) -> None:
        if not lo <= v <= hi:
            raise _bad(name, v, ERANGE if name == "response_tracking" else EINVAL)
        setattr(t, name, v)

    return setter


def _set_recovery_interval(t: Tunables, v: int) -> None:
    """api-ni.c ``recovery_interval_set`` accepts anything, warns that it is deprecated and
    stores nothing (LU-13569): ``global show`` keeps printing 1 and recovery is unchanged
    (the engine logs the warning, ``config_api.set_tunable``)."""


def _set_max_interfaces(t: Tunables, v: int) -> None:
    # the kernel replaces values below the minimum by the default (spec §9.1)
    t.max_interfaces = LNET_INTERFACES_MAX_DEFAULT if v < LNET_INTERFACES_MIN else v


def _set_buffers(name: str):  # type: ignore[no-untyped-def]
    def setter(t: Tunables, v: int) -> None:
        _check(name, v, "tiny, small and large must be >= 0")
        setattr(t, name, v)

    return setter


_SETTERS: Final = {
    "health_sensitivity": _set_sensitivity,
    "retry_count": _set_retry_count,
    "transaction_timeout": _set_transaction_timeout,
    "numa_range": _set_range("numa_range"),
    "max_interfaces": _set_max_interfaces,
    "discovery": _set_range("discovery"),
    "drop_asym_route": _set_range("drop_asym_route"),
    "recovery_interval": _set_recovery_interval,
    "testbed_seed_recovery_interval": _set_range("testbed_seed_recovery_interval"),
    "router_sensitivity": _set_range("router_sensitivity"),
    "response_tracking": _set_range("response_tracking"),
    "recovery_limit": _set_range("recovery_limit"),
    "max_recovery_ping_interval": _set_range("max_recovery_ping_interval"),
    "routing": _set_range("routing"),
    "tiny_buffers": _set_buffers("tiny_buffers"),
    "small_buffers": _set_buffers("small_buffers"),
    "large_buffers": _set_buffers("large_buffers"),
    "alive_router_check_interval": _set_range("alive_router_check_interval"),
    "router_ping_timeout": _set_range("router_ping_timeout"),
    "avoid_asym_router_failure": _set_range("avoid_asym_router_failure"),
    "check_routers_before_use": _set_range("check_routers_before_use"),
    "forwarding": _set_range("forwarding"),
}


# --------------------------------------------------------------------------- module parameters
#: LNet module parameters a site sets at module load (``options lnet ...``; api-ni.c,
#: router.c, lib-move.c ``module_param``), spec §0. name -> (how, target):
#: "set": through the ``lnetctl set`` tunable ``target`` with its checks ("inv": 1 - value);
#: "attr": the engine tunable attribute ``target`` (range (lo, hi) checked here);
#: "noop": deprecated or meaningless in the emulator, accepted and documented as such.
_MODULE_PARAMS: Final[dict[str, tuple[str, str]]] = {
    "lnet_numa_range": ("set", "numa_range"),
    "lnet_health_sensitivity": ("set", "health_sensitivity"),
    "lnet_recovery_interval": ("set", "recovery_interval"),
    "lnet_recovery_limit": ("set", "recovery_limit"),
    "lnet_max_recovery_ping_interval": ("set", "max_recovery_ping_interval"),
    "lnet_interfaces_max": ("set", "max_interfaces"),
    "lnet_peer_discovery_disabled": ("inv", "discovery"),
    "lnet_drop_asym_route": ("set", "drop_asym_route"),
    "lnet_transaction_timeout": ("set", "transaction_timeout"),
    "lnet_retry_count": ("set", "retry_count"),
    "lnet_response_tracking": ("set", "response_tracking"),
    "tiny_router_buffers": ("set", "tiny_buffers"),
    "small_router_buffers": ("set", "small_buffers"),
    "large_router_buffers": ("set", "large_buffers"),
    "router_sensitivity_percentage": ("set", "router_sensitivity"),
    "forwarding": ("set", "forwarding"),  # "enabled"/"disabled" (router.c)
    "alive_router_check_interval": ("attr", "alive_router_check_interval"),
    "router_ping_timeout": ("attr", "router_ping_timeout"),
    "avoid_asym_router_failure": ("attr", "avoid_asym_router_failure"),
    "check_routers_before_use": ("attr", "check_routers_before_use"),
    "auto_down": ("attr", "auto_down"),
    "peer_buffer_credits": ("attr", "peer_buffer_credits"),
    "lock_prim_nid": ("attr", "lock_prim_nid"),
    "local_nid_dist_zero": ("attr", "local_nid_dist_zero"),
    "testbed_seed_recovery_interval": ("set", "testbed_seed_recovery_interval"),  # not LNet's
    "dead_router_check_interval": ("noop", "deprecated (router.c)"),
    "live_router_check_interval": ("noop", "deprecated (router.c)"),
    "use_tcp_bonding": ("noop", "deprecated (api-ni.c)"),
    "rnet_htable_size": ("noop", "hash size: no observable effect"),
}
#: ranges of the deprecated/no-op parameters (int module parameters of no tunable)
_NOOP_RANGES: Final[dict[str, tuple[int, int]]] = {
    "dead_router_check_interval": (-1, S32_MAX), "live_router_check_interval": (-1, S32_MAX),
    "use_tcp_bonding": (0, 1), "rnet_htable_size": (1, S32_MAX)}
MODULE_PARAMS: Final[dict[str, tuple[str, str, tuple[int, int]]]] = {
    name: (how, target, _NOOP_RANGES[name] if how == "noop" else RANGES[target])
    for name, (how, target) in _MODULE_PARAMS.items()}


#: LNet's string module parameters (api-ni.c ``networks``/``ip2nets``/``routes``): kept as
#: given at module load, parsed only when LNet is configured from module parameters
#: (``lnet configure --all``, ``lctl net up``: nodes/dlc/modparams.py), as the kernel does.
STRING_MODULE_PARAMS: Final = ("networks", "ip2nets", "routes")


@dataclass(slots=True)
class ModuleStrings:
    """The string module parameters as given; ``forwarding_given``: ``forwarding=`` was set,
    so a route through a local gateway does not turn routing on (router.c
    ``lnet_rtrpools_alloc``'s ``im_a_router``)."""

    networks: str = ""
    ip2nets: str = ""
    routes: str = ""
    forwarding_given: bool = False


def module_param_value(name: str, value: object) -> int:
    """The integer a module parameter stands for; raises LNetConfigError naming it.

    ``forwarding`` takes ``enabled``/``disabled`` (router.c) as well as 1/0.
    """
    _how, _target, (lo, hi) = MODULE_PARAMS[name]
    if name == "forwarding" and isinstance(value, str) and value in ("enabled", "disabled"):
        return int(value == "enabled")
    return int_param(name, value, lo, hi)


def int_param(name: str, value: object, lo: int, hi: int) -> int:
    """An int module parameter's value in ``lo..hi`` (``param_set_int`` reads C's base
    prefixes); raises LNetConfigError naming it. Also the socket side's (nodes/lnd)."""
    try:
        number = value if isinstance(value, int) and not isinstance(value, bool) \
            else int(str(value), 0)
    except ValueError:
        raise LNetConfigError(-EINVAL, f"module parameter {name}: '{clip(str(value))}' is not an "
                                       "integer") from None
    if not lo <= number <= hi:
        raise LNetConfigError(-EINVAL, f"module parameter {name}: {number} not in {lo}..{hi}")
    return number


def apply_module_param(t: Tunables, name: str, value: object) -> None:
    """Apply one module parameter at "module load" (before ``lnet configure``)."""
    how, target, _rng = MODULE_PARAMS[name]
    number = module_param_value(name, value)
    if how == "noop":
        return
    if how == "inv":
        t.set(target, 1 - number)
    elif how == "set":
        t.set(target, number)
    elif not hasattr(t, target):
        raise LNetConfigError(-EINVAL, f"module parameter {name} is not supported by this "
                                       "engine yet")
    else:
        setattr(t, target, number)


def derived_lnd_timeout(transaction_timeout: int, retry_count: int) -> int:
    """``lnet_set_lnd_timeout``: the LND timeout LNet derives, max((tt - 1) / (rc + 1), 1)
    (spec §0). The one formula: the engine's ``Tunables.lnd_timeout`` (what a node's LNDs
    follow, ``NodeDriver.sync_lnd_timeouts``) and ``testbed check``'s completion and
    fatal-NI deadlines (``testbed/observe/check_state.py``) both call it, so the checker's
    idea of when LNet must finish a message cannot drift from the LND's (explore seed 341)."""
    return max((transaction_timeout - 1) // (retry_count + 1), 1)


def attempt_timeout(lnd_timeout: int, retry_count: int) -> int:
    """lib-msg.c ``get_msg_deadline``: how far past its commit an attempt's deadline is,
    the LND timeout x (retry_count + 1) + 1 (spec §3.4); ``Sender.msg_deadline`` and the
    checker both use it."""
    return lnd_timeout * (retry_count + 1) + 1
