"""CPU partitions of a node (libcfs lnet/lnet/lib-cpt.c) and which one a NID maps to
(api-ni.c ``lnet_nid_cpt_hash``, ``lnet_cpt_of_nid_locked``, ``lnet_ni_tq_credits``).

Theory of operation: a node's CPT table comes from libcfs's module parameters, given before
LNet is configured (the topology's ``global:``, the daemon's ``--lnet-param``):
``libcfs.cpu_npartitions=N`` makes N partitions (0: one here, an emulated node's whole CPU;
real libcfs estimates from the cores), ``libcfs.cpu_pattern`` lists them, which wins when
given: ``"0[0,1] 1[2,3]"`` (partition[CPUs]), or with a leading ``N`` the brackets name NUMA
nodes (``"N 0[0] 1[1]"``). An emulated CPU list is what the table prints
(``cpu_partition_table``); NUMA distance between two partitions is Linux's default SLIT, 10 on
one node and 20 across (``cpu_partition_distance``).

Each NI spans every CPT (``ni_cpts`` NULL, ``CPT: "[0,1]"``) unless ``net add --cpt`` names
some. Its TX credits are split in one queue per CPT (``ni_tx_queues``), each
``lnet_ni_tq_credits``: ``credits / ncpts``, at least 8 x ``peer_credits``, at most
``credits``. A message takes its NI credit from the queue of ``lnet_cpt_of_nid(peer NI, NI)``:
``ni_cpts[hash(nid, ncpts)]``, the hash of a 4-byte NID being the sum of its 8 bytes (net and
address, ``lnet_nid4_cpt_hash``'s pair sums) modulo the count, of a large (IPv6) NID the
kernel's ``hash_32`` chained over its four address words and then its net
(``lnet_nid_cpt_hash``'s large branch); ``lnetctl cpt-of-nid`` asks the same function without
an NI (the net's CPTs, else all). A peer lives in the peer table of the CPT its first NID
hashes to (``lnet_peer_alloc``: ``lp_cpt``), and whatever walks the tables (``peer show``,
``lnet_get_peer_list``, ``lnet_push_update_to_peers``) goes CPT by CPT (``PeerTable.walk``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.nid import NID

#: LNET_CPT_MAX_BITS 8: at most 256 partitions
MAX_CPTS = 256
#: Linux's default NUMA distances (``node_distance``: LOCAL_DISTANCE, REMOTE_DISTANCE)
LOCAL_DISTANCE, REMOTE_DISTANCE = 10, 20
#: the libcfs module parameters a topology or ``--lnet-param`` may give
CPT_PARAMS = ("libcfs.cpu_npartitions", "libcfs.cpu_pattern")
_GROUP = re.compile(r"\s*(\d+)\s*\[([0-9,\s-]*)\]")


@dataclass(frozen=True, slots=True)
class CptTable:
    """A node's CPU partitions: each one's CPUs and NUMA nodes."""

    cpus: tuple[tuple[int, ...], ...] = ((0,),)
    nodes: tuple[tuple[int, ...], ...] = ((0,),)

    @property
    def ncpts(self) -> int:
        return len(self.cpus)

    def distance(self, a: int, b: int) -> int:
        """``cpt_distance``: the largest node distance between the two partitions."""
        return max(LOCAL_DISTANCE if x == y else REMOTE_DISTANCE
                   for x in self.nodes[a] for y in self.nodes[b])

    def table_text(self) -> str:
        """``cfs_cpt_table_print``: ``CPT\\t: CPU CPU ...`` per partition."""
        return "".join(f"{i}\t:" + "".join(f" {c}" for c in cpus) + "\n"
                       for i, cpus in enumerate(self.cpus))

    def distance_text(self) -> str:
        """``cfs_cpt_distance_print``: ``CPT\\t: CPT:DIST ...`` per partition."""
        n = self.ncpts
        return "".join(f"{i}\t:" + "".join(f" {j}:{self.distance(i, j)}" for j in range(n))
                       + "\n" for i in range(n))


def _numbers(text: str, what: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or len(part) > 8:
            raise LNetConfigError(-EINVAL, f"libcfs.cpu_pattern: bad {what} list '{text}'")
        out += range(int(lo), int(hi if dash else lo) + 1)
        if len(out) > 4096:
            raise LNetConfigError(-EINVAL, f"libcfs.cpu_pattern: {what} list too long")
    return tuple(sorted(set(out)))


def table(npartitions: int, pattern: str) -> CptTable:
    """The table libcfs builds (``cfs_cpu_init``): from ``pattern`` when not empty
    (``cfs_cpt_table_create_pattern``), else ``npartitions`` one-CPU partitions on NUMA node
    0. Raises LNetConfigError naming the parameter."""
    text = pattern.strip()
    if not text:
        if not 0 <= npartitions <= MAX_CPTS:
            raise LNetConfigError(-EINVAL, f"libcfs.cpu_npartitions must be in 0..{MAX_CPTS}, "
                                           f"got {npartitions}")
        n = max(1, npartitions)
        return CptTable(tuple((i,) for i in range(n)), tuple((0,) for _ in range(n)))
    numa = text[:1] in ("N", "n")
    body = text[1:] if numa else text
    cpus: list[tuple[int, ...]] = []
    nodes: list[tuple[int, ...]] = []
    at = 0
    while body[at:].strip():
        m = _GROUP.match(body, at)
        if m is None or int(m.group(1)) != len(cpus) or len(cpus) >= MAX_CPTS:
            raise LNetConfigError(-EINVAL, f"libcfs.cpu_pattern: invalid pattern '{pattern}' "
                                           f"(want 'P[list] ...' with P = 0, 1, ...)")
        listed = _numbers(m.group(2), "NUMA node" if numa else "CPU")
        if not listed:
            raise LNetConfigError(-EINVAL, f"libcfs.cpu_pattern: partition {len(cpus)} empty")
        cpus.append((len(cpus),) if numa else listed)
        nodes.append(listed if numa else (0,))
        at = m.end()
    return CptTable(tuple(cpus), tuple(nodes))


#: include/linux/hash.h ``GOLDEN_RATIO_32``: ``hash_32`` multiplies by it (32-bit wrap)
GOLDEN_RATIO_32 = 0x61C88647
_U32 = 0xFFFF_FFFF


def hash_32(value: int, bits: int) -> int:
    """Linux ``hash_32``: the value times GOLDEN_RATIO_32 in 32 bits, its top ``bits``."""
    return ((value * GOLDEN_RATIO_32) & _U32) >> (32 - bits)


def nid_cpt_hash(nid: NID, number: int, total: int = 0) -> int:
    """``lnet_nid_cpt_hash``: of a 4-byte NID its 8 bytes summed, modulo ``number``; of a
    large one ``hash_32`` chained over the four address words (each ``__be32`` as an x86
    kernel reads it: little-endian) and then the net, cut to ``LNET_CPT_BITS`` (the bits
    that count the node's ``total`` CPTs; 0: ``number``), folded into ``number``."""
    if number <= 1:
        return 0
    if not nid.is_large:
        key = nid.nid4
        return sum((key >> s) & 0xFF for s in range(0, 64, 8)) % number
    raw, h = nid.addr.to_bytes(16, "big"), 0
    for i in range(0, 16, 4):
        h = hash_32(int.from_bytes(raw[i:i + 4], "little") ^ h, 32)
    val = hash_32(nid.net.net_id ^ h, (max(total, number) - 1).bit_length())
    return val if val < number else ((h + val + (val >> 1)) & _U32) % number


def cpt_of_nid(nid: NID, cpts: tuple[int, ...], total: int = 0) -> int:
    """``lnet_cpt_of_nid_locked`` given the CPTs of the NI (or net) in question; ``total``:
    the node's CPT count where it differs from ``len(cpts)`` (an NI on some CPTs only: the
    large-NID hash takes its bit count from the node's, ``nid_cpt_hash``)."""
    return cpts[nid_cpt_hash(nid, len(cpts), total)]


def tq_credits(credits: int, peer_credits: int, ncpts: int) -> int:
    """``lnet_ni_tq_credits``: the TX credits of each of an NI's CPT queues."""
    if ncpts <= 1:
        return credits
    return min(max(credits // ncpts, 8 * peer_credits), credits)


__all__ = ["CPT_PARAMS", "GOLDEN_RATIO_32", "MAX_CPTS", "CptTable", "cpt_of_nid", "hash_32",
           "nid_cpt_hash", "table", "tq_credits"]
