"""The lnetctl verbs that configure one node of a plan (contract B of the orchestrator).

One list for both backends, so the Mininet supervisor and the simulator configure a node
identically: ``lnet configure``, one ``net add`` per interface, the tunables, static peers
(``--non_mr`` for a ``multi_rail: false`` node, as an admin adds a downrev peer), routes, UDSP
rules, and last a raw ``lnet:`` block imported from a file (spec §9.4).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.plan.model import NodePlan, Plan


def config_verbs(plan: Plan, node: NodePlan, lnet_dir: Path) -> list[list[str]]:
    """The argv lists to run, in order; writes the node's raw ``lnet:`` block into
    ``lnet_dir`` when it has one (the daemon reads it, as lnetctl import reads a file)."""
    verbs: list[list[str]] = [["lnet", "configure"]]
    if not node.multi_rail:  # downrev node: testbed-only verb, before any NI (bck-025)
        verbs.insert(0, ["set", "multi_rail", "0"])
    verbs += [["net", "add", "--net", i.net, "--if", i.name]
              + ([] if i.numa is None else ["--numa", str(i.numa)])  # testbed extension
              for i in node.interfaces]
    verbs += [["set", key, str(value)] for key, value in node.tunables]
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
