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
address, ``lnet_nid4_cpt_hash``'s pair sums) modulo the count; ``lnetctl cpt-of-nid`` asks the
same function without an NI (the net's CPTs, else all).
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


def nid_cpt_hash(nid: NID, number: int) -> int:
    """``lnet_nid_cpt_hash`` of a 4-byte NID: its 8 bytes summed, modulo ``number``."""
    if number <= 1:
        return 0
    key = nid.nid4
    return sum((key >> s) & 0xFF for s in range(0, 64, 8)) % number


def cpt_of_nid(nid: NID, cpts: tuple[int, ...]) -> int:
    """``lnet_cpt_of_nid_locked`` given the CPTs of the NI (or net) in question."""
    return cpts[nid_cpt_hash(nid, len(cpts))]


def tq_credits(credits: int, peer_credits: int, ncpts: int) -> int:
    """``lnet_ni_tq_credits``: the TX credits of each of an NI's CPT queues."""
    if ncpts <= 1:
        return credits
    return min(max(credits // ncpts, 8 * peer_credits), credits)


__all__ = ["CPT_PARAMS", "MAX_CPTS", "CptTable", "cpt_of_nid", "nid_cpt_hash", "table",
           "tq_credits"]
