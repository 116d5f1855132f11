"""Link-state watcher: what ksocklnd's netdev notifier does (hlt-005/010/025).

Theory of operation: real ksocklnd registers a netdev notifier; on NETDEV_UP/DOWN/CHANGE it
calls ``ksocknal_handle_link_state_change`` (LU-14541), which sets the NI's fatal state with
``lnet_set_link_fatal_state(ni, link_down)`` where link down means operstate neither UP nor
UNKNOWN. Here the daemon listens to the kernel's link notifications (an rtnetlink socket
joined to ``RTMGRP_LINK``) *in its own network namespace* and, on any, reads each NI's
interface flags with the ``SIOCGIFFLAGS`` ioctl (``/sys/class/net`` would show the root
namespace): the carrier is up when both ``IFF_UP`` and ``IFF_RUNNING`` are set (``IFF_RUNNING``
is the kernel's ``netif_oper_up``: operstate UP or UNKNOWN). So a link goes down for LNet when
the kernel says so, as with the notifier, and sends of that instant no longer pick the NI. A
poll every ``interval`` (0.5 s) backs the notifications up (a notification lost to a full
socket buffer; no netlink socket at all). On a change it calls
``on_change(nid, link_up)``; the runtime then sets the engine's fatal state and, on carrier
loss, has the socklnd close the NI's connections (seed 000 snd-080/085).

An interface that disappeared (ioctl fails with ENODEV) counts as carrier down.

Simulated link events (hlth-dbg-sim-ni-down / hlth-dbg-sim-ni-up, testbed-only
``lctl net_ni_down|net_ni_up NID``): ``simulate(nid, up)`` overrides the NI's link state
without touching the Linux interface and reports the change through the same ``on_change``
path a carrier change takes, at once. The override holds until the real carrier of that
interface changes (a real event supersedes the simulation) or the NI is deleted.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable

from nodes.lnet.nid import NID

log = logging.getLogger("lnet.linkwatch")

#: linux/sockios.h
SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
#: linux/if.h
IFF_UP = 0x1
IFF_RUNNING = 0x40
POLL_INTERVAL = 0.5
#: linux/rtnetlink.h: the multicast group of link (RTM_NEWLINK/RTM_DELLINK) notifications
RTMGRP_LINK = 0x1
#: notifications read per wakeup at most (one ``ip link set`` sends a few)
NETLINK_DRAIN = 64


def _ifreq(ifname: str) -> bytes:
    return struct.pack("16s16x", ifname.encode())


def carrier_up(ifname: str) -> bool:
    """IFF_UP and IFF_RUNNING of ``ifname`` in this namespace; False if it does not exist."""
    if not ifname or len(ifname) > 15:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            res = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, _ifreq(ifname))
        except OSError:
            return False
    flags = struct.unpack_from("H", res, 16)[0]
    return bool(flags & IFF_UP) and bool(flags & IFF_RUNNING)


def interface_subnet(ifname: str) -> ipaddress.IPv4Network | None:
    """The IPv4 subnet on ``ifname`` (address and netmask), or None without one."""
    if not ifname or len(ifname) > 15:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            addr = fcntl.ioctl(s.fileno(), SIOCGIFADDR, _ifreq(ifname))[20:24]
            mask = fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, _ifreq(ifname))[20:24]
        except OSError:
            return None
    return ipaddress.ip_network(f"{socket.inet_ntoa(addr)}/{socket.inet_ntoa(mask)}",
                                strict=False)


class LinkWatch:
    """Polls the interfaces of the NIs ``nis()`` returns (nid -> interface name)."""

    def __init__(self, *, nis: Callable[[], dict[NID, str]],
                 on_change: Callable[[NID, bool], None],
                 on_simulated: Callable[[NID, bool], None] | None = None,
                 interval: float = POLL_INTERVAL) -> None:
        self._nis = nis
        self._on_change = on_change
        self._on_simulated = on_simulated or on_change  # simulated changes, if told apart
        self.interval = interval
        self.state: dict[NID, bool] = {}  # last state reported per NI (absent: assumed up)
        self.carrier: dict[NID, bool] = {}  # last real carrier seen per NI
        # simulated link state per NI, with the real carrier it was set against
        self.forced: dict[NID, tuple[bool, bool]] = {}

    def _effective(self, nid: NID, real: bool) -> bool:
        forced = self.forced.get(nid)
        if forced is not None and forced[1] != real:
            del self.forced[nid]  # the real carrier changed: it wins over the simulation
            forced = None
        return real if forced is None else forced[0]

    def simulate(self, nid: NID, up: bool) -> bool:
        """Report a link ``up``/``down`` event for ``nid`` as a carrier change would, without
        touching the interface (hlth-dbg-sim-ni-*). Returns whether the state changed.

        Raises:
            KeyError: ``nid`` is not a watched NI.
        """
        ifname = self._nis()[nid]
        real = self.carrier.get(nid)
        if real is None:
            real = self.carrier[nid] = carrier_up(ifname)
        self.forced[nid] = (up, real)
        if self.state.get(nid, True) == up:
            return False
        self.state[nid] = up
        self._report(nid, ifname, up, "simulated")
        return True

    def _report(self, nid: NID, ifname: str, up: bool, cause: str) -> None:
        log.warning("link %s of %s is %s (%s)", ifname, nid, "up" if up else "down", cause)
        try:
            (self._on_simulated if cause == "simulated" else self._on_change)(nid, up)
        except Exception:
            log.exception("link state handler for %s raised", nid)

    def poll(self) -> list[tuple[NID, bool]]:
        """One pass: report every NI whose carrier changed since the last pass."""
        changes: list[tuple[NID, bool]] = []
        current = self._nis()
        for table in (self.state, self.carrier, self.forced):
            for nid in [n for n in table if n not in current]:
                del table[nid]  # NI deleted
        for nid, ifname in current.items():
            real = carrier_up(ifname)
            self.carrier[nid] = real
            up = self._effective(nid, real)
            if self.state.get(nid, True) != up:
                changes.append((nid, up))
            self.state[nid] = up
        for nid, up in changes:
            self._report(nid, current[nid], up, "carrier")
        return changes

    def _on_netlink(self, sock: socket.socket) -> None:
        """Drain the notifications (their content is not needed: any link message means
        "read the flags again"; a bounded number per wakeup) and poll once."""
        for _ in range(NETLINK_DRAIN):
            try:
                if not sock.recv(65536):
                    break
            except BlockingIOError:
                break
            except OSError as e:  # ENOBUFS: notifications were lost; the poll covers them
                log.debug("rtnetlink: %s", e)
                break
        self.poll()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        sock = None
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                                 socket.NETLINK_ROUTE)
            sock.bind((0, RTMGRP_LINK))
            loop.add_reader(sock.fileno(), self._on_netlink, sock)
        except OSError as e:
            log.warning("no rtnetlink link notifications (%s): polling every %.1f s", e,
                        self.interval)
            if sock is not None:
                sock.close()
            sock = None
        try:
            while True:
                await asyncio.sleep(self.interval)
                self.poll()
        finally:
            if sock is not None:
                loop.remove_reader(sock.fileno())
                sock.close()
