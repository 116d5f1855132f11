"""Compiled NID lists: ``cfs_parse_nidlist``, ``cfs_match_nid``, ``cfs_print_nidlist``
(nidstrings.c), as ``lnetctl debug nidlist`` runs them (``lustre_lnet_debug_nidlist``).

Theory of operation: a NID list is NID ranges separated by spaces, each ``ADDR@NET`` with
one net (no net-number range: ``add_nidrange`` reads a name and a C number, ``tcp``, ``tcp1``,
``tcp0x10``). Ranges of the same net are gathered into one ``NetRange`` (``struct
nidrange``), in order of first appearance. The address part is one of

    *                   every NID of the net (``nr_all``)
    10.0.0.0/24         an IPv4 netmask, CIDR (``/prefix`` required, 1..32)
    2001:db8::/64       an IPv6 netmask (1..128; none means /128: one address)
    10.0.[0-3].*        an IPv4 address range (``cfs_ip_addr_parse``: four expr lists)
    [20-30/2]           a numeric address range (``libcfs_num_parse``), for gni, kfi, lo

picked as ``parse_nidrange`` picks it: a ``:``, or a ``/`` with no ``]`` after it, makes a
netmask (``nidrange.parse_mask``). A NID matches (``cfs_match_nid``) when a range of its own
LND type and net number holds it: ``*``; a netmask of the NID's family (``match_nidmask``:
AF_INET only for 4-byte NIDs, AF_INET6 only for large ones, and only on IP LNDs, whose
``nf_match_netmask`` exists); or an address range holding the NID's first 32 address bits
(``nid_addr[0]``: a large NID is tried on its leading 4 bytes, as the kernel does). Printing
gives per net its netmasks (``print_nidmask``) then its address ranges
(``cfs_expr_list_print``), or ``*@NET`` alone. Pure syntax: no configured state here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodes.echo import clip
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.nid import LND_NAMES, NID
from nodes.lnet.nidrange import ExprList, NIDMask, parse_expr, parse_mask

_CNUM = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")
U32_MAX = 0xFFFF_FFFF


def _bad(text: str, why: str) -> LNetConfigError:
    return LNetConfigError(-EINVAL, f"invalid NID list '{clip(text)}': {why}")


@dataclass(slots=True)
class NetRange:
    """``struct nidrange``: one net and what of it the list holds."""

    lnd: int
    num: int
    all: bool = False
    masks: list[NIDMask] = field(default_factory=list)
    addrs: list[tuple[ExprList, ...]] = field(default_factory=list)

    @property
    def ip(self) -> bool:
        return next(ip for _n, (t, ip) in LND_NAMES.items() if t == self.lnd)

    @property
    def net_name(self) -> str:
        """``cfs_print_network`` without its ``@``: number 0 left out."""
        name = next(n for n, (t, _ip) in LND_NAMES.items() if t == self.lnd)
        return name if self.num == 0 else f"{name}{self.num}"

    def matches(self, nid: NID) -> bool:
        """One net's part of ``cfs_match_nid``."""
        if nid.net.lnd != self.lnd or nid.net.num != self.num:
            return False
        if self.all:
            return True
        if self.ip and any(m.matches(nid) for m in self.masks):
            return True
        first = nid.addr >> 96 if nid.is_large else nid.addr  # be32_to_cpu(nid_addr[0])
        if self.ip:
            octets = ((first >> 24) & 0xFF, (first >> 16) & 0xFF, (first >> 8) & 0xFF,
                      first & 0xFF)
            return any(all(e.matches(o) for e, o in zip(ar, octets, strict=True))
                       for ar in self.addrs)
        return any(ar[0].matches(first) for ar in self.addrs)

    def __str__(self) -> str:
        if self.all:
            return f"*@{self.net_name}"
        parts = [f"{m}@{self.net_name}" for m in self.masks]
        parts += [".".join(str(e) for e in ar) + f"@{self.net_name}" for ar in self.addrs]
        return " ".join(parts)


def _cnum(text: str) -> int | None:
    """``kstrtouint(text, 0)``: decimal, ``0x`` hex or ``0`` octal, at most U32_MAX."""
    if not _CNUM.match(text):
        return None
    value = int(text, 16 if text[:2].lower() == "0x" else 8 if text.startswith("0") else 10)
    return value if value <= U32_MAX else None


def _net(text: str, whole: str) -> tuple[int, int]:
    """``add_nidrange``: a known LND name, then nothing or a C number."""
    for name, (lnd, _ip) in sorted(LND_NAMES.items(), key=lambda kv: -len(kv[0])):
        if text.startswith(name):
            num = _cnum(text[len(name):]) if text != name else 0
            if num is None:
                raise _bad(whole, f"bad net number in '{clip(text)}'")
            return lnd, num
    raise _bad(whole, f"unknown net type in '{clip(text)}'")


def parse_nidlist(text: str) -> list[NetRange]:
    """``cfs_parse_nidlist``: raises LNetConfigError(-EINVAL) naming the bad range."""
    whole = str(text)
    nets: list[NetRange] = []
    for tok in whole.split(" "):
        if not tok:
            continue
        addr_s, at, net_s = tok.partition("@")
        addr_s, net_s = addr_s.strip(), net_s.strip()
        if not at or not net_s or "@" in net_s:
            raise _bad(whole, f"'{clip(tok)}' is not ADDRESS-RANGE@NET")
        lnd, num = _net(net_s, whole)
        nr = next((n for n in nets if (n.lnd, n.num) == (lnd, num)), None)
        if nr is None:
            nr = NetRange(lnd, num)
            nets.append(nr)
        slash = addr_s.find("/")
        try:
            if ":" in addr_s or (slash >= 0 and "]" not in addr_s[slash:]):
                nr.masks.append(parse_mask(addr_s, tok))
            elif addr_s == "*":
                nr.all = True
            elif nr.ip:
                parts = addr_s.split(".")
                if len(parts) != 4:
                    raise _bad(whole, f"'{clip(addr_s)}' needs four parts")
                nr.addrs.append(tuple(parse_expr(p, 255, tok) for p in parts))
            else:
                nr.addrs.append((parse_expr(addr_s, U32_MAX, tok),))
        except LNetConfigError as e:
            if e.descr.startswith("invalid NID list"):
                raise
            raise _bad(whole, e.descr.removeprefix("invalid ")) from None
    if not nets:
        raise _bad(whole, "empty")
    return nets


def match_nid(nets: list[NetRange], nid: NID) -> bool:
    """``cfs_match_nid``."""
    return any(nr.matches(nid) for nr in nets)


def print_nidlist(nets: list[NetRange]) -> str:
    """``cfs_print_nidlist``: the net ranges, space-separated."""
    return " ".join(str(nr) for nr in nets)
