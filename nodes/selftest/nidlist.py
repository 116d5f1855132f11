"""lst's NID lists: ``192.168.1.[1-10/2,20]@tcp`` expanded as lst.c ``expand_strs`` does.

Theory of operation: each ``[...]`` holds comma-separated numbers, ranges ``lo-hi`` (lo must
be below hi) and strided ranges ``lo-hi/stride``; brackets are expanded from the left, one
per pass, each expansion in order, so ``10.0.[1-2].[1-2]@tcp`` gives .1.1 .1.2 .2.1 .2.2. A
bad bracket is a syntax error for the whole string (``Syntax error in "..."``), a word that
is not a NID afterwards is ``Invalid nid: ...`` -- lst's own messages, returned for the
caller to print. Expansion is bounded (``MAX_NIDS``, a message of our own) so a list cannot
exhaust memory, nor one console transaction hold its node for long (issue 27 item 1).
"""

from __future__ import annotations

import re

from nodes.lnet.nid import NID, parse_nid

#: a bound of this implementation (lst allocates whatever the ranges ask for, and the
#: console posts one RPC per node: no LNet limit exists, docs/differences.md): more than the
#: 10,000 nodes the simulator runs; one list of it costs ~100 MB and ~3 s of a node's CPU
MAX_NIDS = 16384
_NUM = re.compile(r"\s*\+?(\d+)")


def _uint(expr: str, pos: int) -> tuple[int, int] | None:
    """``sscanf("%u")`` at ``pos``: (value, end) or None."""
    m = _NUM.match(expr, pos)
    return (int(m.group(1)), m.end()) if m else None


def _items(expr: str) -> list[int] | None:
    """One comma-separated item: ``x``, ``x-y`` (x<y) or ``x-y/z``; None: syntax error."""
    first = _uint(expr, 0)
    if first is None:
        return None
    x, end = first
    if end == len(expr):
        return [x]
    if expr[end:end + 1] != "-":
        return None
    second = _uint(expr, end + 1)
    if second is None:
        return None
    y, end = second
    if x >= y:
        return None
    if end == len(expr):
        return list(range(x, y + 1))
    if expr[end:end + 1] != "/":
        return None
    third = _uint(expr, end + 1)
    if third is None or third[1] != len(expr) or third[0] == 0:
        return None
    return list(range(x, y + 1, third[0]))


class TooMany(ValueError):
    """More than ``MAX_NIDS`` NIDs (a bound of this implementation)."""


def expand(text: str) -> list[str] | None:
    """``expand_strs``: every string the brackets stand for, or None on a syntax error.

    Raises:
        TooMany: the list would hold more than ``MAX_NIDS`` NIDs.
    """
    words = [text]
    while any("[" in w for w in words):
        out: list[str] = []
        for w in words:
            b1 = w.find("[")
            if b1 < 0:
                out.append(w)
                continue
            b2 = w.find("]", b1)
            if b2 < 0 or b2 == b1 + 1:
                return None
            prefix, body, postfix = w[:b1], w[b1 + 1:b2], w[b2 + 1:]
            for expr in body.split(","):
                values = _items(expr)
                if values is None:
                    return None
                out += [f"{prefix}{v}{postfix}" for v in values]
                if len(out) > MAX_NIDS:
                    raise TooMany(text)
        words = out
    return words


def parse_nids(text: str) -> tuple[list[NID] | None, str | None]:
    """``lst_parse_nids``: (NIDs, None) or (None, lst's message for stderr)."""
    try:
        words = expand(text)
    except TooMany:
        return None, (f'Too many NIDs in "{text}" (more than {MAX_NIDS}, the most one list '
                      f'may hold here; real lst has no such bound)')
    if words is None:
        return None, f'Syntax error in "{text}"'
    nids = []
    for w in words:
        nid = parse_nid(w)
        # lst.c reads each one with libcfs_str2nid, the nid4 parser: an IPv6 (large) NID is
        # LNET_NID_ANY there, so lst refuses it as any other bad NID
        if nid is None or nid.is_large:
            return None, f"Invalid nid: {w}"
        nids.append(nid)
    return nids, None
