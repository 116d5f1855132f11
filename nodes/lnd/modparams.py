"""Module parameters of the socket side of a node: ksocklnd's, and lnet's acceptor ports.

Theory of operation: ``modprobe ksocklnd sock_timeout=65`` and ``modprobe lnet
accept_port_bulk=989`` happen before LNet is configured; the node daemon gets them as
``--lnet-param NAME=VALUE`` beside the engine's own (``nodes/lnet/tunables.py``
``MODULE_PARAMS``), a ksocklnd one written ``ksocklnd.NAME`` as on the kernel command line.
``LND_PARAMS`` is their one table (name -> inclusive range), read by the daemon
(``nodes/dlc/verbs/lnetctl_config.apply_module_params``) and the topology validator
(``testbed/plan/schema.py``); ``LndParams`` holds the values one node was started with.

* ``ksocklnd.sock_timeout`` (socklnd_modparams.c, int, 0644): ``ksocknal_timeout()`` is
  ``sock_timeout ?: lnet_get_lnd_timeout()`` -- every NI's LND timeout, shown by ``lnetctl
  net show -v`` as ``lnd tunables: timeout`` (``ksocknal_tunables_setup``). Its default here
  is 0, not SOCKNAL_TIMEOUT_DEFAULT (docs/differences.md "socklnd timeout source").
* ``accept_port_bulk`` (lnet/lnet/acceptor.c, int, 0444, default 988 = ``accept_port``): when
  it differs from ``accept_port`` the acceptor listens on it too
  (``lnet_acceptor_add_sockets``) and ``lnet_connect`` sends every connection but
  SOCKLND_CONN_CONTROL there (``ksocknal_connect``: ``type == SOCKLND_CONN_CONTROL``).
* ``ksocklnd.skip_mr_route_setup`` (uint, 0444): declared by socklnd_modparams.c and read by
  no kernel code (the host's ``ksocklnd-config`` script reads its /sys file); stored, no
  effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.lnet.tunables import int_param

S32_MAX = 2**31 - 1
#: name as given (``ksocklnd.NAME`` for ksocklnd's) -> inclusive range of the int parameter.
#: The kernel takes any int; a negative timeout or a port outside 1..65535 is refused here
#: (bad input gets a one-line error).
LND_PARAMS: dict[str, tuple[int, int]] = {
    "ksocklnd.sock_timeout": (0, S32_MAX),
    "ksocklnd.skip_mr_route_setup": (0, 2**32 - 1),
    "accept_port_bulk": (1, 65535),
}


@dataclass(slots=True)
class LndParams:
    """The socket-side module parameters of one node (None/0: not given)."""

    sock_timeout: int = 0
    accept_port_bulk: int | None = None
    skip_mr_route_setup: int = 0


def lnd_param_value(name: str, value: object) -> int:
    """The integer ``value`` of LND parameter ``name``; raises LNetConfigError naming it."""
    return int_param(name, value, *LND_PARAMS[name])


def set_lnd_param(params: LndParams, name: str, value: object) -> int:
    """Store parameter ``name`` in ``params``; returns its value. Raises LNetConfigError."""
    number = lnd_param_value(name, value)
    setattr(params, name.rsplit(".", 1)[-1], number)
    return number


__all__ = ["LND_PARAMS", "LndParams", "lnd_param_value", "set_lnd_param"]
