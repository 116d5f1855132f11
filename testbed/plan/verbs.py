"""The lnetctl verbs that configure one node of a plan (contract B of the orchestrator).

One list for every backend, so the Mininet supervisor and the simulator configure a node
identically, in two phases, as a real cluster comes up (``testbed/bringup.py`` runs phase 1 on
every node before phase 2 on any): ``local_verbs`` (``lnet configure``, one ``net add`` per
interface, the tunables) bring every NI and acceptor up; ``remote_verbs`` then name other
nodes: static peers (``--non_mr`` for a ``multi_rail: false`` node, as an admin adds a
downrev peer), routes, UDSP rules, and last a raw ``lnet:`` block imported from a file (spec
§9.4). A route added before its gateway's acceptor listens gets a first router-checker ping
refused, and the next check comes ``alive_router_check_interval`` (60 s) later.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.plan.model import NodePlan, Plan


def local_verbs(node: NodePlan) -> list[list[str]]:
    """Phase 1, what a node does on its own: ``lnet configure`` (``set multi_rail 0`` first on
    a downrev node), one ``net add`` per interface (its NIs and acceptors come up), the
    tunables (``set``; forwarding and router buffers included)."""
    verbs: list[list[str]] = [["lnet", "configure"]]
    if not node.multi_rail:  # downrev node: testbed-only verb, before any NI (bck-025)
        verbs.insert(0, ["set", "multi_rail", "0"])
    verbs += [["net", "add", "--net", i.net, "--if", i.name]
              + ([] if i.numa is None else ["--numa", str(i.numa)])  # testbed extension
              for i in node.interfaces]
    verbs += [["set", key, str(value)] for key, value in node.tunables]
    return verbs


def remote_verbs(plan: Plan, node: NodePlan, lnet_dir: Path) -> list[list[str]]:
    """Phase 2, what names other nodes: static peers, routes, UDSP rules, and last the raw
    ``lnet:`` block, written into ``lnet_dir`` and imported (the daemon reads the file, as
    lnetctl import reads one; spec §9.4)."""
    verbs: list[list[str]] = []
    for peer_name in node.peers:
        peer = plan.node(peer_name)
        verb = ["peer", "add", "--prim_nid", peer.nids[0]]
        if len(peer.nids) > 1:
            verb += ["--nid", ",".join(peer.nids[1:])]
        if not peer.multi_rail:  # lnet_add_peer_ni keeps a configured MR peer MR (bck-025)
            verb.append("--non_mr")
        verbs.append(verb)
    verbs += [p.argv() for p in node.static_peers]          # long-form peers (cfg-070)
    verbs += [r.argv() for r in node.routes]                # route add (spec §6.1)
    verbs += [list(rule) for rule in node.udsp]              # udsp add, in order (spec §7)
    if node.lnet is not None:                                # raw export block (spec §9.4)
        path = lnet_dir / f"{node.name}.lnet.yaml"
        path.write_text(yaml.safe_dump(node.lnet, sort_keys=False))
        verbs.append(["import", str(path)])
    return verbs


def config_verbs(plan: Plan, node: NodePlan, lnet_dir: Path) -> list[list[str]]:
    """Both phases of one node, in order (a node configured alone, e.g. after a restart)."""
    return local_verbs(node) + remote_verbs(plan, node, lnet_dir)


def awaited_routes(plan: Plan) -> dict[str, list[tuple[str, str, str]]]:
    """The routes bring-up waits for: node -> [(net, gateway NID, gateway node)], those whose
    gateway is a node of this testbed that forwards (``routing: true``). A route through a
    NID no node has, or through a node that does not forward, can never come up."""
    owner = {nid: n for n in plan.nodes for nid in n.nids}
    out: dict[str, list[tuple[str, str, str]]] = {}
    for node in plan.nodes:
        for r in node.routes:
            gw = owner.get(r.gateway)
            if gw is not None and dict(gw.tunables).get("forwarding"):
                out.setdefault(node.name, []).append((r.net, r.gateway, gw.name))
    return out
