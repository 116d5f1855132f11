"""A node's ``/sys/module/{lnet,ksocklnd}/parameters/*``: what each file reads and a write does.

Theory of operation: real LNet declares its module parameters with ``module_param`` (api-ni.c,
router.c, acceptor.c, lib-move.c, lib-ptl.c, module.c; socklnd_modparams.c): a file per
parameter, 0444 (read-only after load) or 0644 (writable, the write handed to the parameter's
``set`` op). ``PARAMS`` lists exactly those files (none of CPT's, issue 26 item 10), with
their mode, how the kernel parses a write (``kstrtoul``, ``param_set_int``/``uint``, or no
parse at all) and where the value lives:

* ``tunable``: an engine tunable; a read prints it now, a write goes to the engine's
  ``set_tunable`` -- the same kernel layer ``lnetctl set`` reaches (``nodes/daemon/
  lnetctl_set.py`` layer 3), so ``echo 2 > .../lnet_health_sensitivity`` and ``lnetctl set
  health_sensitivity 2`` change the same value with the same checks and effect;
* ``sock_timeout``: the driver's ksocklnd timeout (``LndTimeouts.set_module_sock_timeout``);
* ``stored``: a value the engine does not model (docs/differences.md "module parameter
  files"): it reads what the module was loaded with (the default, or ``--lnet-param``) and a
  write to a 0644 one is stored and read back, with no effect.

A refused write raises ``ParamError`` with the errno the kernel's write would fail with (the
shell prints its one line: dash ``echo: I/O error``, bash ``write error: Invalid argument``)
and the kernel's console line, which the caller logs (dmesg's place here: the node's log).
``ModParams`` is one node's set; the FUSE file system (``nodes/daemon/fusefs.py``, Mininet)
and the simulator's ``testbed exec`` (``testbed/sim/sysfs_exec.py``) both serve it.
"""

from __future__ import annotations

import errno as E
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodes.echo import clip
from nodes.lnet.errors import LNetConfigError

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime

ROOT = "/sys/module"
S32_MIN, S32_MAX, U32_MAX, U64_MAX = -(2**31), 2**31 - 1, 2**32 - 1, 2**64 - 1


