"""The plan: frozen dataclasses a validated topology becomes (STYLE rule 8: plan, then apply).

Theory of operation: a :class:`Plan` is made only of frozen dataclasses, tuples and
``ipaddress`` values; backends (mininet, sim, vagrant) only *realise* it. ``TopologyError`` is
the one refusal, a one-line ``file:line: field: reason``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from nodes.dlc.commands import PeerAdd, RouteAdd, UdspAdd
from nodes.echo import shown
from nodes.lnet.nid import NID, NID_SIZE_IPV6, Net

#: Testbed, node and network names: they reach commands, interface names and paths.
#: Match with ``NAME_RE.fullmatch`` (``$`` alone would accept a trailing newline).
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
#: Names that match NAME_RE but are not testbed names: entries of the run root every
#: testbed shares (``runstate.BY_NETNS``; issue 11 item 4: ``down -n by-netns`` once
#: deleted every testbed's lnetctl registry).
RESERVED_NAMES = frozenset({"by-netns"})


class TopologyError(Exception):
    """A refused topology; ``str(e)`` is one line per problem: ``file:line: field: reason``.

    The loader reports every problem it finds at once (``errors``: each a one-line
    ``TopologyError``; ``str`` shows the first :data:`MAX_SHOWN` then ``and N more``); the
    attributes ``reason``, ``path``, ``line`` and ``field`` are the first problem's.
    """

    def __init__(self, reason: str, *, path: str, line: int | None = None, field: str = ""):
        self.reason = reason
        self.path = path
        self.line = line
        self.field = field
        where = path if line is None else f"{path}:{line}"
        parts = [where, field, reason] if field else [where, reason]
        self.errors: list[TopologyError] = [self]
        super().__init__(_one_line(": ".join(parts)))

    @classmethod
    def combine(cls, errors: list[TopologyError]) -> TopologyError:
        """One error carrying ``errors`` (in the order found); ``str`` lists them."""
        first = errors[0]
        combined = cls(first.reason, path=first.path, line=first.line, field=first.field)
        combined.errors = list(errors)
        return combined

    def lines(self) -> list[str]:
        """One line per problem, at most :data:`MAX_SHOWN`, then ``and N more``."""
        shown = [Exception.__str__(e) for e in self.errors[:MAX_SHOWN]]
        if len(self.errors) > MAX_SHOWN:
            shown.append(f"and {len(self.errors) - MAX_SHOWN} more")
        return shown

    def __str__(self) -> str:
        return "\n".join(self.lines())


#: problems a refused topology lists before ``and N more`` (issue 18)
MAX_SHOWN = 20


# --------------------------------------------------------------------------- the plan


def _one_line(text: str) -> str:
    """Escape every character ``str.splitlines`` would break on, keeping messages one line."""
    return "".join(repr(c)[1:-1] if len(f"a{c}b".splitlines()) > 1 else c for c in text)


# --------------------------------------------------------------------------- validation helpers


@dataclass(frozen=True)
class SegmentPlan:
    """One L2 segment (a bridge) carrying one LNet net on one IPv4 subnet, and optionally an
    IPv6 subnet as well (``subnet6``: every interface on it gets an address in both)."""

    name: str
    #: the ``lnet:`` net, parsed once by the validator (``schema.py``)
    net: Net
    subnet: ipaddress.IPv4Network
    subnet6: ipaddress.IPv6Network | None = None
    #: False: an IPv6-only network (``subnet6`` without ``subnet``): interfaces get only their
    #: IPv6 address and the NI is a large NID (``lnet configure --large``); ``subnet`` is then
    #: an internal 0.N.0.0 block numbering the hosts, never configured on an interface
    ipv4: bool = True
    #: ``tunables:`` (peer_timeout, peer_credits, peer_buffer_credits, credits) and ``lnd
    #: tunables:`` (lnetctl's YAML keys) given to every NI on it (``lnetctl net add``)
    tunables: tuple[tuple[str, int], ...] = ()
    lnd_tunables: tuple[tuple[str, int], ...] = ()

    def ip6_of(self, ip: ipaddress.IPv4Address) -> ipaddress.IPv6Address | None:
        """The IPv6 address of the interface numbered ``ip``: its host offset in subnet6."""
        if self.subnet6 is None:
            return None
        return self.subnet6.network_address + (int(ip) - int(self.subnet.network_address))

    @property
    def lnet(self) -> str:
        """The net as the topology file and lnetctl print it."""
        return str(self.net)

    def nid_of(self, ip: ipaddress.IPv4Address) -> NID:
        """The NID ``lnetctl net add`` gives that interface: IPv4, or IPv6 on an IPv6-only
        network."""
        return nid_on(self.net, ip, None if self.ipv4 else self.ip6_of(ip))


def nid_on(net: Net, ip: ipaddress.IPv4Address, ip6: ipaddress.IPv6Address | None) -> NID:
    """The NID of an interface numbered ``ip`` (``ip6``: its address on an IPv6-only network,
    a large NID), made from the typed parts: nothing parsed."""
    if ip6 is None:
        return NID(net, int(ip))
    return NID(net, int(ip6), size=NID_SIZE_IPV6)


@dataclass(frozen=True)
class IfacePlan:
    """One node interface and the NI configured on it."""

    name: str
    segment: str
    net: Net
    ip: ipaddress.IPv4Address
    prefixlen: int
    numa: int | None = None  # emulated NUMA node of the device (lnetctl net add --numa)
    ip6: ipaddress.IPv6Address | None = None  # the segment's subnet6 + the IPv4 host offset
    prefixlen6: int = 0
    ipv4: bool = True  # False: IPv6-only (``ip`` only numbers the host, SegmentPlan.ipv4)
    tunables: tuple[tuple[str, int], ...] = ()  # the segment's (SegmentPlan.tunables)
    lnd_tunables: tuple[tuple[str, int], ...] = ()

    @property
    def nid(self) -> str:
        """The NI's NID as lnetctl prints it (``nid_value``'s text)."""
        return str(self.nid_value)

    @property
    def nid_value(self) -> NID:
        return nid_on(self.net, self.ip, None if self.ipv4 else self.ip6)

    @property
    def address(self) -> str:
        """The address the NI binds: IPv4, or IPv6 on an IPv6-only network."""
        return str(self.ip) if self.ipv4 or self.ip6 is None else str(self.ip6)


@dataclass(frozen=True)
class PeerPlan:
    """A long-form static peer: ``lnetctl peer add --prim_nid P [--nid ...] [--non_mr]
    [--lock_prim]`` (cfg-070)."""

    prim_nid: NID
    nids: tuple[NID, ...] = ()
    non_mr: bool = False
    lock_prim: bool = False

    def command(self) -> PeerAdd:
        return PeerAdd(prim_nid=self.prim_nid, nids=self.nids, non_mr=self.non_mr,
                       lock_prim=self.lock_prim)

    def argv(self) -> list[str]:
        return self.command().argv()


@dataclass(frozen=True)
class RoutePlan:
    """``lnetctl route add --net N --gateway NID [--hop H] [--priority P]`` (spec §6.1)."""

    net: Net
    gateway: NID
    hop: int | None = None
    priority: int | None = None

    def command(self) -> RouteAdd:
        return RouteAdd(net=self.net, gateways=(self.gateway,),
                        hop=-1 if self.hop is None else self.hop,
                        priority=-1 if self.priority is None else self.priority)

    def argv(self) -> list[str]:
        return self.command().argv()


@dataclass(frozen=True)
class NodePlan:
    """One emulated node: its interfaces (NIs), merged tunables and static peers.

    ``module_params`` are LNet module parameters given to the daemon before LNet starts;
    ``static_peers`` the long-form peers, ``udsp_rules`` the rules in order (typed ``udsp
    add`` commands; ``udsp`` renders them as lnetctl words) and ``lnet`` a raw ``lnetctl
    export``-format block imported last (spec §9.4).
    """

    name: str
    interfaces: tuple[IfacePlan, ...]
    tunables: tuple[tuple[str, int], ...]
    peers: tuple[str, ...]
    module_params: tuple[tuple[str, str], ...] = ()
    static_peers: tuple[PeerPlan, ...] = ()
    udsp_rules: tuple[UdspAdd, ...] = ()
    lnet: dict[str, Any] | None = None
    #: ``routes:`` (gateway names resolved to NIDs); ``routing: true`` and ``buffers:`` are
    #: in ``tunables`` as ``forwarding``/``*_buffers`` (module parameter forwarding=enabled)
    routes: tuple[RoutePlan, ...] = ()
    #: ``multi_rail: false``: a non-Multi-Rail ("downrev") node, configured with the
    #: testbed-only ``lnetctl set multi_rail 0`` before ``lnet configure`` (bck-025)
    multi_rail: bool = True
    #: ``host:``: the ``hosts:`` entry this node runs on (None: the backend places it)
    host: str | None = None

    @property
    def nids(self) -> tuple[str, ...]:
        return tuple(i.nid for i in self.interfaces)

    @property
    def nid_values(self) -> tuple[NID, ...]:
        """``nids`` typed (what a peer's ``peer add`` names)."""
        return tuple(i.nid_value for i in self.interfaces)

    @property
    def udsp(self) -> tuple[tuple[str, ...], ...]:
        """The UDSP rules as ``lnetctl udsp add`` words (display and logs)."""
        return tuple(tuple(rule.argv()) for rule in self.udsp_rules)


@dataclass(frozen=True)
class HostPlan:
    """One ``hosts:`` entry: this machine (no ``ssh``), a machine reached over SSH
    (``[user@]address``, ``port``, identity ``key``), or, on the vagrant backend, a guest;
    ``address`` is its management/underlay address when not the SSH one."""

    name: str
    ssh: str | None = None
    port: int = 22
    key: str | None = None
    address: str | None = None


@dataclass(frozen=True)
class Plan:
    """A whole validated testbed; backends realise it and nothing else."""

    name: str
    source: str
    segments: tuple[SegmentPlan, ...]
    nodes: tuple[NodePlan, ...]
    tunables: tuple[tuple[str, int], ...]
    #: validated ``faults:`` items (faults.spec mappings), applied once the testbed is up
    faults: tuple[dict[str, Any], ...] = ()
    #: ``hosts:`` (placement of nodes: ``NodePlan.host``; backends: testbed/vagrant/)
    hosts: tuple[HostPlan, ...] = ()

    @functools.cached_property
    def by_name(self) -> dict[str, NodePlan]:
        """Every node by name (built once; ``node`` is O(1))."""
        return {n.name: n for n in self.nodes}

    def node(self, name: str) -> NodePlan:
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"no node {shown(name)} in testbed {shown(self.name)}") from None

    def segment(self, name: str) -> SegmentPlan:
        for s in self.segments:
            if s.name == name:
                return s
        raise KeyError(f"no network {shown(name)} in testbed {shown(self.name)}")
