"""The node around a daemon's LNet: its namespace's interfaces, host names, ``lctl dk``'s clock.

Theory of operation: the front end asks a node's runtime for these through ``Runtime.host``
(``nodes/dlc/runtime.py`` ``NodeHost``); a daemon answers from the network namespace it runs
in (``if_nameindex``, ``SIOCGIFADDR``, ``/proc/net/if_inet6``, ``IFF_UP``: ``ifaddr.py``) and
from the testbed's own hosts view (``RUNDIR/hosts``, ``etchosts.py``), never the machine's
resolver. Its engine's log lines go to the process's ``lnet`` logger, which the front end
captures itself (``engine_log`` is None).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from nodes.daemon import etchosts
from nodes.daemon.ifaddr import interface_ipv4, interface_ipv6, interface_up


class DaemonHost:
    """``NodeHost`` of a node daemon (module docstring)."""

    def __init__(self, hosts_path: Path | None = None) -> None:
        #: the testbed's /etc/hosts view (``RUNDIR/hosts``); None: no host name resolves
        self.hosts_path = hosts_path

    def addresses(self) -> list[tuple[str, str]]:
        """(interface, address) of the namespace in ``getifaddrs``'s order: IPv4 by
        ``SIOCGIFADDR`` in ``if_nameindex`` order, then IPv6; ``lo`` left out."""
        names = [name for _index, name in socket.if_nameindex() if name != "lo"]
        return [(n, ip) for n, ip in ((n, interface_ipv4(n)) for n in names) if ip] + \
            [(n, ip) for n in names for ip in interface_ipv6(n)]

    def interface_up(self, name: str) -> bool:
        """``IFF_UP`` of interface ``name`` (``lnet_inet_enumerate``)."""
        return interface_up(name)

    def resolve_host(self, name: str) -> str | None:
        """``getaddrinfo(name, AF_INET)`` in ``RUNDIR/hosts``; None when unknown."""
        path = self.hosts_path
        return None if path is None else etchosts.lookup_file(path, name)

    def debug_clock(self) -> float:
        """``lctl dk`` stamps with the wall clock, as libcfs's trace buffer does."""
        return time.time()

    def engine_log(self) -> list[tuple[float, str]] | None:
        """None: the engine's lines go to this process's ``lnet`` logger."""
        return None
