"""The LND's timeouts of one node, kept in step with what LNet decides: written once.

Theory of operation: ``ksocknal_timeout()`` = ``sock_timeout ?: lnet_get_lnd_timeout()``.
What LNet decides about the LND timeout (``lnd_timeout`` derived from transaction_timeout
and retry_count, or an NI's own ``--lnd-timeout``) is kept in step here for the node driver
(``nodes/driver.py`` ``NodeDriver.timeouts``, the daemon's and the simulator's): every NI
without its own timeout follows LNet's derived one, or the module's ``sock_timeout`` when
that is set; ``set_lnd_timeout`` (the runtime's callback) hands each change to the LND
(socklnd sock_timeout), and the engine's NI keeps it (its message deadline, spec §3.4).
"""

from __future__ import annotations

from collections.abc import Callable

from nodes.lnd.modparams import LndParams
from nodes.lnet.engine import LNetEngine
from nodes.lnet.nid import NID, Net


class LndTimeouts:
    """The per-NI LND timeouts of one engine (module docstring)."""

    def __init__(self, engine: LNetEngine,
                 set_lnd_timeout: Callable[[NID, float], None] | None = None) -> None:
        self.engine = engine
        self._set_lnd_timeout = set_lnd_timeout
        #: per-NI socklnd sock_timeout (``net set --lnd-timeout``); absent = the module's
        self.sock_timeout: dict[NID, int] = {}
        #: the socket side's module parameters (nodes/lnd/modparams.py): ksocklnd's
        #: ``sock_timeout`` (0: LNet's lnd_timeout), lnet's ``accept_port_bulk``
        self.lnd_params = LndParams()
        self._lnet_lnd_timeout = engine.tunables.lnd_timeout
        t = engine.tunables
        self._lnd_inputs = (t.transaction_timeout, t.retry_count)  # what lnd_timeout is of

    def sync(self) -> bool:
        """``ksocknal_timeout()`` = ``sock_timeout ?: lnet_get_lnd_timeout()``: an NI without
        its own ``--lnd-timeout`` follows LNet's ``lnd_timeout`` (max((tt-1)/(rc+1), 1)) as
        transaction_timeout and retry_count change (seed 003 hlth-lnd-tx-timeout-from-lnet;
        the socklnd's ``sock_timeout`` defaults to 0, docs/differences.md). Returns whether
        those two tunables moved since the last call."""
        t = self.engine.tunables
        inputs = (t.transaction_timeout, t.retry_count)
        if inputs == self._lnd_inputs:  # (after every batch: two reads, not the derivation)
            return False
        self._lnd_inputs = inputs
        derived = t.lnd_timeout
        if derived == self._lnet_lnd_timeout:
            return True
        self._lnet_lnd_timeout = derived
        if self.lnd_params.sock_timeout:
            return True  # every NI without its own timeout follows the module's
        for ni in self.engine.local_nis():
            if not ni.is_lo and ni.nid not in self.sock_timeout:
                ni.lnd_timeout = derived
                if self._set_lnd_timeout is not None:
                    self._set_lnd_timeout(ni.nid, float(derived))
        return True

    def ksock_timeout(self) -> int:
        """``ksocknal_timeout()``: the module's ``sock_timeout ?: lnet_get_lnd_timeout()``."""
        return self.lnd_params.sock_timeout or self.engine.tunables.lnd_timeout

    def set_module_sock_timeout(self, seconds: int) -> None:
        """ksocklnd's ``sock_timeout`` (module load, or its 0644 file later): every NI
        without its own ``--lnd-timeout`` takes ``ksocknal_timeout()`` at once."""
        self.lnd_params.sock_timeout = seconds
        for ni in self.engine.local_nis():
            if not ni.is_lo and ni.nid not in self.sock_timeout:
                ni.lnd_timeout = self.ksock_timeout()
                if self._set_lnd_timeout is not None:
                    self._set_lnd_timeout(ni.nid, float(ni.lnd_timeout))

    def ni_added(self, nid: NID) -> None:
        """A new NI starts with ``ksocknal_timeout()``."""
        self.sock_timeout.pop(nid, None)
        ni = self.engine.ni_by_nid(nid)
        if ni is not None:
            ni.lnd_timeout = self.ksock_timeout()

    def ni_removed(self, nid: NID) -> None:
        """An NI was deleted: its own timeout goes with it."""
        self.sock_timeout.pop(nid, None)

    def set_lnd_timeout(self, net: Net, seconds: int) -> int:
        """``lnetctl net set --net N --lnd-timeout S``: the LND timeout of every NI of ``net``
        (socklnd connect/stale/progress timeout, and the engine's message deadline, spec
        §3.4); 0 goes back to ``ksocknal_timeout()``. Returns how many NIs changed."""
        count = 0
        for ni in self.engine.local_nis():
            if ni.nid.net == net:
                if seconds:
                    self.sock_timeout[ni.nid] = seconds
                else:  # 0: back to the module's (ksocknal_timeout)
                    self.sock_timeout.pop(ni.nid, None)
                ni.lnd_timeout = seconds or self.ksock_timeout()
                if self._set_lnd_timeout is not None:
                    self._set_lnd_timeout(ni.nid, float(ni.lnd_timeout))
                count += 1
        return count
