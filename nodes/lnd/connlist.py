"""The socklnd's connection listing: ``IOC_LIBCFS_GET_CONN`` (``lctl --net NET conn_list``).

Theory of operation (lnet/klnds/socklnd/socklnd.c ``ksocknal_ctl`` IOC_LIBCFS_GET_CONN,
``ksocknal_get_conn_by_idx``, socklnd_lib.c ``ksocknal_lib_get_conn_tunables``): LNet hands
the ioctl to the first NI of the net (api-ni.c ``LNetCtl`` -> ``lnet_net2ni_addref``); the
socklnd walks its peers of that NI and, per peer, its connections newest first (``list_add``
in ``ksocknal_create_conn``), one connection per index. Each is described by the peer's NID
and pid, its type, its scheduler's CPT, both addresses, the peer's port, the socket's send and
receive buffer sizes (``sk_sndbuf``/``sk_rcvbuf``, what SO_SNDBUF/SO_RCVBUF read) and
whether Nagle is on. Read from the sockets at the time of the call; a connection whose socket
is already closed is left out. Nothing here is on a send or receive path.
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


def _describe(sock: socket.socket, peer_nid: NID, ctype: int) -> ConnInfo | None:
    try:
        local_ip = sock.getsockname()[0]
        peer_ip, peer_port = sock.getpeername()[:2]
        txmem = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        rxmem = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    except OSError:
        return None
    # one CPT per node (docs/differences.md "CPTs"); ksnp_id.pid is LNET_PID_LUSTRE for
    # every peer this socklnd talks to (the emulated nodes run no user-space LNet)
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


__all__ = ["ConnInfo", "connections"]
