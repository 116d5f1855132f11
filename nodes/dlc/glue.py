"""Where the front end touches engine and runtime state that has no method yet.

Theory of operation: every DLC command is carried out through the engine's public surface
(``net_add``, ``peer_add``, ``router.add``, ...). A few lnetctl options set per-NI or per-peer
state that the kernel simply stores and the engine has no setter for today; they are kept here,
in one place, so the engine refactor (issue 12) changes one module when it adds the methods
(docs/sanity-lnet.md gap list E5-E7):

* ``conns_per_peer`` of an NI (``lnd tunables``): stored on the NI (``net show -v``) and
  handed to the daemon's socklnd (``set_conns_per_peer``: connections made from then on); the
  simulator has no LND connections (``lctl conn_list`` data is still missing, E5);
* ``peer_buffer_credits`` of a net (``tunables``), as ``lnet_ni_tunables``;
* ``peer set --state``: the kernel's IOC_LIBCFS_SET_PEER is ``lp->lp_state = state`` (E7);
* the node's interfaces and their addresses, which ``net add --nid`` and ip2nets match, as
  the runtime lists them (``Runtime.addresses``, ``interface_up``: the daemon's namespace, a
  simulated node's plan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet.errors import EINVAL, ENOENT, EOPNOTSUPP, LNetConfigError
from nodes.lnet.ni import LNetNI
from nodes.lnet.nid import NID, O2IBLND
from nodes.o2ib.kibtx import O2ibTunables, TunableError

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime
    from nodes.lnet.engine import LNetEngine


def local_interfaces(rt: Runtime) -> list[tuple[str, str]]:
    """(interface, IPv4 address) of the node, in interface order; ``lo`` left out."""
    return [(name, ip) for name, ip in rt.host.addresses() if ":" not in ip]


def local_addresses(rt: Runtime) -> list[tuple[str, str]]:
    """(interface, address) of the node as ``getifaddrs`` lists them for liblnetconfig's
    ip2nets matching: every IPv4 address in interface order, then every IPv6 one (the
    kernel's address dump goes family by family); ``lo`` left out."""
    return rt.host.addresses()


def up_interfaces(rt: Runtime) -> list[tuple[str, str]]:
    """``lnet_inet_enumerate``: (interface, IPv4) of the interfaces that are UP, in order (a
    simulated node: those whose link the testbed has not set down)."""
    return [(name, ip) for name, ip in local_interfaces(rt) if rt.host.interface_up(name)]


def interface_of(rt: Runtime, nid: NID) -> str:
    """The interface holding ``nid``'s address (``net add --nid``).

    Raises:
        LNetConfigError: -ENOENT, no interface has that address.
    """
    addr = str(nid).split("@", 1)[0]
    for name, ip in local_interfaces(rt) if not nid.is_large else local_addresses(rt):
        if ip == addr or (nid.is_large and ":" in ip and NID.parse(f"{ip}@{nid.net}") == nid):
            return name
    raise LNetConfigError(-ENOENT, f"cannot add network: no interface has address {addr}")


def set_ni_lnd_tunables(rt: Runtime, nid: NID, conns_per_peer: int, tos: int) -> None:
    """The ``lnd tunables`` a ``net add``/``net set`` gave (-1: keep). ToS needs an engine
    field that does not exist yet (gap E6): refused rather than shown wrongly."""
    eng: LNetEngine = rt.engine
    ni = eng.ni_by_nid(nid)
    if ni is None:
        raise LNetConfigError(-ENOENT, f"no local NI {nid}")
    if tos != -1 and not hasattr(ni, "tos"):
        raise LNetConfigError(-EOPNOTSUPP, "setting the ToS of an NI is not supported yet")
    if tos != -1:
        ni.tos = tos  # type: ignore[attr-defined]
    if conns_per_peer >= 0:
        ni.conns_per_peer = conns_per_peer
        rt.set_conns_per_peer(nid, conns_per_peer)  # the LND's (ksocknal_tunables_setup)


def set_o2ib_tunables(rt: Runtime, nid: NID, given: tuple[str, ...]) -> None:
    """An o2ib NI's tunables after ``net add`` (``kiblnd_tunables_setup``): the net's
    ``peer_credits``/``credits``, its ``conns_per_peer`` and the ``lnd tunables`` given
    (``key=value``), clamped; kept on the NI for ``net show -v`` and handed to the daemon's
    o2iblnd (connections made from then on; the simulator's reads them from the NI)."""
    ni = rt.engine.ni_by_nid(nid)
    if ni is None or nid.net.lnd != O2IBLND:
        return  # o2iblnd's keys on another net: lnetctl ignores them
    lnd: dict[str, int] = {"conns_per_peer": ni.conns_per_peer}
    for item in given:
        key, _, value = item.partition("=")
        try:
            lnd[key] = int(value)
        except ValueError:
            raise LNetConfigError(-EINVAL, f"lnd tunables: {key}: not a number: "
                                           f"{value!r}") from None
    t = ni.net.tunables
    try:
        tun = O2ibTunables.for_ni(t.peer_credits, t.credits, lnd)
    except TunableError as e:
        raise LNetConfigError(-EINVAL, f"cannot add network: {e}") from None
    ni.lnd_o2ib, ni.conns_per_peer = tun.lnetctl(), tun.conns_per_peer
    t.peer_credits = tun.peer_credits  # written back, as into lct_peer_tx_credits
    rt.set_o2ib_tunables(nid, tun)


def tos_supported() -> bool:
    """Whether the engine's NI keeps a ToS (checked before an NI is added)."""
    return "tos" in LNetNI.__dataclass_fields__


def set_peer_buffer_credits(eng: LNetEngine, nid: NID, value: int) -> None:
    ni = eng.ni_by_nid(nid)
    if ni is not None and value > 0:
        ni.net.tunables.peer_buffer_credits = value


def peer_set_state(eng: LNetEngine, nid: NID, state: int) -> None:
    """IOC_LIBCFS_SET_PEER / ``lnet_genl_parse_peer``: the peer of ``nid``'s peer NI gets
    ``state`` as its state bits.

    Raises:
        LNetConfigError: -ENOENT, no peer NI ``nid``.
    """
    eng.peer_set_state(nid, state)  # the engine's one writer of lp_state (lpstate.fire)
