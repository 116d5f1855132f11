"""The socklnd's tables as lctl lists them: ``IOC_LIBCFS_GET_CONN`` (``lctl --net NET
conn_list``), ``IOC_LIBCFS_GET_PEER`` (``peer_list``) and ``IOC_LIBCFS_GET_INTERFACE``
(``interface_list``).

Theory of operation (lnet/klnds/socklnd/socklnd.c ``ksocknal_ctl`` IOC_LIBCFS_GET_CONN,
``ksocknal_get_conn_by_idx``, socklnd_lib.c ``ksocknal_lib_get_conn_tunables``): LNet hands
the ioctl to the first NI of the net (api-ni.c ``LNetCtl`` -> ``lnet_net2ni_addref``); the
socklnd walks its peers of that NI and, per peer, its connections newest first (``list_add``
in ``ksocknal_create_conn``), one connection per index. Each is described by the peer's NID
and pid, its type, its scheduler's CPT, both addresses, the peer's port, the socket's send and
receive buffer sizes (``sk_sndbuf``/``sk_rcvbuf``, what SO_SNDBUF/SO_RCVBUF read) and
whether Nagle is on. Read from the sockets at the time of the call; a connection whose socket
is already closed is left out. Nothing here is on a send or receive path.

``IOC_LIBCFS_GET_PEER`` (``ksocknal_get_peer_info``): the NI's peers, one per index. A peer
with a ``conn_cb`` (this side connects to it) shows the source address the NI uses, the
peer's address and acceptor port, share count 1 and ``ksnr_conn_count``: its connections
whose remote address is the ``conn_cb``'s, accepted ones included
(``ksocknal_associate_cb_conn_locked``); a peer made by an accept has no ``conn_cb``: zeros
(listed while it has a connection: its last one unlinks it). ``IOC_LIBCFS_GET_INTERFACE``:
the NI's one interface (index 0 only), its address and netmask, ``ksni_npeers`` (counted by
no code of today's ksocklnd: 0) and ``ksni_nroutes``, its peers with a ``conn_cb``.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from nodes.lnd.conntable import ConnTable
from nodes.lnet.hdr import LNET_PID_LUSTRE
from nodes.lnet.nid import NID


@dataclass(frozen=True, slots=True)
class ConnInfo:
    """One ``IOC_LIBCFS_GET_CONN`` answer."""

    peer_nid: NID
    peer_pid: int
    ctype: int
    cpt: int
    local_ip: str
    peer_ip: str
    peer_port: int
    txmem: int
    rxmem: int
    nagle: bool


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """One ``IOC_LIBCFS_GET_PEER`` answer (``ksocknal_get_peer_info``)."""

    peer_nid: NID
    peer_pid: int
    share_count: int
    my_ip: str
    peer_ip: str
    port: int
    conn_count: int


@dataclass(frozen=True, slots=True)
class IfaceInfo:
    """The ``IOC_LIBCFS_GET_INTERFACE`` answer of one NI (``ksnn_interface``)."""

    ip: str
    netmask: str
    npeers: int
    nroutes: int


def peer_info(nid: NID, conn_cb: bool, my_ip: str, port: int, conn_count: int) -> PeerInfo:
    """A peer as ``ksocknal_get_peer_info`` describes it (zeros without a ``conn_cb``)."""
    if not conn_cb:
        return PeerInfo(nid, LNET_PID_LUSTRE, 0, "0.0.0.0", "0.0.0.0", 0, 0)
    return PeerInfo(nid, LNET_PID_LUSTRE, 1, my_ip, nid.ip, port, conn_count)


def _describe(sock: socket.socket, peer_nid: NID, ctype: int) -> ConnInfo | None:
    try:
        local_ip = sock.getsockname()[0]
        peer_ip, peer_port = sock.getpeername()[:2]
        txmem = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        rxmem = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    except OSError:
        return None
    # cpt 0: lctl's front end computes the scheduler's (lnet_cpt_of_nid, the NI's CPTs);
    # ksnp_id.pid is LNET_PID_LUSTRE for every peer this socklnd talks to (the emulated
    # nodes run no user-space LNet)
    return ConnInfo(peer_nid, LNET_PID_LUSTRE, ctype, 0, local_ip, peer_ip, peer_port, txmem,
                    rxmem, not nodelay)


def connections(table: ConnTable, ni: NID) -> list[ConnInfo]:
    """``ksocknal_get_conn_by_idx`` for index 0, 1, ...: ``ni``'s connections."""
    out: list[ConnInfo] = []
    for p in list(table.peers.values()):
        if p.ni != ni:
            continue
        for c in reversed(p.conns):
            sock = getattr(c.io, "sock", None)
            if c.closed or sock is None:
                continue
            info = _describe(sock, p.nid, c.ctype)
            if info is not None:
                out.append(info)
    return out


def peers(table: ConnTable, ni: NID, my_ip: str, port: int) -> list[PeerInfo]:
    """``ksocknal_get_peer_info`` for index 0, 1, ...: ``ni``'s peers (``port``: the
    acceptor's, where a ``conn_cb`` connects)."""
    out: list[PeerInfo] = []
    for p in list(table.peers.values()):
        live = [c for c in p.conns if not c.closed]
        if p.ni != ni or not (p.conn_cb or live):
            continue
        out.append(peer_info(p.nid, p.conn_cb, my_ip, port,
                             sum(1 for c in live if c.peer_ip == p.nid.ip)))
    return out


def interface(table: ConnTable, ni: NID, ip: str, netmask: str) -> IfaceInfo:
    """``ni``'s ``ksnn_interface``: ``ksni_nroutes`` is its peers with a ``conn_cb``."""
    return IfaceInfo(ip, netmask, 0, sum(1 for p in list(table.peers.values())
                                         if p.ni == ni and p.conn_cb))


__all__ = ["ConnInfo", "IfaceInfo", "PeerInfo", "connections", "interface", "peer_info",
           "peers"]
