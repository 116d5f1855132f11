"""NID-range ("ip2nets") descriptors used by UDSP rules (spec §1.1, §7.1; nidstrings.c).

Theory of operation: a descriptor is what ``cfs_parse_nid_parts`` makes of one ``--src``,
``--dst`` or ``--rte`` argument: an LND type, a list of net-number ranges and, unless the
descriptor names a whole net, a list of address ranges (four for dotted-IPv4 LNDs, one for
numeric ones). Each range list ("expr list") is a union of ``lo[-hi[/stride]]`` items, or ``*``.

    tcp                 net rule: tcp0 only          tcp[1-3]      tcp1, tcp2, tcp3
    *@o2ib              every address on o2ib0       10.1.1.[1-10/2]@tcp   .1 .3 .5 .7 .9
    [22-25]@gni         numeric addresses 22..25     10.0.[0-1].*@tcp1
    2001:db8::/64@tcp   large NIDs in 2001:db8::/64  2001:db8::7@tcp    that one large NID
    10.0.0.0/24@tcp     4-byte NIDs in 10.0.0.0/24

An address part holding ``:``, or a ``/`` outside ``[...]``, is a netmask: the ``<netmask>``
(CIDR, IPv4 or IPv6) and ``<ipv6_addr>`` forms of the kernel's NID-list grammar (nidstrings.c
``parse_nidrange`` picks the form so, then ``parse_nidmask``, ``parse_prefix_len``): an IPv4
mask needs ``/prefix`` 1..32 (``10.0.0.0/24@tcp``), an IPv6 one takes 1..128, none meaning
/128. ``match_nidmask`` never crosses families: an IPv4 mask matches 4-byte NIDs only, an
IPv6 one large NIDs only, each by ``libcfs_ip_in_netmask``. It prints back as
``print_nidmask`` does: the address as given (dotted, or ``%pI6c``), then ``/prefix`` under
32 or 128. Real ``lnetctl udsp`` parses addresses with the IPv4-range-only
``cfs_ip_addr_parse``; taking the NID-list forms here is listed in docs/differences.md.
``[a-b]`` ranges inside a netmask exist in no real grammar (``rpc_pton`` refuses them) and are
refused, naming the CIDR form.

``str()`` prints the form ``lnetctl udsp show`` prints (``lustre_lnet_nid_descr2str``) and
parses back to an equal descriptor, so ``lnetctl export`` output can be imported. Equality is
what ``lnet_udsp_equal`` compares. Pure syntax: no configured state here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodes.echo import clip
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.inet6 import ntop6, pton6
from nodes.lnet.nid import LND_NAMES, LOLND, NID, Net

_NUM = re.compile(r"^[0-9]+$")
_ITEM = re.compile(r"^([0-9]+)(?:-([0-9]+)(?:/([0-9]+))?)?$")


@dataclass(frozen=True, slots=True)
class Range:
    """One ``cfs_range_expr``: ``lo..hi`` every ``stride``."""

    lo: int
    hi: int
    stride: int = 1

    def matches(self, value: int) -> bool:
        return self.lo <= value <= self.hi and (value - self.lo) % self.stride == 0


@dataclass(frozen=True, slots=True)
class ExprList:
    """A ``cfs_expr_list``: a value matches when any of its ranges does."""

    ranges: tuple[Range, ...]
    star: bool = False  # written as ``*`` (the whole 0..max range)

    def matches(self, value: int) -> bool:
        return any(r.matches(value) for r in self.ranges)

    def __str__(self) -> str:
        if self.star:
            return "*"
        if len(self.ranges) == 1 and self.ranges[0].lo == self.ranges[0].hi:
            return str(self.ranges[0].lo)
        items = []
        for r in self.ranges:
            if r.lo == r.hi:
                items.append(str(r.lo))
            elif r.stride > 1:
                items.append(f"{r.lo}-{r.hi}/{r.stride}")
            else:
                items.append(f"{r.lo}-{r.hi}")
        return "[" + ",".join(items) + "]"


def _bad(text: str, why: str) -> LNetConfigError:
    return LNetConfigError(-EINVAL, f"invalid NID range '{clip(str(text))}': {why}")


def parse_expr(text: str, maximum: int, whole: str) -> ExprList:
    """``cfs_expr_list_parse``: ``N``, ``*`` or ``[a,b-c,d-e/s]`` with values <= ``maximum``."""
    if text == "*":
        return ExprList((Range(0, maximum),), star=True)
    if _NUM.match(text):
        value = int(text)
        if value > maximum:
            raise _bad(whole, f"{value} is larger than {maximum}")
        return ExprList((Range(value, value),))
    if not (text.startswith("[") and text.endswith("]")) or len(text) < 3:
        raise _bad(whole, f"cannot parse '{clip(str(text))}'")
    ranges = []
    for item in text[1:-1].split(","):
        m = _ITEM.match(item.strip())
        if m is None:
            raise _bad(whole, f"cannot parse range '{clip(str(item))}'")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        stride = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or hi > maximum or stride < 1:
            raise _bad(whole, f"bad range '{clip(str(item))}' (need lo <= hi <= {maximum}, "
                       "stride >= 1)")
        ranges.append(Range(lo, hi, stride))
    return ExprList(tuple(ranges))


@dataclass(frozen=True, slots=True)
class NIDMask:
    """One ``struct nidmask``: the address as given, its prefix length and its family
    (``nm_family``: 4 for AF_INET, 6 for AF_INET6)."""

    addr: int
    prefix: int
    family: int = 6

    @property
    def bits(self) -> int:
        return 128 if self.family == 6 else 32

    @property
    def netmask(self) -> int:
        """``init_ipv6_nidmask`` / ``init_ipv4_nidmask`` (``inet_make_mask``)."""
        return ((1 << self.bits) - 1) ^ ((1 << (self.bits - self.prefix)) - 1)

    def matches(self, nid: NID) -> bool:
        """``match_nidmask``: an IPv4 mask matches 4-byte NIDs only, an IPv6 mask large NIDs
        only; then ``libcfs_ip_in_netmask`` compares the masked address."""
        if nid.is_large != (self.family == 6):
            return False
        return (nid.addr & self.netmask) == (self.addr & self.netmask)

    def __str__(self) -> str:
        """``print_nidmask``: the address as given, ``/prefix`` under the family's maximum."""
        if self.family == 6:
            text = ntop6(self.addr)
        else:
            text = ".".join(str((self.addr >> s) & 0xFF) for s in (24, 16, 8, 0))
        return text + (f"/{self.prefix}" if self.prefix < self.bits else "")


