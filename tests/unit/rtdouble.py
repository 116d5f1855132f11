"""The unit tests' node runtime: the front end's ``Runtime`` protocol in full, on one engine.

``RuntimeDouble`` is what the verbs (``nodes/dlc/verbs``), ``apply`` and ``glue`` need of a
node when a test drives them without a daemon or a simulator: an engine, a settable clock
(``t``), the actions it was asked to carry out (``actions``, kept, not carried out), and a
host with the interfaces the test gives. What only a backend with an LND has (NIs brought up
on sockets, the LND's link events and parameters) is refused with ``NotOnThisBackend``, the
protocol's own "not here" (``tests/unit/test_layout_front.py`` holds this class to every
member of the protocol).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes import selftest
from nodes.dlc.runtime import NotOnThisBackend
from nodes.driver import NodeDriver
from nodes.lnd.connlist import ConnInfo, IfaceInfo, PeerInfo
from nodes.lnet.actions import Action, MDEvent
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net
from nodes.o2ib.kibtx import O2ibTunables

BACKEND = "unit-test double"


class HostDouble:
    """``NodeHost`` of the double: ``interfaces`` (name, IPv4, IPv6 list, up) and ``hosts``
    (name -> address) as the test sets them; the double's clock; the test's own log lines."""

    def __init__(self, rt: RuntimeDouble) -> None:
        self.rt = rt
        self.interfaces: list[tuple[str, str | None, list[str], bool]] = []
        self.hosts: dict[str, str] = {}
        self.log: list[tuple[float, str]] | None = None

    def addresses(self) -> list[tuple[str, str]]:
        return [(n, ip4) for n, ip4, _ip6, _up in self.interfaces if ip4] + \
            [(n, ip) for n, _ip4, ip6, _up in self.interfaces for ip in ip6]

    def interface_up(self, name: str) -> bool:
        return any(n == name and up for n, _ip4, _ip6, up in self.interfaces)

    def resolve_host(self, name: str) -> str | None:
        return self.hosts.get(name)

    def debug_clock(self) -> float:
        return self.rt.t

    def engine_log(self) -> list[tuple[float, str]] | None:
        return self.log


class _NoTables:
    """The double has no socklnd: every list is refused."""

    def connections(self, ni: NID) -> list[ConnInfo]:
        raise NotOnThisBackend(BACKEND, "lctl conn_list")

    def peers(self, ni: NID) -> list[PeerInfo]:
        raise NotOnThisBackend(BACKEND, "lctl peer_list")

    def interface(self, ni: NID) -> IfaceInfo | None:
        raise NotOnThisBackend(BACKEND, "lctl interface_list")


class RuntimeDouble:
    """``Runtime`` of the unit tests (module docstring)."""

    def __init__(self, engine: LNetEngine | None = None) -> None:
        self.engine = engine if engine is not None else LNetEngine()
        self.t = 0.0
        self.actions: list[Action] = []
        self.dlc_state: dict[str, Any] = {}
        self.host = HostDouble(self)
        # lnet_selftest needs a driver to attach to: one that keeps what it would transmit
        self._driver = NodeDriver(self.engine, now=self.now, transmit=self.actions.append,
                                  arm_timer=lambda _deadline: None,
                                  notify_peer_down=lambda _nid: None)
        self.selftest = selftest.attach(self._driver)
        #: the driver's LND timeouts (no LND: nobody is told of a change)
        self.timeouts = self._driver.timeouts

    def now(self) -> float:
        return self.t

    def execute(self, actions: list[Action]) -> None:
        self.actions += actions

    async def wait_final(self, start: Callable[[], tuple[int, list[Action]]]) -> list[MDEvent]:
        raise NotOnThisBackend(BACKEND, "waiting for an MD (no LND delivers)")

    async def share(self) -> None:
        return None

    def flush_notices(self) -> None:
        return None  # nobody listens to the double's notices

    async def net_add(self, net: Net, interface: str, *, address: str | None = None,
                      **kw: Any) -> NID:
        raise NotOnThisBackend(BACKEND, "net add (no LND)")

    async def net_del(self, net: Net, interface: str | None) -> None:
        raise NotOnThisBackend(BACKEND, "net del (no LND)")

    async def unconfigure(self) -> None:
        self.engine.unconfigure()

    def lnd_link(self, nid: NID, up: bool) -> bool:
        raise NotOnThisBackend(BACKEND, "lctl net_ni_down|up (no LND)")

    def set_bulk_port(self, port: int) -> None:
        return None  # kept in ``lnd_params`` by the caller; nothing listens

    def set_conns_per_peer(self, nid: NID, conns_per_peer: int) -> None:
        return None  # no LND connections to make

    def set_o2ib_tunables(self, nid: NID, tunables: O2ibTunables) -> None:
        return None  # no o2iblnd connections to make

    def socklnd_tables(self) -> _NoTables:
        return _NoTables()
