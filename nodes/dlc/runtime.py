"""The ``Runtime`` protocol: everything the front end (``nodes/dlc``) asks of a node.

Theory of operation: the lnetctl/lctl/lst verbs (``nodes/dlc/verbs``), ``apply`` and ``glue``
reach a node only through the engine's public surface (``rt.engine``) and the members below.
Three kinds of object implement the protocol in full, each member explicitly (no verb probes
a runtime with ``getattr`` or asks which class it is; ``tests/unit/test_layout_front.py``
holds every implementation to this list, member by member, signature by signature):

* ``nodes/daemon/runtime.py`` ``NodeRuntime``: a node daemon (loop clock, socklnd, o2iblnd,
  the namespace's interfaces, ``RUNDIR/hosts``);
* ``testbed/sim/runtime.py`` ``SimRuntime``: a simulated node (virtual clock, the fabric, the
  topology plan's interfaces and hosts);
* ``tests/unit/rtdouble.py`` ``RuntimeDouble``: the unit tests' engine-only node.

The node around LNet (its interfaces, host names, the debug log) is one member, ``host``,
with a protocol of its own (``NodeHost``): ``nodes/daemon/host.py`` ``DaemonHost``, the
simulator's ``SimHost``, the double's.

What a backend does not have it says through the member itself: a value of ``None`` where the
member's type allows it, or ``NotOnThisBackend`` (an ``LNetConfigError``, -EOPNOTSUPP, which
the verbs already print as the kernel's refusal). Neither package imports the other: the
daemon's and the simulator's runtimes satisfy this protocol by shape (``typing.Protocol``).

DLC state that is not LNet's (obdclass's UUID table, ``lctl set_param`` values of the front
end, the debug log's own lines and its last clear) lives in one place: ``rt.dlc_state``, a
plain dict field of every runtime, gone with it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from nodes.lnet.errors import EOPNOTSUPP, LNetConfigError

if TYPE_CHECKING:
    from nodes.lnd.connlist import ConnInfo, IfaceInfo, PeerInfo
    from nodes.lndtimeouts import LndTimeouts
    from nodes.lnet.actions import Action, MDEvent
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.nid import NID, Net
    from nodes.o2ib.kibtx import O2ibTunables
    from nodes.selftest.node import Selftest


class NotOnThisBackend(LNetConfigError):
    """A runtime member this backend has no counterpart for (-EOPNOTSUPP, one line)."""

    def __init__(self, backend: str, what: str) -> None:
        super().__init__(-EOPNOTSUPP, f"{what}: not on the {backend} backend")


class SockTables(Protocol):
    """What ``lctl --net NET conn_list|peer_list|interface_list`` read of the socklnd
    (``jt_ptl_print_connections``, ``jt_ptl_print_peers``, ``jt_ptl_print_interfaces``)."""

    def connections(self, ni: NID) -> list[ConnInfo]: ...
    def peers(self, ni: NID) -> list[PeerInfo]: ...
    def interface(self, ni: NID) -> IfaceInfo | None: ...


class NodeHost(Protocol):
    """The node around LNet (``Runtime.host``): a daemon's network namespace and the
    testbed's hosts file (``nodes/daemon/host.py``), or a simulated node's topology plan
    (``testbed/sim/runtime.py``)."""

    def addresses(self) -> list[tuple[str, str]]:
        """(interface, address) as ``getifaddrs`` lists them: every IPv4 address in
        interface order, then every IPv6 one; ``lo`` left out."""
        ...

    def interface_up(self, name: str) -> bool:
        """Whether interface ``name`` is UP (``IFF_UP``; a simulated link not set down)."""
        ...

    def resolve_host(self, name: str) -> str | None:
        """``getaddrinfo(name, AF_INET)`` against the testbed's hosts view, never the
        machine's resolver; None when the name is unknown."""
        ...

    def debug_clock(self) -> float:
        """The time ``lctl dk`` stamps the front end's lines with."""
        ...

    def engine_log(self) -> list[tuple[float, str]] | None:
        """The engine's log lines (time, text) where the runtime keeps them (the
        simulator); None where they go to the process's logger (``debuglog`` captures)."""
        ...


class Runtime(Protocol):
    """One node as the front end sees it (module docstring: who implements it)."""

    # (read-only members: an implementation may keep each as a plain attribute of a narrower
    # type, which a settable protocol attribute would refuse)
    @property
    def engine(self) -> LNetEngine:
        """The node's LNet (sans-I/O); the verbs call only its public surface."""
        ...

    @property
    def dlc_state(self) -> dict[str, Any]:
        """The front end's own per-node state (module docstring), a field of the runtime."""
        ...

    @property
    def selftest(self) -> Selftest:
        """lnet_selftest on this node (``nodes/selftest``), which ``lst`` drives."""
        ...

    @property
    def host(self) -> NodeHost:
        """The node around LNet: interfaces, host names, the debug log's clock and lines."""
        ...

    # -------------------------------------------------------------- clock and actions
    def now(self) -> float:
        """The engine's clock: the loop's monotonic one, or virtual time."""
        ...

    def execute(self, actions: list[Action]) -> None:
        """Carry out the engine's ``actions`` (``NodeDriver.execute``)."""
        ...

    def wait_final(self, start: Callable[[], tuple[int, list[Action]]]
                   ) -> Coroutine[Any, Any, list[MDEvent]]:
        """Start an operation and wait until its MD is unlinked; all its events."""
        ...

    def share(self) -> Coroutine[Any, Any, None]:
        """Between two long steps of one request: let the node serve the others."""
        ...

    def flush_notices(self) -> None:
        """After a verb's direct engine calls: health notices to the node's sink."""
        ...

    # -------------------------------------------------------------- NIs and the LND
    def net_add(self, net: Net, interface: str, *, address: str | None = None,
                **kw: Any) -> Coroutine[Any, Any, NID]:
        """``lnet_dyn_add_ni`` with the LND's startup; the new NI's NID."""
        ...

    def net_del(self, net: Net, interface: str | None) -> Coroutine[Any, Any, None]:
        """``lnet_dyn_del_ni`` with the LND's shutdown of each NI."""
        ...

    def unconfigure(self) -> Coroutine[Any, Any, None]:
        """``lnet unconfigure``: every NI down, LNet down."""
        ...

    def lnd_link(self, nid: NID, up: bool) -> bool:
        """``lctl net_ni_down|up``: a link event from the LND; whether the state changed."""
        ...

    @property
    def timeouts(self) -> LndTimeouts:
        """The LND's per-NI timeouts (``net set --lnd-timeout``), ksocklnd's ``sock_timeout``
        and the socket side's module parameters: the node driver's (``nodes/lndtimeouts.py``,
        the same on every backend)."""
        ...

    def set_bulk_port(self, port: int) -> None:
        """lnet's ``accept_port_bulk``: a second acceptor listener for bulk connections."""
        ...

    def set_conns_per_peer(self, nid: NID, conns_per_peer: int) -> None:
        """An NI's ``conns_per_peer`` for the connections the LND makes from now on."""
        ...

    def set_o2ib_tunables(self, nid: NID, tunables: O2ibTunables) -> None:
        """An o2ib NI's tunables (``kiblnd_tunables_setup``, clamped) for the connections the
        o2iblnd makes from now on."""
        ...

    def socklnd_tables(self) -> SockTables:
        """The socklnd's connections, peers and interfaces, as ``lctl`` lists them."""
        ...