def _pton4(text: str) -> int | None:
    """``in4_pton`` as ``rpc_pton`` calls it: four decimal octets, each <= 255 (leading
    zeros taken; a long run of them costs no big-number parse)."""
    parts = text.split(".")
    values = [int(p.lstrip("0")[:4] or "0") for p in parts if _NUM.match(p)]
    if len(values) != 4 or max(values) > 255:
        return None
    return (values[0] << 24) | (values[1] << 16) | (values[2] << 8) | values[3]


def parse_mask(text: str, whole: str) -> NIDMask:
    """``parse_nidmask``: ``ADDR/PREFIX`` (IPv4: the prefix is required, 1..32) or an IPv6
    ``ADDR[/PREFIX]`` (1..128, none meaning /128), as ``parse_prefix_len`` and ``rpc_pton``
    take them."""
    family = 6 if ":" in text else 4
    name = "IPv6" if family == 6 else "IPv4"
    addr_s, slash, prefix_s = text.partition("/")
    if "[" in addr_s:
        raise _bad(whole, f"an {name} netmask takes no '[...]' range in '{clip(text)}'; "
                   f"write the range as a prefix, e.g. "
                   f"{'2001:db8::/64' if family == 6 else '10.0.0.0/24'}")
    maximum = 128 if family == 6 else 32
    prefix = maximum
    if slash:
        digits = prefix_s.lstrip("0")
        if not _NUM.match(prefix_s) or len(digits) > 3 or not 1 <= int(digits or "0") <= maximum:
            raise _bad(whole, f"{name} prefix length '{clip(prefix_s)}' is not in 1-{maximum}")
        prefix = int(prefix_s)
    addr = pton6(addr_s) if family == 6 else _pton4(addr_s)
    if addr is None:
        raise _bad(whole, f"'{clip(addr_s)}' is not an {name} address")
    return NIDMask(addr, prefix, family)


