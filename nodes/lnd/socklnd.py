"""socklnd: the asyncio driver of one node's LND (aioquic ``asyncio/protocol.py`` style).

Theory of operation: the machines are sans-I/O — ``framing.py`` (one connection's handshake
and frames, receiving into given buffers), ``wire.py`` (the codec), ``sendq.py`` (what a
connection has to write), ``conntable.py`` (peers, typed connections, choice, races, limits,
timeouts) and ``errmap.py`` (every failure's rc and hstatus, with the audit table against
ksocklnd). Sockets live in ``handshake.py`` (``lnet_connect``, the acceptor, both handshakes)
and ``connio.py`` (established connections). This module ties them together and is the API
the node runtime uses: start/stop NIs, ``send``, timeouts, link and peer events.

Connections are ksocklnd's: typed (one CONTROL, ``conns_per_peer`` BULK_IN and BULK_OUT per
peer NI; ``typed_conns=False`` gives ``conns_per_peer`` SOCKLND_CONN_ANY), made on demand by
``send`` (``ksocknal_launch_packet`` → ``ksocknal_connect``, one connector per peer making
the missing types in turn), or accepted from the peer — which then carry our sends too. A
connect races a connect from the peer: the higher NID's wins (``conntable.Verdict``); the
refused side sees EALREADY and waits (backoff 50 ms doubling to 1 s). A peer whose
incarnation changed (it rebooted) has its old connections closed as stale. An error on one
connection closes it and its siblings (``ksocknal_close_conn_and_siblings``); a clean EOF
only that one. Every ``send`` ends in exactly one ``on_tx_done(tx_id, rc, hstatus)``.

Timeouts, once a tick (``ksocknal_check_peer_timeouts``): a tx that waited the NI's timeout
for a connection fails; a connection whose send queue made no progress for the timeout, or
that holds a frame begun and not continued for the timeout ("Timeout receiving from"), is
closed with its siblings and the peer NI reported dead. TCP gives up too
(hlth-lnd-remote-timeout): every socket carries ``TCP_USER_TIMEOUT`` = the NI's timeout + two
ticks, and while the kernel retransmits, the send check leaves the connection to it.

Peer NI aliveness goes up through ``on_notify(ni, peer_nid, alive, reset)`` (``lnet_notify``,
seed 002 rtr-mr-lnd-notify): dead when a connect failed or connections closed on an error
and none (nor a connector) remains (``ksocknal_peer_failed``); alive when the first
connection to it is established, with ``reset`` when its incarnation is not the last one seen.
``notify_peer_down`` is LNet's ``lnd_notify_peer_down`` (``ksocknal_notify_gw_down``).
"""

from __future__ import annotations

import asyncio
import errno as E
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nodes.lnd import connlist, handshake, wire
from nodes.lnd.connector import Connector
from nodes.lnd.connlist import ConnInfo
from nodes.lnd.conntable import ConnTable
from nodes.lnd.errmap import FAILURES
from nodes.lnd.errmap import txlist_hstatus as txlist_hstatus  # re-exported (tests)
from nodes.lnd.framing import Payload
from nodes.lnd.lifecycle import RX_TIMEOUT, Lifecycle, RxMsg
from nodes.lnd.ratelimit import RateLimitedLog
from nodes.lnd.sendq import Tx
from nodes.lnet.hdr import LNET_MTU, LNET_PID_LUSTRE, LNetHdr
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID

_log = logging.getLogger("lnet.socklnd")
#: ksocklnd's ``typed_conns`` module parameter for a daemon: ``KSOCKLND_TYPED_CONNS=0`` gives
#: one SOCKLND_CONN_ANY connection per peer NI (benchmarks/throughput.py ``--untyped``).
TYPED_CONNS_ENV = "KSOCKLND_TYPED_CONNS"


