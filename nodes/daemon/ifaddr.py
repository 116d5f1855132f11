"""Interface name -> IPv4 and IPv6 addresses, as socklnd and liblnetconfig learn them.

``SIOCGIFADDR`` on a datagram socket: no subprocess, works in the daemon's own namespace.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

from nodes.lnet.errors import EINVAL, LNetConfigError

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


def interface_ipv6(ifname: str) -> list[str]:
    """The IPv6 addresses of ``ifname`` in this network namespace (``/proc/net/if_inet6``:
    address, index, prefix length, scope, flags, name per line), in the kernel's order."""
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:  # IPv6 disabled in this kernel
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and fields[5] == ifname and len(fields[0]) == 32:
            out.append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    return out


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


def inet_select(ifname: str, ipv4: str | None, ipv6: list[str], large: bool) -> str:
    """``lnet_inet_select`` over ``lnet_inet_enumerate``'s list for one interface: its IPv4
    address, else (LNet configured ``--large`` only) its first IPv6 address that is not
    link-local; the NI's NID is made of it (socklnd.c ``ksocknal_startup``).

    Raises:
        LNetConfigError: -EINVAL, naming the interface (and ``--large`` when only IPv6 is
            there).
    """
    if ipv4 is not None:
        return ipv4
    usable = [ip for ip in ipv6 if not ipaddress.IPv6Address(ip).is_link_local]
    if usable and large:
        return usable[0]
    hint = " (its IPv6 address needs `lnetctl lnet configure --large`)" if usable else ""
    raise LNetConfigError(-EINVAL, f"cannot add network: interface {ifname} has no IPv4 "
                                   f"address{hint}")
