"""``fail_loc``: libcfs's fault-injection switch, as LNet's code checks it (E11).

Theory of operation: one value per node (``lctl set_param fail_loc=V [fail_val=N]``,
``/sys/module/libcfs/parameters/fail_loc``); code asks ``check(ID)`` at the points real LNet
calls ``CFS_FAIL_CHECK(ID)`` (lnet/libcfs/fail.c ``__cfs_fail_check_set`` with
``CFS_FAIL_LOC_NOSET``). ``check`` is true when the location bits (``CFS_FAIL_MASK_LOC``) match
and the modifier allows it: ``CFS_FAIL_ONCE`` (0x80000000) fails once, then ``CFS_FAILED``
(0x40000000) is set and it stays quiet; ``CFS_FAIL_SKIP`` skips ``fail_val`` checks first;
``CFS_FAIL_SOME`` fails ``fail_val`` times (then behaves as ONCE|FAILED); ``CFS_FAIL_RAND``
fails one check in ``fail_val`` (the engine's seeded RNG). ``CFS_FAIL_USR1`` and ``CFS_FAULT``
are read by no LNet check (``CFS_FAIL_PRECHECK`` matches ``CFS_FAULT`` only for IDs carrying
it), so they change nothing. As in the kernel, ``cfs_fail_loc`` is an ``unsigned long`` and
``cfs_fail_val`` an ``unsigned int``; writing either leaves the one check counter
(``cfs_fail_count``) alone: only ``CFS_FAIL_SOME`` reaching ``fail_val`` and a check under
``ONCE|FAILED`` reset it (module.c ``proc_fail_loc`` does not).

The LNet locations the engine checks (include/linux/lnet/lib-lnet.h):
``DELAY_MSG_FORWARD`` 0xe002 (``lnet_parse`` skips RX delay rules), ``TEST_PING_MD`` 0xe003
(ping NID metadata, api-ni.c), ``RTR_HEALTH_INC`` 0xe004 (``lnet_health_check`` does not set a
router's peer NI to full health on receipt), ``SOCK_CONN`` 0xe020 (socklnd_cb.c
``ksocknal_process_transmit``: a simulated send error also closes the connection and its
siblings, so the LND reports the peer NI dead).
"""

from __future__ import annotations

import random
from typing import Final

CFS_FAIL_MASK_LOC: Final = 0x0000FFFF
CFS_FAILED: Final = 0x40000000
CFS_FAIL_ONCE: Final = 0x80000000
CFS_FAIL_SKIP: Final = 0x20000000
CFS_FAIL_SOME: Final = 0x10000000
CFS_FAIL_RAND: Final = 0x08000000
CFS_FAIL_USR1: Final = 0x04000000
CFS_FAULT: Final = 0x02000000

CFS_FAIL_DELAY_MSG_FORWARD: Final = 0xE002
CFS_FAIL_TEST_PING_MD: Final = 0xE003
CFS_FAIL_RTR_HEALTH_INC: Final = 0xE004
CFS_FAIL_SOCK_CONN: Final = 0xE020


class FailLoc:
    """``cfs_fail_loc`` / ``cfs_fail_val`` of one node and ``CFS_FAIL_CHECK``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.loc = 0
        self.val = 0
        self._count = 0

    def set(self, loc: int, val: int | None = None) -> None:
        """``lctl set_param fail_loc=LOC [fail_val=VAL]`` (``cfs_fail_loc`` is 64 bits)."""
        self.loc = loc % 2**64
        if val is not None:
            self.set_val(val)

    def set_val(self, val: int) -> None:
        """``lctl set_param fail_val=VAL``: ``cfs_fail_val`` is an ``unsigned int``."""
        self.val = val % 2**32

    def check(self, loc_id: int) -> bool:
        """``CFS_FAIL_CHECK(loc_id)``."""
        loc = self.loc
        if not loc or (loc & CFS_FAIL_MASK_LOC) != (loc_id & CFS_FAIL_MASK_LOC):
            return False
        if loc & (CFS_FAILED | CFS_FAIL_ONCE) == CFS_FAILED | CFS_FAIL_ONCE:
            self._count = 0
            return False
        if loc & CFS_FAIL_RAND and (self.val < 2 or self.rng.randrange(self.val) > 0):
            return False
        if loc & CFS_FAIL_SKIP:
            self._count += 1
            if self._count <= self.val:
                return False
        if loc & CFS_FAIL_SOME and (not loc & CFS_FAIL_ONCE or self.val <= 1):
            self._count += 1
            if self._count >= self.val:
                self.loc |= CFS_FAIL_ONCE
                over, self._count = self._count > self.val, 0
                if over:  # fail_val 0, or a count left by an earlier SKIP
                    return False
        failed_before = bool(self.loc & CFS_FAILED)
        self.loc |= CFS_FAILED
        return not (failed_before and self.loc & CFS_FAIL_ONCE)
