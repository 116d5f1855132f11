"""``enum lnet_msg_hstatus`` (include/linux/lnet/lib-types.h): the health status an LND sets
on a message before ``lnet_finalize`` (spec §3.2, §3.7).

Shared by the engine (health classification, resend decisions) and the LNDs (which produce it),
so it lives here rather than in ``nodes/lnd/wire.py``.
"""

from __future__ import annotations

import enum


class HStatus(enum.IntEnum):
    """LNET_MSG_STATUS_*; values are the kernel's, so they can be logged and compared as ints."""

    OK = 0
    LOCAL_INTERRUPT = 1
    LOCAL_DROPPED = 2
    LOCAL_ABORTED = 3
    LOCAL_NO_ROUTE = 4
    LOCAL_ERROR = 5
    LOCAL_TIMEOUT = 6
    REMOTE_ERROR = 7
    REMOTE_DROPPED = 8
    REMOTE_TIMEOUT = 9
    NETWORK_TIMEOUT = 10

