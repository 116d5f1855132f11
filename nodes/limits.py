"""Size limits of what a user hands lnetctl/lctl (issue 11 items 1-2, README "Limits").

Theory of operation: a real ``lnetctl`` never sees an argv larger than execve(2) accepts: the
arguments plus their pointers must fit ``ARG_MAX`` (2 MiB with the default 8 MiB stack rlimit,
``getconf ARG_MAX``) and one argument ``MAX_ARG_STRLEN`` (32 pages, 128 KiB), else the shell
answers ``Argument list too long`` (E2BIG). The same bound holds here wherever an argv arrives
-- the ``lnetctl``/``lctl`` client, the daemon's command entry, the control server -- and is
checked before any parsing, in time linear in the argv. ``lnetctl import`` reads at most
``MAX_IMPORT_BYTES`` (a site's whole configuration is kilobytes) and the parsed document may
hold at most ``MAX_IMPORT_NODES`` scalars and collections (YAML aliases counted each time they
are used, so an alias bomb is refused instead of expanded).
"""

from __future__ import annotations

import errno
import os

#: execve(2) limits (include/uapi/linux/limits.h ARG_MAX x 16 pages of stack/4 = 2 MiB;
#: include/uapi/linux/binfmts.h MAX_ARG_STRLEN = 32 * PAGE_SIZE)
ARG_MAX = 2 * 1024 * 1024
MAX_ARG_STRLEN = 32 * 4096
#: bytes of a pointer in argv[] counted by execve
_PTR = 8
#: ``lnetctl import``: file size and parsed nodes
MAX_IMPORT_BYTES = 4 * 1024 * 1024
MAX_IMPORT_NODES = 200_000
#: a control request (JSON) carries one argv or one import document: refused past this size
#: before it is parsed (a 2-million-word argv is 12 MB of JSON)
MAX_REQUEST_BYTES = 2 * MAX_IMPORT_BYTES


def argv_error(tool: str, argv: object) -> str | None:
    """A one-line refusal when ``argv`` is not a list of strings execve would accept, else
    None. Linear in the list; stops at the first violation."""
    if not isinstance(argv, list):
        return f"{tool}: argv must be a list of strings"
    total = 0
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            return f"{tool}: argv[{i}] is not a string"
        size = len(arg.encode("utf-8", "surrogateescape")) + 1
        if size > MAX_ARG_STRLEN:
            return (f"{tool}: argument {i + 1} is {size - 1} bytes, more than "
                    f"{MAX_ARG_STRLEN}: {os.strerror(errno.E2BIG)}")
        total += size + _PTR
        if total > ARG_MAX:
            return (f"{tool}: {len(argv)} arguments exceed {ARG_MAX} bytes: "
                    f"{os.strerror(errno.E2BIG)}")
    return None


def argv_refusal(tool: str, argv: object) -> tuple[int, str, str] | None:
    """What a command refused by ``argv_error`` answers, (rc, stdout, stderr) as the daemon's
    command entry returns it (exit status of -E2BIG), for a client to answer the same
    without sending it (issue 27 item 2: the limit enforced on both ends); None: acceptable."""
    bad = argv_error(tool, argv)
    if bad is None:
        return None
    return (256 - errno.E2BIG) % 256, "", bad + "\n"
