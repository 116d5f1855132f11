"""NID ranges and number lists as liblnetconfig expands them (issue 14 "Parsing").

Theory of operation:

* ``expand_nids`` is ``lustre_lnet_parse_nid_range`` / ``unroll_nid_range_scan``
  (liblnetconfig.c), used by ``peer add/del --nid``, ``route add/del --gateway``, ``ping`` and
  ``discover``: a comma-separated list of NID expressions, each an address with bracketed
  number lists and ``@net``. ``4.4.4.[1-3]@tcp`` -> .1 .2 .3; ``[6-12/4]@gni`` -> 6@gni
  10@gni; ``[1,2,3-4]``; several bracket groups expand leftmost-outermost
  (``6.6.[6-7].[0-4/2]`` gives 6.6.6.0 6.6.6.2 6.6.6.4 6.6.7.0 ...); commas inside brackets
  belong to the list. ``*`` is refused ("asterisk not allowed in nidstring"), a range
  ``[2-1]`` is "range is wrong order", anything else malformed "invalid NID in nidstr". Every
  expanded NID is parsed as the kernel would parse it, so ``1.1.1.1@gni`` or
  ``256.256.256.256@tcp`` fail here. Expansion is lazy and stops past ``limit`` NIDs
  (``LNET_MAX_NIDS_PER_PEER`` for peers, issue 11: bounded work), refused with E2BIG. A
  bracket-free address that is a host name (``oss1@tcp``) is resolved as ``libcfs_strnid``
  does, by the caller's ``resolve`` or ``HOSTS`` (the node's hosts view,
  ``nodes/daemon/etchosts.py``); ``nid_or_host`` is the same for one NID.
* ``parse_expr_list`` is ``cfs_expr_list_parse`` (lib/libcfs/string.c): ``N``, ``*`` or
  ``[N, N-M, N-M/S, ...]`` with each number in ``lo..hi`` -- CPT lists and ip2nets patterns.

Pure syntax; nothing here knows configured state.
"""

from __future__ import annotations

import errno
import itertools
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from nodes.echo import clip
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, parse_net

#: liblnetconfig.h LNET_MAX_NIDS_PER_PEER; yaml_lnet_peer refuses the entry after
#: ``count++ > LNET_MAX_NIDS_PER_PEER``, i.e. more than 129 NIDs in one --nid
LNET_MAX_NIDS_PER_PEER = 128
PEER_NID_LIMIT = LNET_MAX_NIDS_PER_PEER + 1
#: bound on one route/ping expansion (real lnetctl has none; ours keeps the work bounded)
MAX_EXPANDED_NIDS = 65536
#: bound on ``route add|del --gateway`` (real lnetctl has none: docs/differences.md): each
#: gateway is one ``lnet_add_route``, done one step at a time (issue 27)
MAX_ROUTE_GATEWAYS = 1024

_NUM = re.compile(r"\s*(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\s*")


class NidListError(LNetConfigError):
    """A NID list that cannot be expanded; ``descr`` is liblnetconfig's text."""


@dataclass(frozen=True, slots=True)
class RangeExpr:
    """``cfs_range_expr``: lo..hi every stride."""

    lo: int
    hi: int
    stride: int = 1

    def values(self) -> Iterator[int]:
        return iter(range(self.lo, self.hi + 1, self.stride))

    def __str__(self) -> str:  # cfs_range_expr_print, bracketed
        if self.lo == self.hi:
            return str(self.lo)
        return f"{self.lo}-{self.hi}" + (f"/{self.stride}" if self.stride != 1 else "")


def _num(text: str, lo: int, hi: int) -> int | None:
    """``cfs_str2num_check``: strtoul base 0 of the whole token (spaces allowed), in range."""
    m = _NUM.fullmatch(text)
    if m is None:
        return None
    digits = m.group(1)
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits[0] == "0" else 10
    value = int(digits, base)
    return value if lo <= value <= hi else None


def _range_expr(tok: str, lo: int, hi: int, bracketed: bool) -> RangeExpr | None:
    """``cfs_range_expr_parse``."""
    if tok == "*":
        return RangeExpr(lo, hi)
    one = _num(tok, lo, hi)
    if one is not None:
        return RangeExpr(one, one)
    if not bracketed or "-" not in tok:
        return None
    first, rest = tok.split("-", 1)
    a = _num(first, lo, hi)
    if a is None:
        return None
    b = _num(rest, lo, hi)
    stride = 1
    if b is None:
        if "/" not in rest:
            return None
        end, step = rest.split("/", 1)
        b, s = _num(end, lo, hi), _num(step, lo, hi)
        if b is None or s is None or s == 0:
            return None
        stride = s
    return RangeExpr(a, b, stride) if a <= b else None


def parse_expr_list(text: str, lo: int = 0, hi: int = 2**32 - 1) -> tuple[RangeExpr, ...]:
    """``cfs_expr_list_parse``: ``N``, ``*`` or ``[expr, ...]``.

    Raises:
        LNetConfigError: -EINVAL, the text does not parse.
    """
    if len(text) >= 2 and text[0] == "[" and text[-1] == "]":
        toks, bracketed = text[1:-1].split(","), True
    else:
        toks, bracketed = [text], False
    out = []
    for tok in toks:
        expr = _range_expr(tok, lo, hi, bracketed) if tok else None
        if expr is None:
            raise LNetConfigError(-errno.EINVAL, f"cannot parse expression list '{clip(text)}'")
        out.append(expr)
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _bad(what: str, code: int = errno.EINVAL) -> NidListError:
    return NidListError(-code, f"Unable to parse nidlist: {what}")


_HEX_ITEM = re.compile(r"([0-9a-fA-F]+)(?:-([0-9a-fA-F]+)(?:/([0-9]+))?)?")


