"""The socklnd's tables of a simulated node, as ``lctl conn_list|peer_list|interface_list``
print them on a Mininet node (``nodes/lnd/connlist.py`` describes the real ones).

Theory of operation: the fabric keeps one "connection" per (node, NI, peer NI) pair
(``connected``; ``passive`` at the accepting end) and, per pair a node connected itself, when
it did (``conn_cbs``: ``ksnp_conn_cb``, made by ``ksocknal_launch_packet`` for a peer it had
not). That is all the state there is; the sockets are what ksocklnd makes of it on Linux, as
measured on Mininet (``tests/lutf/suite_dlc/test_lctl_socklnd.py`` holds both to it):

* the connecting side makes, in ``ksocknal_connect``'s order, one CONTROL then BULK_IN and
  BULK_OUT in turn up to its NI's ``conns_per_peer`` of each (``ConnTable.wanted_type``); the
  accepting side holds the same connections, each of the inverted type. Listed per peer,
  newest first (``ksocknal_get_conn_by_idx``);
* CONTROL goes to the acceptor port (988), the others to ``accept_port_bulk`` when the
  connecting node has one; ``lnet_connect`` binds source ports from 1023 down, the first whose
  (local, peer address, peer port) is free, in the order the connections were made: counted
  over the node's pairs still connected, oldest first (a closed connection's port is free at
  once: no TIME_WAIT here);
* buffer sizes are what a fresh connection reads on Linux at MTU 1500 (``SO_SNDBUF``:
  ``tcp_sndbuf_expand``'s 2 x 10 segments of 3456 bytes; ``SO_RCVBUF``: ``tcp_rmem[1]``); the
  socklnd leaves Nagle off (``nonagle``); one scheduler CPT, 0 (docs/differences.md);
* a peer with a ``conn_cb`` stays listed after its connections close, as ksocklnd's does;
  one without is listed while a connection to it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnd.connlist import ConnInfo, IfaceInfo, PeerInfo, peer_info
from nodes.lnd.wire import (
    LNET_ACCEPTOR_MAX_RESERVED_PORT,
    LNET_ACCEPTOR_PORT,
    SOCKLND_CONN_BULK_IN,
    SOCKLND_CONN_BULK_OUT,
    SOCKLND_CONN_CONTROL,
)
from nodes.lnet.hdr import LNET_PID_LUSTRE
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from testbed.sim.runtime import SimRuntime

Pair = tuple[str, NID, NID]
#: a fresh Linux TCP connection's SO_SNDBUF / SO_RCVBUF at MTU 1500 (measured on Mininet)
TXMEM, RXMEM = 69120, 131072
INVERT = {SOCKLND_CONN_CONTROL: SOCKLND_CONN_CONTROL, SOCKLND_CONN_BULK_IN:
           SOCKLND_CONN_BULK_OUT, SOCKLND_CONN_BULK_OUT: SOCKLND_CONN_BULK_IN}


def conn_types(cpp: int, to_self: bool = False) -> list[int]:
    """The types ``ksocknal_connect`` makes, in order: CONTROL, then BULK_IN/BULK_OUT. To
    its own NID a node also accepts each one, whose inverted twin counts towards the
    ``conn_cb`` (same address): CONTROL then ``cpp`` BULK_IN complete every type."""
    if to_self:
        return [SOCKLND_CONN_CONTROL] + [SOCKLND_CONN_BULK_IN] * max(1, cpp)
    out = [SOCKLND_CONN_CONTROL]
    for _ in range(max(1, cpp)):
        out += [SOCKLND_CONN_BULK_IN, SOCKLND_CONN_BULK_OUT]
    return out


class SimSockTables:
    """``IOC_LIBCFS_GET_CONN|GET_PEER|GET_INTERFACE`` of one simulated node."""

    def __init__(self, rt: SimRuntime) -> None:
        self.rt = rt
        self.fabric = rt.sim.fabric

    def _bulk_port(self, node: str) -> int:
        rt = self.rt.sim.runtimes.get(node)
        port = None if rt is None else rt.timeouts.lnd_params.accept_port_bulk
        return port or LNET_ACCEPTOR_PORT

    def _sockets(self, pair: Pair) -> list[tuple[int, int, int]]:
        """(type, source port, peer port) of a connected pair's connections, oldest first."""
        node, ni, lpni = pair
        ports: dict[int, int] = {}  # peer port -> next source port
        bulk = self._bulk_port(node)
        mine: list[tuple[int, int, int]] = []
        pairs = sorted((k for k in self.fabric.conn_cbs if k[0] == node and
                        k[1].ip == ni.ip and k[2].ip == lpni.ip and k in self.fabric.connected),
                       key=self.fabric.conn_cbs.__getitem__)
        for key in pairs:
            for ctype in conn_types(self.fabric.conns_per_peer(node, key[1]), key[1] == key[2]):
                dport = LNET_ACCEPTOR_PORT if ctype == SOCKLND_CONN_CONTROL else bulk
                sport = ports.get(dport, LNET_ACCEPTOR_MAX_RESERVED_PORT)
                ports[dport] = sport - 1
                if key == pair:
                    mine.append((ctype, sport, dport))
        return mine

    def connections(self, ni: NID) -> list[ConnInfo]:
        """``ni``'s connections, per peer pair (oldest pair first), newest first."""
        out: list[ConnInfo] = []
        for active, pair in self._pairs(ni):
            socks = self._sockets(pair)
            conns = ([(t, dport) for t, _, dport in socks] if active else
                     [(INVERT[t], sport) for t, sport, _ in socks])
            peer = pair[2] if active else pair[1]
            out += [ConnInfo(peer, LNET_PID_LUSTRE, t, 0, ni.ip, peer.ip, port, TXMEM, RXMEM,
                             False) for t, port in reversed(conns)]
        return out

    def _pairs(self, ni: NID) -> list[tuple[bool, Pair]]:
        """(made here, the connecting side's pair) of ``ni``'s live connections, by age."""
        fab, name = self.fabric, self.rt.name
        found: list[tuple[int, bool, Pair]] = []
        for key, seq in fab.conn_cbs.items():
            if key not in fab.connected:
                continue
            if key[0] == name and key[1] == ni:
                found.append((seq, True, key))
            if key[2] == ni and (name, ni, key[1]) in fab.passive:  # (to itself: both ends)
                found.append((seq, False, key))
        return [(active, key) for _, active, key in sorted(found, key=lambda x: x[0])]

    def peers(self, ni: NID) -> list[PeerInfo]:
        """``ni``'s peers: those it connected to (kept), then those connected to it."""
        fab, name = self.fabric, self.rt.name
        out: list[PeerInfo] = []
        made = sorted(((seq, k) for k, seq in fab.conn_cbs.items() if k[:2] == (name, ni)),
                      key=lambda x: x[0])
        conns = self.connections(ni)
        for _, key in made:  # ksnr_conn_count: every connection with the peer's address
            n = sum(1 for c in conns if c.peer_nid == key[2])
            out.append(peer_info(key[2], True, ni.ip, LNET_ACCEPTOR_PORT, n))
        mine = {k[2] for _, k in made}
        for active, key in self._pairs(ni):
            if not active and key[1] not in mine and key[1] != ni:
                mine.add(key[1])
                out.append(peer_info(key[1], False, ni.ip, 0, 0))
        return out

    def interface(self, ni: NID) -> IfaceInfo | None:
        """``ni``'s interface: its address and netmask from the plan, the peers it connects."""
        iface = next((i for i in self.rt.plan.interfaces if str(i.ip) == ni.ip), None)
        if iface is None:
            return None
        mask = str(iface.ip.__class__((0xFFFFFFFF << (32 - iface.prefixlen)) & 0xFFFFFFFF))
        nroutes = sum(1 for k in self.fabric.conn_cbs if k[:2] == (self.rt.name, ni))
        return IfaceInfo(ni.ip, mask, 0, nroutes)


__all__ = ["INVERT", "RXMEM", "TXMEM", "SimSockTables", "conn_types"]