class ParamError(OSError):
    """A refused read or write: ``errno`` (positive) and the kernel's console line (an
    ``OSError``, as the refused ``write(2)`` is: what the daemon's FUSE server answers)."""

    def __init__(self, errno: int, text: str) -> None:
        super().__init__(errno, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter file. ``parse``: ``ul`` (kstrtoul), ``int``/``uint`` (param_set_*),
    ``charp``, ``none`` (the setter parses nothing); ``where``: see the module docstring;
    ``target``: the engine tunable (``tunable``); ``default``: what ``stored`` starts at."""

    module: str
    name: str
    mode: int
    parse: str
    where: str
    target: str = ""
    default: str = "0"
    invert: bool = False  # lnet_peer_discovery_disabled: discovery = !value


def _t(name: str, target: str, parse: str = "ul", mode: int = 0o644, **kw: object) -> Param:
    return Param("lnet", name, mode, parse, "tunable", target, **kw)  # type: ignore[arg-type]


def _s(module: str, name: str, default: str, parse: str = "int", mode: int = 0o444) -> Param:
    return Param(module, name, mode, parse, "stored", default=default)


PARAMS: tuple[Param, ...] = (
    # api-ni.c
    _s("lnet", "networks", "", "charp"),
    _s("lnet", "ip2nets", "", "charp"),
    _s("lnet", "routes", "", "charp"),
    _s("lnet", "rnet_htable_size", "128"),  # LNET_REMOTE_NETS_HASH_DEFAULT
    _s("lnet", "use_tcp_bonding", "0"),
    _t("lnet_numa_range", "numa_range", "uint", 0o444),
    _t("lnet_health_sensitivity", "health_sensitivity"),
    _t("lnet_recovery_interval", "recovery_interval", "none"),  # deprecated: stores nothing
    _t("lnet_recovery_limit", "recovery_limit", "uint"),
    _t("lnet_max_recovery_ping_interval", "max_recovery_ping_interval"),
    _t("lnet_interfaces_max", "max_interfaces", "int"),
    _t("lnet_peer_discovery_disabled", "discovery", invert=True),
    _t("lnet_drop_asym_route", "drop_asym_route"),
    _t("lnet_transaction_timeout", "transaction_timeout"),
    _t("lnet_retry_count", "retry_count"),
    _t("lnet_response_tracking", "response_tracking"),
    _t("lock_prim_nid", "lock_prim_nid", "int", 0o444),
    # lib-move.c, lib-ptl.c, module.c, acceptor.c
    _s("lnet", "local_nid_dist_zero", "1"),
    _s("lnet", "portal_rotor", "3", mode=0o644),  # LNET_PTL_ROTOR_HASH_RT
    _s("lnet", "config_on_load", "0"),
    _s("lnet", "enable_sysctl_setup", "0", mode=0o644),
    _s("lnet", "accept", "secure", "charp"),
    Param("lnet", "accept_port", 0o444, "int", "port"),
    Param("lnet", "accept_port_bulk", 0o444, "int", "port_bulk"),
    _s("lnet", "accept_backlog", "127"),
    _s("lnet", "accept_timeout", "5", mode=0o644),
    # router.c
    _s("lnet", "forwarding", "", "charp"),
    _s("lnet", "tiny_router_buffers", "0"),
    _s("lnet", "small_router_buffers", "0"),
    _s("lnet", "large_router_buffers", "0"),
    _s("lnet", "peer_buffer_credits", "0"),
    _s("lnet", "auto_down", "1"),
    _t("check_routers_before_use", "check_routers_before_use", "int", 0o444),
    _t("avoid_asym_router_failure", "avoid_asym_router_failure", "int"),
    _s("lnet", "dead_router_check_interval", str(S32_MIN)),
    _s("lnet", "live_router_check_interval", str(S32_MIN)),
    _t("alive_router_check_interval", "alive_router_check_interval", "int"),
    _t("router_ping_timeout", "router_ping_timeout", "int"),
    _t("router_sensitivity_percentage", "router_sensitivity"),
    # socklnd_modparams.c (backoff_* and protocol are behind build options: not here)
    Param("ksocklnd", "sock_timeout", 0o644, "int", "sock_timeout"),
    *(_s("ksocklnd", n, d) for n, d in (
        ("credits", "256"), ("peer_credits", "8"), ("peer_buffer_credits", "0"),
        ("peer_timeout", "180"), ("nscheds", "0"), ("nconnds", "4"), ("nconnds_max", "64"),
        ("typed_conns", "1"), ("tos", "-1"))),
    *(_s("ksocklnd", n, d, mode=0o644) for n, d in (
        ("min_reconnectms", "1000"), ("max_reconnectms", "60000"), ("eager_ack", "0"),
        ("min_bulk", "1024"), ("tx_buffer_size", "0"), ("rx_buffer_size", "0"),
        ("nagle", "0"), ("round_robin", "1"), ("keepalive", "30"), ("keepalive_idle", "30"),
        ("keepalive_count", "5"), ("keepalive_intvl", "5"), ("enable_csum", "0"),
        ("inject_csum_error", "0"), ("enable_irq_affinity", "0"), ("nonblk_zcack", "1"),
        ("zc_min_payload", "16384"), ("zc_recv", "0"), ("zc_recv_min_nfrags", "16"))),
    _s("ksocklnd", "conns_per_peer", "0", "uint", 0o644),  # DEFAULT_CONNS_PER_PEER: auto
    _s("ksocklnd", "skip_mr_route_setup", "0", "uint"),
)
BY_PATH: dict[tuple[str, str], Param] = {(p.module, p.name): p for p in PARAMS}
MODULES: tuple[str, ...] = ("lnet", "ksocklnd")

#: kstrtoul/kstrtoint (lib/kstrtox.c): optional sign ('+' only for unsigned), base-0 digits,
#: at most one trailing newline
_NUMBER = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\n?")


def kstrto(text: str, lo: int, hi: int) -> int:
    """The value the kernel's ``kstrto*`` reads from ``text``; ParamError EINVAL/ERANGE."""
    if len(text) > 64:  # longer than any number a kstrto* reads (and int() of it is slow)
        raise ParamError(E.EINVAL, f"'{clip(text.rstrip())}' is not a number")
    m = _NUMBER.fullmatch(text)
    if m is None or (m.group(1) == "-" and lo >= 0):
        raise ParamError(E.EINVAL, f"'{clip(text.rstrip())}' is not a number")
    digits = m.group(2)
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits[0] == "0" and len(digits) > 1 else 10
    value = int(digits, base) * (-1 if m.group(1) == "-" else 1)
    if not lo <= value <= hi:
        raise ParamError(E.ERANGE, f"{value} is out of range")
    return value


_RANGE = {"ul": (0, U64_MAX), "int": (S32_MIN, S32_MAX), "uint": (0, U32_MAX)}


def parse_path(path: str) -> Param:
    """The parameter at ``/sys/module/MODULE/parameters/NAME``; ParamError ENOENT."""
    parts = path.rstrip("/").split("/")
    if len(parts) == 6 and parts[:3] == ["", "sys", "module"] and parts[4] == "parameters":
        param = BY_PATH.get((parts[3], parts[5]))
        if param is not None:
            return param
    raise ParamError(E.ENOENT, f"{clip(path)}: No such file or directory")


class ModParams:
    """One node's module parameter files, over its runtime ``rt``; ``given`` are the
    parameters it was loaded with (``--lnet-param NAME=VALUE``; ksocklnd's as
    ``ksocklnd.NAME``), read back by the ``stored`` ones."""

    #: the files served (``nodes/daemon/fusefs.py`` builds its tree from them)
    PARAMS: tuple[Param, ...] = PARAMS

    def __init__(self, rt: Runtime, given: Sequence[tuple[str, str]] = (),
                 port: int = 988) -> None:
        self.rt = rt
        self.port = port
        self.stored: dict[tuple[str, str], str] = {}
        for name, value in given:
            module, _, bare = name.rpartition(".")
            key = (module or "lnet", bare)
            if key in BY_PATH and BY_PATH[key].where == "stored":
                self.stored[key] = str(value)

    def read(self, param: Param) -> str:
        """The file's text, as ``param_get_*`` prints it (a value and a newline)."""
        return f"{self._value(param)}\n"

    def _value(self, p: Param) -> str:
        if p.where == "tunable":
            value = int(getattr(self.rt.engine.tunables, p.target))
            return str(1 - value if p.invert else value)
        lnd = self.rt.timeouts.lnd_params
        if p.where == "sock_timeout":
            return str(lnd.sock_timeout)
        if p.where == "port_bulk" and lnd.accept_port_bulk is not None:
            return str(lnd.accept_port_bulk)
        if p.where in ("port", "port_bulk"):
            return str(self.port)
        return self.stored.get((p.module, p.name), p.default)

    def write(self, param: Param, data: bytes) -> None:
        """One ``write(2)`` of ``data`` to the file; ParamError with the kernel's errno."""
        if not param.mode & 0o200:
            raise ParamError(E.EACCES, f"{param.name}: read-only after load (0444)")
        text = data.decode("utf-8", "replace")
        value = 0  # recovery_interval_set parses nothing (it only warns); charp: the text
        if param.parse not in ("none", "charp"):
            try:
                value = kstrto(text, *_RANGE[param.parse])
            except ParamError as e:
                raise ParamError(e.errno or E.EINVAL,
                                 f"Invalid module parameter value for '{param.name}': "
                                 f"{e.text}") from None
        if param.where == "tunable":
            self._set(param, value)
        elif param.where == "sock_timeout":
            self._sock_timeout(param, value)
        else:
            self.stored[(param.module, param.name)] = text.rstrip("\n") \
                if param.parse == "charp" else str(value)

    def _set(self, p: Param, value: int) -> None:
        if p.invert:
            value = 1 - (1 if value else 0)  # discovery_set: value ? 1 : 0, then negated
        rt = self.rt
        try:
            rt.execute(rt.engine.set_tunable(p.target, value, rt.now()))
        except LNetConfigError as e:
            raise ParamError(E.EINVAL, f"Invalid value for '{p.name}' ({value}): "
                                       f"{e.descr}") from None

    def _sock_timeout(self, p: Param, value: int) -> None:
        if value < 0:
            raise ParamError(E.EINVAL, f"Invalid value for 'sock_timeout' ({value}): "
                                       "must be >= 0 seconds")
        self.rt.timeouts.set_module_sock_timeout(value)


__all__ = ["MODULES", "PARAMS", "ROOT", "ModParams", "Param", "ParamError", "kstrto",
           "parse_path"]
