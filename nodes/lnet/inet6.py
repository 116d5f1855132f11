"""IPv6 address text for large NIDs: parsed as ``inet_pton(AF_INET6)``, printed as the kernel's
``%pI6c`` (nidstrings.c ``libcfs_ip_str2addr_size`` / ``libcfs_ip_addr2str_size`` -> rpc_pton
and rpc_ntop), the form ``lnetctl`` and ``lctl list_nids`` show.

Theory of operation: an address is a 128-bit int (network byte order, ``nid_addr[0]`` the top
32 bits). Parsing accepts what glibc's ``inet_pton6`` accepts: eight 1-4 digit hex groups, one
``::`` standing for at least one zero group, a dotted IPv4 tail in the last 32 bits; nothing
else -- no brackets, no ``%scope`` (a NID has no scope: link-local addresses cannot route), no
spaces. Printing is ``ip6_compressed_string``: lowercase hex without leading zeros, the
longest run of two or more zero groups (the first on a tie) as ``::``, and a dotted IPv4 tail
for IPv4-mapped (``::ffff:a.b.c.d``) and ISATAP addresses only (so ``::102:304`` stays hex,
where glibc would print ``::1.2.3.4``).
"""

from __future__ import annotations

import re
from typing import Final

_GROUP: Final = re.compile(r"^[0-9A-Fa-f]{1,4}$")
_OCTET: Final = re.compile(r"^(0|[1-9][0-9]{0,2})$")


def _pton4(text: str) -> int | None:
    """glibc ``inet_pton4``: four decimal octets, no leading zeros, each <= 255."""
    parts = text.split(".")
    if len(parts) != 4 or not all(_OCTET.match(p) and int(p) <= 255 for p in parts):
        return None
    return (int(parts[0]) << 24) | (int(parts[1]) << 16) | (int(parts[2]) << 8) | int(parts[3])


def _groups(text: str, room: int, v4_tail: bool = True) -> list[int] | None:
    """One side of ``::``: hex groups, the last of which may be a dotted IPv4 (two groups)
    when this side ends the address (``v4_tail``)."""
    if text == "":
        return []
    out: list[int] = []
    parts = text.split(":")
    for i, part in enumerate(parts):
        if i == len(parts) - 1 and "." in part and v4_tail:
            v4 = _pton4(part)
            if v4 is None:
                return None
            out += [v4 >> 16, v4 & 0xFFFF]
        elif _GROUP.match(part):
            out.append(int(part, 16))
        else:
            return None  # an empty group (":::" or a lone ':' at an end) or a bad digit
    return out if len(out) <= room else None


def pton6(text: str) -> int | None:
    """``inet_pton(AF_INET6, text)`` as an int, or None when glibc would refuse it."""
    if not 2 <= len(text) <= 45 or ":" not in text:
        return None
    head, sep, tail = text.partition("::")
    if sep:
        if "::" in tail:
            return None
        left = _groups(head, 7, v4_tail=False)
        right = _groups(tail, 7)
        if left is None or right is None or len(left) + len(right) > 7:
            return None  # ``::`` must stand for at least one zero group
        words = left + [0] * (8 - len(left) - len(right)) + right
    else:
        full = _groups(text, 8)
        if full is None or len(full) != 8:
            return None
        words = full
    value = 0
    for word in words:
        value = (value << 16) | word
    return value


def _is_v4_tail(words: list[int]) -> bool:
    """``ipv6_addr_v4mapped`` or ``ipv6_addr_is_isatap``: printed with a dotted IPv4 tail."""
    mapped = words[:5] == [0, 0, 0, 0, 0] and words[5] == 0xFFFF
    isatap = (words[4] | 0x0200) == 0x0200 and words[5] == 0x5EFE
    return mapped or isatap


def ntop6(value: int) -> str:
    """The kernel's ``%pI6c`` of a 128-bit address."""
    words = [(value >> (16 * (7 - i))) & 0xFFFF for i in range(8)]
    v4 = _is_v4_tail(words)
    span = 6 if v4 else 8
    best, best_at = 0, -1
    i = 0
    while i < span:
        j = i
        while j < span and words[j] == 0:
            j += 1
        if j - i > best:
            best, best_at = j - i, i
        i = j + 1 if j > i else i + 1
    if best < 2:
        best_at = -1
    out: list[str] = []
    need_colon = False
    i = 0
    while i < span:
        if i == best_at:
            out.append("::" if need_colon or i == 0 else ":")
            need_colon = False
            i += best
            continue
        if need_colon:
            out.append(":")
        out.append(f"{words[i]:x}")
        need_colon = True
        i += 1
    if v4:
        if need_colon:
            out.append(":")
        low = value & 0xFFFF_FFFF
        out.append(f"{low >> 24}.{(low >> 16) & 0xFF}.{(low >> 8) & 0xFF}.{low & 0xFF}")
    return "".join(out)
