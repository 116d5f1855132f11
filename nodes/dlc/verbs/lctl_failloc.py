"""``lctl set_param|get_param fail_loc|fail_val``: libcfs's fault-injection variables (E11).

Theory of operation: the two files are the engine's ``FailLoc`` (``nodes/lnet/failloc.py``),
read and written as lnet/libcfs/module.c's handlers do. ``fail_loc`` (``proc_fail_loc``) is an
``unsigned long`` written with ``kstrtoul(buf, 0)`` -- decimal, ``0x`` hex or leading-``0``
octal, an optional ``+``, one optional trailing newline, nothing else -- and read back with
``%lu``: decimal, and with the ``CFS_FAILED``/``CFS_FAIL_ONCE`` bits the checks have set since
(``0xe004`` reads ``57348``, then ``1073799172`` once a check hit it). ``fail_val``
(``debugfs_doint``) is an ``int`` written with ``kstrtoint(buf, 0)`` and read with ``%u``
(``-1`` reads ``4294967295``). A write longer than the handler's buffer is ``-E2BIG``; a bad
number ``-EINVAL``; one out of range ``-ERANGE``; each a one-line error naming the value.

Every value is accepted, as the kernel accepts it: the variable is only read where code calls
``CFS_FAIL_CHECK(ID)``. The engine checks the LNet locations it implements (0xe002, 0xe003,
0xe004, 0xe020, ``failloc.py``); any other location (a Lustre one, 0x0100-0x3fff, or an LNet
one no code path here checks) matches no check, which is what a real node with only LNet
loaded does with it too. The modifier bits ``CFS_FAIL_ONCE``, ``CFS_FAIL_SKIP``,
``CFS_FAIL_SOME`` and ``CFS_FAIL_RAND`` are implemented by ``FailLoc.check``;
``CFS_FAIL_USR1`` (0x04000000) and ``CFS_FAULT`` (0x02000000) are read by no LNet check
(libcfs_fail.h ``CFS_FAIL_PRECHECK``: ``CFS_FAULT`` only matches IDs that carry it, as
Lustre's ``CFS_FAULT_CHECK`` ones do), so they change nothing here either.
"""

from __future__ import annotations

import errno as E
import os
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

#: the handlers' write buffers: ``sizeof(cfs_fail_loc) * 4`` and ``sizeof(int) * 4`` bytes
_BUF = {"fail_loc": 32, "fail_val": 16}
NAMES = tuple(_BUF)


class ParamError(ValueError):
    """A write the kernel handler refuses; ``errno`` is its negative return."""

    def __init__(self, errno: int) -> None:
        super().__init__(os.strerror(errno))
        self.errno = errno


def kstrtoull(text: str, limit: int) -> int:
    """lib/kstrtox.c ``_kstrtoull`` with base 0: ``0x`` followed by a hex digit is hex, a
    leading ``0`` octal, else decimal; one trailing newline allowed; ``limit`` the largest
    value the type holds (-ERANGE above it).

    Raises:
        ParamError: -EINVAL (no digits, or anything after them), -ERANGE (too big).
    """
    s = text[1:] if text.startswith("+") else text
    if s[:2].lower() == "0x" and s[2:3] and s[2] in string.hexdigits:
        base, s = 16, s[2:]
    else:
        base = 8 if s.startswith("0") else 10
    digits = string.hexdigits if base == 16 else string.digits[:base]
    n = 0
    while n < len(s) and s[n] in digits:
        n += 1
    if n == 0 or s[n:] not in ("", "\n"):
        raise ParamError(E.EINVAL)
    value = int(s[:n], base)
    if value > limit:
        raise ParamError(E.ERANGE)
    return value


def kstrtoint(text: str) -> int:
    """``kstrtoint(buf, 0)``: a signed 32-bit value, ``-`` allowed (lib/kstrtox.c)."""
    if text.startswith("-"):
        return -kstrtoull(text[1:], 2**31)
    return kstrtoull(text, 2**31 - 1)


def write(rt: NodeRuntime, name: str, value: str) -> None:
    """``lctl set_param NAME=VALUE`` for ``fail_loc``/``fail_val``.

    Raises:
        ParamError: the handler's error (module.c ``proc_fail_loc``/``debugfs_doint``).
    """
    if len(value) > _BUF[name]:
        raise ParamError(E.E2BIG)
    if name == "fail_loc":
        rt.engine.set_fail_loc(kstrtoull(value, 2**64 - 1))
    else:
        rt.engine.set_fail_val(kstrtoint(value))


def read(rt: NodeRuntime, name: str) -> str:
    """``lctl get_param NAME``: ``%lu`` of ``cfs_fail_loc``, ``%u`` of ``cfs_fail_val``."""
    fail = rt.engine.fail
    return str(fail.loc if name == "fail_loc" else fail.val % 2**32)
