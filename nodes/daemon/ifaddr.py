"""Interface name -> IPv4 address, as socklnd learns an NI's address from its interface.

``SIOCGIFADDR`` on a datagram socket: no subprocess, works in the daemon's own namespace.
"""

from __future__ import annotations

import fcntl
import socket
import struct

SIOCGIFADDR = 0x8915
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1


def interface_ipv4(ifname: str) -> str | None:
    """The first IPv4 address of ``ifname`` in this network namespace, or None."""
    if not ifname or len(ifname) > 15:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            req = struct.pack("16s16x", ifname.encode())
            res = fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)
        except OSError:
            return None
    return socket.inet_ntoa(res[20:24])


def interface_up(ifname: str) -> bool:
    """``IFF_UP`` of ``ifname`` in this network namespace (``SIOCGIFFLAGS``); False if absent."""
    if not ifname or len(ifname) > 15:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            res = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16s16x", ifname.encode()))
        except OSError:
            return False
    return bool(struct.unpack_from("H", res, 16)[0] & IFF_UP)