@dataclass(eq=False, slots=True)
class _NetIf:
    ni: NID
    ip: str
    timeout: float | None = None  # None: the LND-wide default
    link_down: bool = False
    netmask: str = "0.0.0.0"  # the interface's (ksni_netmask), as the runtime learnt it


class SockLND:
    """The socklnd of one node: NIs, their acceptors, and connections to peer NIs."""

    def __init__(self, *, on_rx: Callable[[RxMsg], None],
                 on_tx_done: Callable[[int, int, HStatus], None],
                 on_conn: Callable[[str, NID, NID, str], None] | None = None,
                 on_notify: Callable[[NID, NID, bool, bool], None] | None = None,
                 on_batch: Callable[[bool], None] | None = None,
                 incarnation: int, pid: int = LNET_PID_LUSTRE, timeout: float = 50.0,
                 port: int = wire.LNET_ACCEPTOR_PORT, typed_conns: bool | None = None) -> None:
        self._timeout = timeout
        self.port = port
        self._nis: dict[NID, _NetIf] = {}
        if typed_conns is None:  # the ksocklnd module parameter (default 1)
            typed_conns = os.environ.get(TYPED_CONNS_ENV, "1") != "0"
        self._table = ConnTable(typed=typed_conns)
        self._peers = self._table.peers
        self._acceptor = handshake.Acceptor(port, self._passive, self._spawn)
        self._tasks: set[asyncio.Task[None]] = set()
        self._monitor: asyncio.Task[None] | None = None
        self.refusals = RateLimitedLog(_log)
        self._life = life = Lifecycle(
            self._table, on_rx=on_rx, on_tx_done=on_tx_done, on_conn=on_conn,
            on_notify=on_notify, on_batch=on_batch, timeout_of=self.timeout_of,
            refusals=self.refusals,
            live=lambda p: p.ni in self._nis and self._peers.get((p.ni, p.nid)) is p)
        self._connector = Connector(
            self._table, port=port, pid=pid, incarnation=incarnation, ni_ip=self._ni_ip,
            timeout_of=self.timeout_of, establish=life.establish,
            close_stale=life.close_stale, connect_failed=life.connect_failed,
            refusals=self.refusals)

    # --- public API ---------------------------------------------------------------------
    async def startup_ni(self, ni: NID, ip: str, timeout: float | None = None,
                         conns_per_peer: int | None = None, netmask: str | None = None) -> None:
        """Start ``ni`` on ``ip`` (its acceptor shared with the address's other NIs); its
        LND timeout (None: the LND-wide one), ``conns_per_peer`` (None: 1) and the
        interface's ``netmask`` (``lctl interface_list``). Raises OSError if it cannot bind."""
        if ni in self._nis:
            raise OSError(E.EEXIST, f"NI {ni} already started")
        self._acceptor.add(ni, ip)
        self._nis[ni] = _NetIf(ni, ip, timeout=timeout, netmask=netmask or "0.0.0.0")
        self._table.conns_per_peer[ni] = max(1, conns_per_peer or 1)
        if self._monitor is None:
            self._monitor = self._spawn(self._monitor_loop())

    async def shutdown_ni(self, ni: NID) -> None:
        """Close every connection of ``ni`` (and its acceptor with the address's last NI);
        its pending txs are aborted."""
        netif = self._nis.pop(ni, None)
        if netif is None:
            return
        self._acceptor.remove(ni, netif.ip)
        waits: list[asyncio.Task[None]] = []
        for key, p in list(self._peers.items()):
            if p.ni == ni:
                if p.connector is not None:
                    p.connector.cancel()
                    waits.append(p.connector)
                self._life.close(p, p.conns, "NI shutdown", FAILURES["ni_shutdown"], None,
                                 False)
                self._life.fail(self._table.drain(p), FAILURES["ni_shutdown"])
                del self._peers[key]
        await asyncio.gather(*waits, return_exceptions=True)

    def send(self, tx_id: int, ni: NID, peer: NID, hdr: LNetHdr, payload: Payload) -> None:
        """Queue one LNET message from ``ni`` to ``peer``; completes via ``on_tx_done``."""
        netif = self._nis.get(ni)
        bad = ("ni_not_started" if netif is None else "link_down" if netif.link_down else
               "bad_payload" if len(payload) != hdr.payload_length or len(payload) > LNET_MTU
               else None)
        if bad is not None:  # link down: lnet_connect's bind to the device fails at once
            asyncio.get_running_loop().call_soon(self._life.call_tx_done, tx_id, *FAILURES[bad])
            return
        p = self._peers.get((ni, peer)) or self._table.peer(ni, peer)
        if not p.conn_cb and not p.conns:  # (an accepted peer's last conn unlinked it)
            p.conn_cb = True  # ksocknal_launch_packet: ksocknal_add_peer, a conn_cb
        tx = Tx(tx_id, hdr, payload)
        if p.conns:
            c = self._table.choose(p, len(payload))
            if p.connector is None and self._table.wants_connector(p, self._now):
                p.connector = self._spawn(self._connector.run(p))
            if c is not None:
                self._life.queue(c, tx)
                return
        tx.deadline = self._now() + self.timeout_of(ni)
        p.queue.append(tx)
        if p.connector is None:
            p.connector = self._spawn(self._connector.run(p))

    def hold(self) -> None:
        """Txs sent from now until ``release`` are written by it, in this loop turn (the
        caller knows where its batch ends: a timer's engine call), not a turn later."""
        self._life.hold_writes()

    def release(self) -> None:
        self._life.release_writes()

    def set_timeout(self, seconds: float, ni: NID | None = None) -> None:
        """The LND timeout (connect, stale tx, send/receive progress): LND-wide, or of one NI
        (``lnetctl net set --net N --lnd-timeout S``; seed 003 hlth-lnd-tx-timeout-from-lnet)."""
        if ni is None:
            self._timeout = seconds
        elif ni in self._nis:
            self._nis[ni].timeout = seconds
        for p in self._peers.values():
            if ni is None or p.ni == ni:
                for c in p.conns:
                    self._life.set_user_timeout(c)

    def set_conns_per_peer(self, ni: NID, n: int) -> None:
        """``lnetctl net set --conns-per-peer``: applies to connections made from now on."""
        self._table.conns_per_peer[ni] = max(1, n)

    def set_bulk_port(self, port: int) -> None:
        """lnet's ``accept_port_bulk`` (nodes/lnd/modparams.py): listeners opened from now on
        also listen on ``port``, and every connection but CONTROL is made to it."""
        self._acceptor.bulk_port = self._connector.bulk_port = port

    def connections(self, ni: NID) -> list[ConnInfo]:
        """``IOC_LIBCFS_GET_CONN``: ``ni``'s connections (``lctl conn_list``)."""
        return connlist.connections(self._table, ni)

    def peers(self, ni: NID) -> list[connlist.PeerInfo]:
        """``IOC_LIBCFS_GET_PEER``: ``ni``'s peers (``lctl peer_list``)."""
        netif = self._nis.get(ni)
        return [] if netif is None else connlist.peers(self._table, ni, netif.ip, self.port)

    def interface(self, ni: NID) -> connlist.IfaceInfo | None:
        """``IOC_LIBCFS_GET_INTERFACE``: ``ni``'s interface (``lctl interface_list``)."""
        netif = self._nis.get(ni)
        return None if netif is None else connlist.interface(self._table, ni, netif.ip,
                                                              netif.netmask)

    def timeout_of(self, ni: NID) -> float:
        netif = self._nis.get(ni)
        return self._timeout if netif is None or netif.timeout is None else netif.timeout

    def link_down(self, ni: NID, subnet: ipaddress.IPv4Network | None = None) -> int:
        """Carrier loss on ``ni``'s interface (hlt-005/010, snd-080/085): closes the NI's
        connections and those whose peer is on ``subnet``; what they held fails with
        -ENETDOWN / REMOTE_DROPPED (``ksocknal_del_peer``), as do sends on ``ni`` until
        ``link_up``. Returns the number of connections closed."""
        netif = self._nis.get(ni)
        if netif is None:
            return 0
        netif.link_down = True
        closed = 0
        for p in list(self._peers.values()):
            if p.ni == ni or (subnet is not None and ipaddress.ip_address(p.nid.ip) in subnet):
                if p.connector is not None:
                    p.connector.cancel()
                    p.connector = None
                # ksocknal_del_peer closes them with error 0: no ksnp_error, so no
                # ksocknal_peer_failed and no lnet_notify (the peer NI's status is left to
                # the peer's push, peer.c handle_disc_lpni_health)
                closed += self._life.close(p, p.conns, "link down", FAILURES["link_down"],
                                           None, False)
                self._life.fail(self._table.drain(p), FAILURES["link_down"])
        return closed

    def link_up(self, ni: NID) -> None:
        """Carrier back on ``ni``'s interface: it connects again on demand."""
        if ni in self._nis:
            self._nis[ni].link_down = False

    def notify_peer_down(self, nid: NID) -> int:
        """``ksocknal_notify_gw_down``: LNet says peer NI ``nid`` is dead (seed 002
        rtr-mr-notify-dead); close every connection to it. Returns #conns closed."""
        closed = sum(self._life.close(p, p.conns, "LNet: peer NI dead",
                                      FAILURES["peer_down"], None, False)
                     for p in list(self._peers.values()) if p.nid == nid)
        _log.warning("socklnd: LNet notified peer NI %s dead: %d connection(s) closed", nid,
                     closed)
        return closed

    def stats(self) -> dict[str, Any]:
        """Connections by type, refused connections by reason, receive stalls timed out,
        and log lines the rate limit suppressed."""
        conns: dict[str, int] = {}
        for p in self._peers.values():
            for c in p.conns:
                conns[c.type_name] = conns.get(c.type_name, 0) + 1
        counts = dict(self.refusals.counts)
        stalls = counts.pop(RX_TIMEOUT, 0)
        return {"conns": conns, "refused": counts, "rx_timeouts": stalls,
                "log_suppressed": self.refusals.suppressed}

    async def close(self) -> None:
        """Shut every NI down and stop all tasks."""
        for ni in list(self._nis):
            await self.shutdown_ni(ni)
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._monitor = None

    # --- completion and callbacks ------------------------------------------------------
    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("socklnd task failed", exc_info=task.exception())

    # --- the NIs' addresses and accepted sockets ----------------------------------------
    def _ni_ip(self, ni: NID) -> str | None:
        netif = self._nis.get(ni)
        return None if netif is None else netif.ip

    async def _passive(self, ip: str, sock: socket.socket) -> None:
        """An accepted socket: within the tightest timeout of the address's NIs
        (``lnet_acceptor_timeout``, before the connreq names the NI)."""
        nis = self._acceptor.nis(ip)
        await self._connector.accept(
            ip, sock, limit=min((self.timeout_of(n) for n in nis), default=self._timeout),
            cpp=max((self._table.max_conns(n) for n in nis), default=1))

    # --- timeouts: ksocknal_check_peer_timeouts, once a tick ---------------------------
    async def _monitor_loop(self) -> None:
        while True:
            ticks = [self._timeout, *(n.timeout for n in self._nis.values() if n.timeout)]
            await asyncio.sleep(min(1.0, min(ticks) / 4))
            now = self._now()
            self._connector.pool.trim()  # an idle LND gives its bulk buffers back
            for p in list(self._peers.values()):
                self._life.fail(self._table.stale_txs(p, now), FAILURES["unposted_timeout"])
                for c in list(p.conns):
                    if not c.closed and self._life.timed_out(p, c, now):
                        break


__all__ = ["TYPED_CONNS_ENV", "RxMsg", "SockLND", "txlist_hstatus"]