@dataclass(frozen=True, slots=True)
class NIDRange:
    """``lnet_ud_nid_descr``: net type, net-number ranges, address ranges (None: net rule)."""

    lnd: int
    net_nums: ExprList
    addr: tuple[ExprList, ...] | None = None
    mask: NIDMask | None = None  # an IPv4 or IPv6 netmask (CIDR) instead of ``addr``

    @property
    def is_net_rule(self) -> bool:
        """``lnet_udsp_is_net_rule``: no address part, the descriptor names whole nets."""
        return self.addr is None and self.mask is None

    @property
    def lnd_name(self) -> str:
        return next(n for n, (t, _ip) in LND_NAMES.items() if t == self.lnd)

    def matches_net(self, net: Net) -> bool:
        """``cfs_match_net``: same LND type and net number in range."""
        return net.lnd == self.lnd and self.net_nums.matches(net.num)

    def matches_nid(self, nid: NID) -> bool:
        """``cfs_match_nid_net``: the net matches and so does every address part."""
        if self.mask is not None:
            return self.matches_net(nid.net) and self.mask.matches(nid)
        if self.addr is None or not self.matches_net(nid.net):
            return False
        if len(self.addr) == 4:
            octets = ((nid.addr >> 24) & 0xFF, (nid.addr >> 16) & 0xFF,
                      (nid.addr >> 8) & 0xFF, nid.addr & 0xFF)
            return all(e.matches(o) for e, o in zip(self.addr, octets, strict=True))
        return self.addr[0].matches(nid.addr)

    def __str__(self) -> str:
        nums = "" if str(self.net_nums) == "0" else str(self.net_nums)
        net = f"{self.lnd_name}{nums}"
        if self.mask is not None:
            return f"{self.mask}@{net}"
        if self.addr is None:
            return net
        if all(e.star for e in self.addr):
            return f"*@{net}"
        return ".".join(str(e) for e in self.addr) + "@" + net


def _parse_net_range(text: str, whole: str) -> tuple[int, ExprList]:
    """``parse_net_range``: the longest known LND name, then a number, ``*`` or ``[...]``."""
    for name, (lnd, _ip) in sorted(LND_NAMES.items(), key=lambda kv: -len(kv[0])):
        if not text.startswith(name):
            continue
        rest = text[len(name):]
        if lnd == LOLND and rest:
            raise _bad(whole, "the lo net takes no number")
        return lnd, parse_expr(rest or "0", 0xFFFF, whole)
    raise _bad(whole, f"unknown net type in '{clip(str(text))}'")


def parse_nidrange(text: str) -> NIDRange:
    """``cfs_parse_nid_parts``: ``[ADDR-RANGE@]NET-RANGE``; raises LNetConfigError(-EINVAL)."""
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "empty")
    whole = text.strip()
    addr_s, at, net_s = whole.partition("@")
    if not at:
        lnd, nums = _parse_net_range(whole, whole)
        return NIDRange(lnd, nums)
    lnd, nums = _parse_net_range(net_s, whole)
    ip = LND_NAMES[next(n for n, (t, _i) in LND_NAMES.items() if t == lnd)][1]
    slash = addr_s.find("/")
    if ip and (":" in addr_s or (slash >= 0 and "]" not in addr_s[slash:])):
        return NIDRange(lnd, nums, mask=parse_mask(addr_s, whole))
    star = ["*"] * (4 if ip else 1)
    parts = star if addr_s == "*" else addr_s.split(".") if ip else [addr_s]
    if ip and len(parts) != 4:
        raise _bad(whole, "an IPv4 address range needs four parts")
    maximum = 255 if ip else 0xFFFF_FFFF
    return NIDRange(lnd, nums, tuple(parse_expr(p, maximum, whole) for p in parts))
