"""What exploration needs to know of a topology: nodes, rails, pairs, tunables in effect.

Theory of operation: a ``Plan`` (testbed/plan) says which nodes share an LNet net (Multi-Rail
peers: a node whose NIs on that net are several), which reach each other only through a
router (routed peers: no shared net, a route to the other's net), which nodes forward. The
swarm draws fault targets and workload pairs from ``Topo``; the runner writes the topology
with a schedule's tunables in its ``global:`` blocks (``with_tunables``) and reads the values
in effect on every node (``effective``) for the liveness bound.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodes.lnet.nid import Net
from nodes.lnet.tunables import MODULE_PARAMS, TUNABLE_NAMES, Tunables
from testbed.plan import Plan, load_topology
from testbed.plan.source import resolve


@dataclass(frozen=True)
class Topo:
    """The facts of one topology the swarm draws from (all lists in file order)."""

    plan: Plan
    path: Path
    #: how the user named it (a shipped copy's ``testbed explore`` argument), else the path
    shown: str = ""

    @property
    def name(self) -> str:
        return self.shown or str(self.path)

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.plan.nodes]

    def is_router(self, node: str) -> bool:
        return bool(dict(self.plan.node(node).tunables).get("forwarding"))

    @property
    def endpoints(self) -> list[str]:
        """Nodes that are not routers (the workload's sources)."""
        return [n for n in self.nodes if not self.is_router(n)] or self.nodes

    def ifaces(self, node: str) -> list[str]:
        return [i.name for i in self.plan.node(node).interfaces]

    def nets(self, node: str) -> set[Net]:
        return {i.net for i in self.plan.node(node).interfaces}

    def nids(self, node: str) -> list[str]:
        return list(self.plan.node(node).nids)

    def routed_nets(self, node: str) -> set[Net]:
        return {r.net for r in self.plan.node(node).routes}

    def mr_peers(self, node: str) -> list[str]:
        """Other nodes sharing a net with ``node`` (local peers, Multi-Rail when several
        NIs)."""
        mine = self.nets(node)
        return [n for n in self.nodes if n != node and self.nets(n) & mine]

    def routed_peers(self, node: str) -> list[str]:
        """Nodes sharing no net with ``node`` whose nets ``node`` has a route to, with NIDs of
        the same size: a large (IPv6) NID does not survive an IPv4 hop (socklnd V3 keeps
        ``lnet_nid_to_nid4`` of it, nodes/lnd/wire6.py ``v3_view``), so a large endpoint
        and a nid4 one never reach each other through a router in today's LNet."""
        mine, routed = self.nets(node), self.routed_nets(node)
        return [n for n in self.nodes if n != node and not self.nets(n) & mine
                and self.nets(n) & routed and self._large(n) == self._large(node)]

    def _large(self, node: str) -> bool:
        return any(":" in nid.partition("@")[0] for nid in self.nids(node))

    def nids_on(self, node: str, nets: set[Net]) -> list[str]:
        return [i.nid for i in self.plan.node(node).interfaces if i.net in nets]

    def dst_nids(self, node: str, peer: str) -> list[str]:
        """The NIDs ``node`` addresses ``peer`` by: those on a net they share (a local peer,
        Multi-Rail when several), else every NID of a routed peer."""
        return self.nids_on(peer, self.nets(node)) or self.nids(peer)

    def probes(self) -> list[tuple[str, str]]:
        """(node, NID) pairs the liveness phase sends a fresh PUT over: from every endpoint
        to its first local peer and its first routed peer."""
        out: list[tuple[str, str]] = []
        for node in self.endpoints:
            for peers in (self.mr_peers(node), self.routed_peers(node)):
                if peers:
                    out.append((node, self.dst_nids(node, peers[0])[0]))
        return out

    def effective(self, overrides: dict[str, int]) -> dict[str, dict[str, int]]:
        """Per node: LNet's defaults, then the topology's tunables and module parameters,
        then ``overrides`` (what a schedule sets)."""
        out: dict[str, dict[str, int]] = {}
        defaults = Tunables()
        base = {name: getattr(defaults, name) for name in TUNABLE_NAMES}
        for n in self.plan.nodes:
            vals = dict(base)
            vals.update(dict(n.tunables))
            for name, text in n.module_params:
                how, target, _ = MODULE_PARAMS.get(name, ("", "", None))
                if how in ("set", "attr") and str(text).lstrip("-").isdigit():
                    vals[target] = int(text)
            vals.update(overrides)
            out[n.name] = vals
        return out


def load(path: str | Path) -> Topo:
    """Validate ``path`` -- a file or a built-in topology's name, as ``testbed up`` takes it
    (TopologyError on a bad one) -- and wrap it with the file it names."""
    return Topo(load_topology(path), resolve(path))


def with_tunables(topo: Topo, tunables: dict[str, int], out_dir: Path | None = None) -> Path:
    """The topology file with ``tunables`` set in its ``global:`` block (and in each node's
    own ``global:`` that names them, module-parameter spellings ``lnet_X`` replaced): the
    values every node gets at bring-up. Written once per content under ``out_dir`` (default:
    a per-process temporary directory); the topology itself when ``tunables`` is empty."""
    if not tunables:
        return topo.path
    doc: dict[str, Any] = yaml.safe_load(topo.path.read_text())
    blocks = [doc.setdefault("global", {})]
    blocks += [spec["global"] for spec in (doc.get("nodes") or {}).values()
               if isinstance(spec, dict) and isinstance(spec.get("global"), dict)]
    for block in blocks:
        for name, value in tunables.items():
            block.pop(f"lnet_{name}", None)
            if block is blocks[0] or name in block:
                block[name] = value
    doc["name"] = doc.get("name") or topo.path.stem
    text = yaml.safe_dump(doc, sort_keys=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    where = out_dir or _tmp_dir()
    path = where / f"{topo.path.stem}-{digest}.yaml"
    if not path.exists():
        path.write_text(f"# {topo.path.name} with the tunables of an exploration schedule\n"
                        + text)
    return path


def shipped(name: str, text: str) -> Path:
    """The topology a task carries as text (``name``: its file's stem), as a file of this
    process (written once per content): a worker on another machine has no copy of the
    caller's file, and a relative path means another directory there."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = _tmp_dir() / digest / f"{name}.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_text(text)
        tmp.replace(path)
    return path


_TMP: list[tempfile.TemporaryDirectory[str]] = []


def _tmp_dir() -> Path:
    if not _TMP:
        _TMP.append(tempfile.TemporaryDirectory(prefix="lnet-explore-"))
    return Path(_TMP[0].name)