def _hex_range(tok: str) -> RangeExpr | None:
    """An IPv6 NID's bracket item (``unroll_nid_range_scan`` with a ':' in the NID): its
    numbers are read base 16, ':' inside skipped, the stride decimal; the values are printed
    back in decimal (``%u``), as real lnetctl does: ``2001:db8::[a-b]@tcp`` is
    ``2001:db8::10@tcp`` and ``2001:db8::11@tcp``."""
    m = _HEX_ITEM.fullmatch(tok.replace(":", "").strip())
    if m is None:
        return None
    lo = int(m.group(1), 16)
    hi = int(m.group(2), 16) if m.group(2) else lo
    stride = int(m.group(3)) if m.group(3) else 1
    if max(lo, hi) > 2**32 - 1 or stride == 0:
        return None
    return RangeExpr(lo, hi, stride) if lo <= hi else None


def _group(body: str, ipv6: bool = False) -> list[str]:
    """The values of one bracket group, in order (bounded before it is materialised)."""
    items = []
    for tok in body.split(","):
        if ipv6:
            rexpr = _hex_range(tok) if tok else None
            if rexpr is None:
                lo_s, _, hi_s = tok.replace(":", "").partition("-")
                hi_s = hi_s.split("/")[0]
                if _HEX_ITEM.fullmatch(lo_s) and _HEX_ITEM.fullmatch(hi_s) \
                        and int(lo_s, 16) > int(hi_s, 16):
                    raise _bad("range is wrong order", errno.ERANGE)
                raise _bad("invalid character in range")
            items.append(rexpr)
            continue
        rexpr = _range_expr(tok, 0, 2**32 - 1, True) if tok else None
        if rexpr is None:
            a, _, rest = tok.partition("-")
            lo, hi = _num(a, 0, 2**32 - 1), _num(rest.split("/")[0], 0, 2**32 - 1)
            if lo is not None and hi is not None and lo > hi:
                raise _bad("range is wrong order", errno.ERANGE)
            raise _bad("invalid character in range")
        items.append(rexpr)
    if sum((r.hi - r.lo) // r.stride + 1 for r in items) > MAX_EXPANDED_NIDS:
        raise _bad("specifies more NIDs than allowed", errno.E2BIG)
    return [str(v) for r in items for v in r.values()]


def _expand_one(expr: str) -> Iterator[str]:
    """One ``addr@net`` expression -> NID strings, leftmost bracket outermost."""
    addr, at, net = expr.rpartition("@")
    if not at or not addr:
        raise _bad("invalid NID in nidstr")
    pieces: list[list[str]] = []
    pos = 0
    ipv6 = ":" in addr
    for m in re.finditer(r"\[([^\[\]]*)\]", addr):
        pieces += [[addr[pos:m.start()]], _group(m.group(1), ipv6)]
        pos = m.end()
    pieces.append([addr[pos:]])
    if any("[" in p[0] or "]" in p[0] for p in pieces[::2]):
        raise _bad("invalid NID in nidstr")  # nested or unbalanced brackets
    for combo in itertools.product(*pieces):
        yield "".join(combo) + "@" + net


Resolver = Callable[[str], str | None]
#: the host-name lookup of the node whose lnetctl command is running (``lnetctl_cmd.run`` sets
#: it per request: the node's hosts view); None: host names are not addresses
HOSTS: ContextVar[Resolver | None] = ContextVar("lnet_hosts", default=None)


def nid_or_host(text: str, resolve: Resolver | None = None) -> NID | None:
    """``libcfs_strnid``: one NID, its address possibly a host name; None when it is not a
    NID."""
    try:
        return NID.parse(text)
    except LNetConfigError:
        return _hostname_nid(text.strip(), resolve or HOSTS.get())


def _hostname_nid(nidstr: str, resolve: Resolver | None) -> NID | None:
    """``libcfs_strnid`` on a host-name address: an IP-addressed net and an address starting
    with a letter go through ``resolve`` (``libcfs_ip_str2addr_size``'s getaddrinfo)."""
    addr, _, net_s = nidstr.rpartition("@")
    net = parse_net(net_s)
    if resolve is None or net is None or not net.ip_addressed or not addr[:1].isascii() \
            or not addr[:1].isalpha():
        return None
    ip = resolve(addr)
    return None if ip is None else NID.parse(f"{ip}@{net_s}")


def expand_nids(text: str, limit: int = MAX_EXPANDED_NIDS,
                resolve: Resolver | None = None) -> list[NID]:
    """Expand a NID list to its NIDs (each parsed once, here), in order, duplicates kept; an address
    that is a host name is looked up with ``resolve`` (default: ``HOSTS``; none: invalid).

    Raises:
        NidListError: liblnetconfig's reason (-EINVAL, -ERANGE, -E2BIG past ``limit``).
    """
    if "*" in text:
        raise NidListError(-errno.EINVAL, "asterisk not allowed in nidstring")
    if "<?>" in text:
        raise _bad("LNET_ANY_NID is unsupported")
    if "@" not in text:
        raise _bad("no valid NIDs in string")
    out: list[NID] = []
    for expr in _split_top(text):
        if not expr:
            continue
        for nidstr in _expand_one(expr.strip()):
            named = nid_or_host(nidstr, resolve)
            if named is None:
                raise _bad("invalid NID in nidstr")
            out.append(named)
            if len(out) > limit:  # liblnetconfig's words, and the bound (issue 27)
                raise _bad(f"specifies more NIDs than allowed (more than {limit})",
                           errno.E2BIG)
    if not out:
        raise _bad("did not expand to any nids", errno.ENOENT)
    return out
