"""The engine's two error families (STYLE rule 4).

``LNetConfigError`` is bad API/lnetctl input and carries the negative errno real lnetctl prints;
``WireProtocolError`` is bad bytes from a peer and carries the health status the LND reports.
"""

from __future__ import annotations

import errno as _errno
from typing import Final

EPERM: Final = _errno.EPERM
ENOENT: Final = _errno.ENOENT
EIO: Final = _errno.EIO
E2BIG: Final = _errno.E2BIG
ENOMEM: Final = _errno.ENOMEM
EFAULT: Final = _errno.EFAULT
EBUSY: Final = _errno.EBUSY
EEXIST: Final = _errno.EEXIST
EINVAL: Final = _errno.EINVAL
ERANGE: Final = _errno.ERANGE
ENOTUNIQ: Final = _errno.ENOTUNIQ
EPROTO: Final = _errno.EPROTO
ECANCELED: Final = _errno.ECANCELED
ETIMEDOUT: Final = _errno.ETIMEDOUT
ECONNREFUSED: Final = _errno.ECONNREFUSED
ECONNRESET: Final = _errno.ECONNRESET
EHOSTUNREACH: Final = _errno.EHOSTUNREACH
ENETUNREACH: Final = _errno.ENETUNREACH
ENETDOWN: Final = _errno.ENETDOWN
ESHUTDOWN: Final = _errno.ESHUTDOWN
EALREADY: Final = _errno.EALREADY
ENODEV: Final = _errno.ENODEV
EOPNOTSUPP: Final = _errno.EOPNOTSUPP


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
