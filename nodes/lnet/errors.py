"""The engine's two error families (STYLE rule 4).

``LNetConfigError`` is bad API/lnetctl input and carries the negative errno real lnetctl prints;
``WireProtocolError`` is bad bytes from a peer and carries the health status the LND reports.
"""

from __future__ import annotations

import errno as _errno

EPERM = _errno.EPERM
ENOENT = _errno.ENOENT
EIO = _errno.EIO
E2BIG = _errno.E2BIG
ENOMEM = _errno.ENOMEM
EFAULT = _errno.EFAULT
EBUSY = _errno.EBUSY
EEXIST = _errno.EEXIST
EINVAL = _errno.EINVAL
ERANGE = _errno.ERANGE
ENOTUNIQ = _errno.ENOTUNIQ
EPROTO = _errno.EPROTO
ECANCELED = _errno.ECANCELED
ETIMEDOUT = _errno.ETIMEDOUT
ECONNREFUSED = _errno.ECONNREFUSED
ECONNRESET = _errno.ECONNRESET
EHOSTUNREACH = _errno.EHOSTUNREACH
ENETUNREACH = _errno.ENETUNREACH
ENETDOWN = _errno.ENETDOWN
ESHUTDOWN = _errno.ESHUTDOWN
EALREADY = _errno.EALREADY
ENODEV = _errno.ENODEV
EOPNOTSUPP = _errno.EOPNOTSUPP


class LNetConfigError(Exception):
    """Bad configuration or command input; ``errno`` is negative as lnetctl prints it."""

    def __init__(self, errno: int, descr: str) -> None:
        super().__init__(descr)
        self.errno = -abs(errno)
        self.descr = descr


class WireProtocolError(Exception):
    """Bad bytes from a peer. ``hstatus`` is the LNET_MSG_STATUS_* the LND must report."""

    def __init__(self, descr: str, hstatus: int = 7) -> None:  # 7 = REMOTE_ERROR
        super().__init__(descr)
        self.descr = descr
        self.hstatus = hstatus
