"""NIDs and net names, parsed and printed as real LNet does (spec §1.1, nidstrings.c).

Theory of operation: a NID is ``address@net``; a net is ``<lnd name><number>`` where number 0 is
printed bare (``tcp`` == ``tcp0``). The 64-bit "nid4" packing is ``(net_id << 32) | addr`` with
``net_id = (lnd_type << 16) | net_num``, the value carried in ``lnet_hdr`` on the wire.

A large NID (``struct lnet_nid`` with ``nid_size`` 12: a 16-byte address, lnet-types.h
``LNET_NID_IS_LARGE``/``nid_is_nid4``) is an IPv6 ``NID`` with ``size`` 12 and a 128-bit
``addr``; ``2001:db8::1@tcp`` parses to one on the IP-addressed LNDs that take
``nf_str2addr_size`` (tcp, o2ib, efa), printed as the kernel prints it (``inet6.py``). Its
``nid4`` is ``lnet_nid_to_nid4``: the net and the first 32 bits of the address, never the wire
value of a large NID (socklnd's V4 protocol carries the 20-byte ``struct lnet_nid``).

This module owns syntax only; it knows nothing of configured nets.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Final

from nodes.echo import clip
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.inet6 import ntop6, pton6

# LND type numbers are stable ids shared with the wire (spec §1.1).
LOLND: Final = 9
SOCKLND: Final = 2
O2IBLND: Final = 5
GNILND: Final = 13
GNIIPLND: Final = 14
PTL4LND: Final = 15
KFILND: Final = 16
EFALND: Final = 18
BXI3LND: Final = 19

#: name -> (lnd type, address is dotted IPv4?)
LND_NAMES: Final[dict[str, tuple[int, bool]]] = {
    "lo": (LOLND, False),
    "tcp": (SOCKLND, True),
    "o2ib": (O2IBLND, True),
    "gni": (GNILND, False),
    "gip": (GNIIPLND, True),
    "ptlf": (PTL4LND, False),
    "kfi": (KFILND, False),
    "efa": (EFALND, False),
    "bxi3f": (BXI3LND, False),
}
_LND_BY_TYPE: Final = {t: (name, ip) for name, (t, ip) in LND_NAMES.items()}
#: LNDs whose ``netstrfns`` have ``nf_str2addr_size`` (nidstrings.c): they take IPv6 NIDs
LARGE_ADDR_LNDS: Final = frozenset({SOCKLND, O2IBLND, EFALND})
#: ``nid_size`` of a 16-byte address (``sizeof(struct in6_addr) - 4``)
NID_SIZE_IPV6: Final = 12

LNET_NID_ANY: Final = 0xFFFF_FFFF_FFFF_FFFF
#: fault rules store ``*@net`` as this address (spec §1.1)
ADDR_ANY: Final = 0xFFFF_FFFF

_NUM_RE: Final = re.compile(r"^[0-9]+$")


@dataclass(frozen=True, slots=True)
class Net:
    """An LNet network id: lnd type and number (``tcp1`` is Net(SOCKLND, 1))."""

    lnd: int
    num: int = 0
    #: the hash of ``(lnd, num)`` (what the generated ``__hash__`` computed), kept once: nets
    #: key the engine's tables of local nets, looked up a few times per message
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.lnd, self.num)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:  # (the generated one, without two tuples)
        if type(other) is Net:
            return self.lnd == other.lnd and self.num == other.num
        return NotImplemented

    # the ordering ``order=True`` generated (``(lnd, num)``), written out: mypyc's compiled
    # class has the rich comparisons already, which ``dataclass(order=True)`` refuses
    def __lt__(self, other: object) -> bool:
        if type(other) is Net:
            return (self.lnd, self.num) < (other.lnd, other.num)
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if type(other) is Net:
            return (self.lnd, self.num) <= (other.lnd, other.num)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if type(other) is Net:
            return (self.lnd, self.num) > (other.lnd, other.num)
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if type(other) is Net:
            return (self.lnd, self.num) >= (other.lnd, other.num)
        return NotImplemented

    @property
    def net_id(self) -> int:
        return (self.lnd << 16) | self.num

    @classmethod
    def from_id(cls, net_id: int) -> Net:
        return cls(net_id >> 16, net_id & 0xFFFF)

    @classmethod
    def parse(cls, text: str) -> Net:
        """Parse ``tcp``, ``tcp1``, ``o2ib3``, ``lo``; raise LNetConfigError(-EINVAL) otherwise."""
        net = parse_net(text)
        if net is None:
            raise LNetConfigError(-EINVAL, f"Cannot parse net '{clip(text)}'")
        return net

    @property
    def lnd_name(self) -> str:
        entry = _LND_BY_TYPE.get(self.lnd)
        return entry[0] if entry else f"?{self.lnd}?"

    @property
    def ip_addressed(self) -> bool:
        entry = _LND_BY_TYPE.get(self.lnd)
        return bool(entry and entry[1])

    def __str__(self) -> str:
        entry = _LND_BY_TYPE.get(self.lnd)
        if entry is None:
            return f"<{self.lnd}:{self.num}>"
        return entry[0] if self.num == 0 else f"{entry[0]}{self.num}"


LO_NET: Final = Net(LOLND, 0)
LO_KEY: Final = (LOLND, 0)  #: ``NID._net`` of a NID on ``LO_NET``


@dataclass(frozen=True, slots=True)
class NID:
    """A NID: a 4-byte address (``size`` 0, the nid4 form carried by socklnd V3 and
    ``lnet_hdr_nid4``) or a 16-byte IPv6 one (``size`` 12, a large NID)."""

    net: Net = field(compare=False)
    #: ``(net.lnd, net.num)``, kept once: with ``addr`` the fields compared, hashed and
    #: ordered, so NIDs hash and compare as before (the hash of ``(net, addr)``) without a
    #: Python-level ``Net.__hash__``/``__eq__`` per NID (~5 % of a small message's CPU as
    #: dict keys of the engine's hot paths, issue 10/13 profiles)
    _net: tuple[int, int] = field(init=False, repr=False)
    addr: int
    _key: int = field(init=False, repr=False, compare=False)  # nid4, the wire value
    #: the hash of ``(_net, addr)`` (what the generated ``__hash__`` computed, so sets of
    #: NIDs keep their order), kept once: a NID is hashed ~20 times per simulated message
    _hash: int = field(init=False, repr=False, compare=False)
    #: ``str(self)`` once asked (the message trace formats a few NIDs per message): on the
    #: object, so a compiled caller reads an attribute (a dict keyed by ``_key`` boxed it)
    _text: str = field(init=False, repr=False, compare=False)
    #: ``nid_size``: 0 for a 4-byte address, 12 for IPv6 (compared in ``__eq__``)
    size: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        addr, net = self.addr, (self.net.lnd, self.net.num)
        if self.size == 0:  # (the nid4 path first: every NID but a large one)
            if not 0 <= addr <= 0xFFFF_FFFF:
                raise LNetConfigError(-EINVAL, f"NID address out of range: {addr}")
            key, hashed = (self.net.net_id << 32) | addr, hash((net, addr))
        else:  # a key no nid4 has (beyond 64 bits), the hash apart from any nid4's
            if self.size != NID_SIZE_IPV6 or not 0 <= addr < (1 << 128):
                raise LNetConfigError(-EINVAL, f"NID address {addr} of size {self.size} "
                                               "(0 or 12) out of range")
            key, hashed = (1 << 192) | (self.net.net_id << 128) | addr, hash((net, addr, 12))
        object.__setattr__(self, "_net", net)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hashed)
        object.__setattr__(self, "_text", "")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # what the generated one compares, ``(_net, addr)``, without building two tuples (a
        # dict hit with an equal NID of another object calls it: several per message);
        # ``type(other)`` compiles to a read of the type, ``other.__class__`` was a lookup
        if type(other) is NID:
            return self.addr == other.addr and self._net == other._net \
                and self.size == other.size
        return NotImplemented

    # the ordering ``order=True`` generated (``(_net, addr)``), written out: mypyc's compiled
    # class has the rich comparisons already, which ``dataclass(order=True)`` refuses
    def __lt__(self, other: object) -> bool:
        if type(other) is NID:
            return (self._net, self.addr, self.size) < (other._net, other.addr, other.size)
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if type(other) is NID:
            return (self._net, self.addr, self.size) <= (other._net, other.addr, other.size)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if type(other) is NID:
            return (self._net, self.addr, self.size) > (other._net, other.addr, other.size)
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if type(other) is NID:
            return (self._net, self.addr, self.size) >= (other._net, other.addr, other.size)
        return NotImplemented

    @property
    def nid4(self) -> int:
        """The 64-bit wire value; of a large NID, ``lnet_nid_to_nid4``'s (its net and the
        address's first 32 bits)."""
        if self.size:
            return (self.net.net_id << 32) | (self.addr >> 96)
        return self._key  # (kept once, like ``_net``)

    @property
    def is_large(self) -> bool:
        """``LNET_NID_IS_LARGE`` / ``!nid_is_nid4``: a 16-byte address."""
        return self.size != 0

    @classmethod
    def from_nid4(cls, value: int) -> NID:
        return cls(Net.from_id(value >> 32), value & 0xFFFF_FFFF)

    @classmethod
    def parse(cls, text: str) -> NID:
        """Parse a NID string; raise LNetConfigError(-EINVAL) naming the bad string."""
        nid = parse_nid(text)
        if nid is None:
            why = ipv6_problem(text)
            raise LNetConfigError(-EINVAL, f"Cannot parse NID '{clip(text)}'"
                                  + (f": {why}" if why else ""))
        return nid

    @property
    def ip(self) -> str:
        """The address as text: dotted quad, or IPv6 for a large NID (tcp/o2ib)."""
        if self.size:
            return ntop6(self.addr)
        return str(ipaddress.IPv4Address(self.addr))

    @property
    def is_lo(self) -> bool:
        return self.net.lnd == LOLND

    def __str__(self) -> str:
        text = self._text
        if not text:  # (never empty once formatted)
            text = self._format()
            object.__setattr__(self, "_text", text)
        return text

    def _format(self) -> str:
        if self.nid4 == LNET_NID_ANY:
            return "<?>"
        entry = _LND_BY_TYPE.get(self.net.lnd)
        if entry is None:
            words = [(self.addr >> (32 * i)) & 0xFFFF_FFFF for i in range(self.size // 4, -1, -1)]
            return ":".join(f"{w:x}" for w in words) + f"@<{self.net.lnd}:{self.net.num}>"
        addr = self.ip if entry[1] else str(self.addr)
        return f"{addr}@{self.net}"


LO_NID: Final = NID(LO_NET, 0)
_BY_NID4: Final[dict[int, NID]] = {}  # the few NIDs a node hears from, each parsed once


def nid4_cached(value: int) -> NID:
    """``NID.from_nid4``, memoized for the LND's header parsing (NIDs are immutable; the
    cache is bounded against a flood of odd ones)."""
    nid = _BY_NID4.get(value)
    if nid is None:
        if len(_BY_NID4) >= 4096:
            _BY_NID4.clear()
        nid = _BY_NID4[value] = NID.from_nid4(value)
    return nid


def parse_net(text: str) -> Net | None:
    """``libcfs_str2net``: the longest-known LND name prefix, then an optional decimal number."""
    text = text.strip()
    for name, (lnd, _ip) in LND_NAMES.items():
        if not text.startswith(name):
            continue
        rest = text[len(name):]
        if rest == "":
            return Net(lnd, 0)
        if lnd == LOLND or not _NUM_RE.match(rest):
            continue
        num = int(rest)
        if num > 0xFFFF:
            return None
        return Net(lnd, num)
    return None


def _parse_ip(text: str) -> int | None:
    parts = text.split(".")
    if len(parts) != 4 or not all(_NUM_RE.match(p) for p in parts):
        return None
    values = [int(p) for p in parts]
    if any(v > 255 for v in values):
        return None
    return (values[0] << 24) | (values[1] << 16) | (values[2] << 8) | values[3]


def parse_nid(text: str) -> NID | None:
    """``libcfs_str2nid``: ``addr@net``; no ``@`` means ``@tcp``. Returns None when invalid."""
    text = text.strip()
    if "@" in text:
        addr_s, _, net_s = text.partition("@")
        net = parse_net(net_s)
        if net is None:
            return None
    else:
        addr_s, net = text, Net(SOCKLND, 0)
    if net.lnd == LOLND:
        addr = 0  # libcfs_lo_str2addr ignores the address: anything@lo is 0@lo
    elif net.ip_addressed:
        ip = _parse_ip(addr_s)
        if ip is None:
            if ":" in addr_s and net.lnd in LARGE_ADDR_LNDS:
                ip6 = pton6(addr_s)
                return None if ip6 is None else NID(net, ip6, NID_SIZE_IPV6)
            return None
        addr = ip
    elif _NUM_RE.match(addr_s):
        addr = int(addr_s)
        if addr > 0xFFFF_FFFF:
            return None
    else:
        addr = None
    if addr is None:
        return None
    return NID(net, addr)


def ipv6_problem(text: str) -> str:
    """Why an IPv6-looking NID (a ':' in its address) does not parse, in a few words; ""
    when it does not look like one (its error stays lnetctl's "Cannot parse NID")."""
    addr_s, at, net_s = text.strip().partition("@")
    if ":" not in addr_s:
        return ""
    net = parse_net(net_s) if at else Net(SOCKLND, 0)
    if net is None:
        return f"unknown net '{clip(net_s)}'"
    if net.lnd not in LARGE_ADDR_LNDS:
        return f"net {net} takes no IPv6 address (only tcp, o2ib and efa do)"
    if addr_s.startswith("[") or "%" in addr_s:
        return "an IPv6 NID is written without [] and without a %scope"
    return f"'{clip(addr_s)}' is not an IPv6 address"


def nid_from_ip(ip: str, net: Net) -> NID:
    """The NID an IP interface gets on ``net`` (socklnd/o2iblnd use the interface's address:
    IPv4, or IPv6 for a large NID, socklnd.c ``ksocknal_startup``)."""
    addr = _parse_ip(ip)
    if addr is None:
        ip6 = pton6(ip) if ":" in ip and net.lnd in LARGE_ADDR_LNDS else None
        if ip6 is None:
            raise LNetConfigError(-EINVAL, f"bad IP address '{clip(str(ip))}'")
        return NID(net, ip6, NID_SIZE_IPV6)
    return NID(net, addr)
