"""The typed DLC commands that configure one node of a plan (contract B of the orchestrator).

Theory of operation (issue 12 item 4): a node's configuration is a list of steps, each a typed
DLC command (``nodes/dlc/commands.py``: ``LnetConfigure``, ``NetAdd``, ``SetTunable``,
``PeerAdd``, ``RouteAdd``, ``UdspAdd``) or, for a raw ``lnet:`` block, an :class:`ImportFile`.
A daemon's backend sends each as the control-socket request :func:`request` builds -- a typed
command as fields (``{"cmd": "dlc", "verb": ..., <field>: ...}``: its nets and NIDs written as
text here, the process edge, and parsed back once by the daemon), never as argv the daemon
parses again; the simulator hands the typed command to the front end in-process as it is;
``step.argv()`` renders the lnetctl words for logs, errors, export and tests
(``config_verbs``). One list for every backend, so the Mininet supervisor and the simulator
configure a node identically, in two phases, as a real cluster comes up
(``testbed/bringup.py`` runs phase 1 on every node before phase 2 on any): ``local_steps``
(``lnet configure``, one ``net add`` per interface, the tunables) bring every NI and acceptor
up; ``remote_steps`` then name other nodes: static peers (``non_mr`` for a ``multi_rail:
false`` node, as an admin adds a downrev peer), routes, UDSP rules, and last a raw ``lnet:``
block imported from a file (spec §9.4). A route added before its gateway's acceptor listens
gets a first router-checker ping refused, and the next check comes
``alive_router_check_interval`` (60 s) later.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodes.dlc import commands as C
from nodes.lnet.tunables import STRING_MODULE_PARAMS
from testbed.plan.model import IfacePlan, NodePlan, Plan


@dataclass(frozen=True, slots=True)
class ImportFile:
    """``lnetctl import FILE``: the node's daemon reads the file, as lnetctl import reads one
    (a whole document, checked before anything is applied: not one typed command)."""

    path: str

    def argv(self) -> list[str]:
        return ["import", self.path]


Step = C.Command | ImportFile


def request(step: Step) -> dict[str, Any]:
    """The control-socket request that carries ``step`` out on a node daemon."""
    if isinstance(step, ImportFile):
        return {"cmd": "lnetctl", "argv": step.argv()}
    return {"cmd": "dlc", "verb": step.verb, **step.fields()}


def local_steps(node: NodePlan) -> list[Step]:
    """Phase 1, what a node does on its own: ``lnet configure`` (``set multi_rail 0`` first on
    a downrev node), one ``net add`` per interface (its NIs and acceptors come up), the
    tunables (``set``; forwarding and router buffers included). A node given ``networks=``,
    ``ip2nets=`` or ``routes=`` (``options lnet ...``) is configured from its module
    parameters, as at a real module load with them: ``lnet configure --all`` makes the NIs
    and routes they name (``LNetNIInit``; nodes/dlc/modparams.py), and no ``net add``. A node
    on an IPv6-only network starts LNet with large NIDs, as sanity-lnet does on an IPv6-only
    host (FORCE_LARGE_NID: ``lnet configure --all --large``)."""
    from_params = any(name in STRING_MODULE_PARAMS for name, _ in node.module_params)
    steps: list[Step] = [C.LnetConfigure(all=from_params,
                                         large=not all(i.ipv4 for i in node.interfaces))]
    if not node.multi_rail:  # downrev node: testbed-only verb, before any NI (bck-025)
        steps.insert(0, C.SetTunable(name="multi_rail", value=0))
    if not from_params:
        steps += [net_add(i) for i in node.interfaces]
    steps += [C.SetTunable(name=key, value=value) for key, value in node.tunables]
    return steps


def net_add(i: IfacePlan) -> C.NetAdd:
    """One interface's ``net add``, with its network's ``tunables:``/``lnd tunables:`` (an
    o2ib net's own keys as ``lnd_tunables``; ``numa``: testbed only)."""
    lnd = dict(i.lnd_tunables)
    kw: dict[str, Any] = dict(i.tunables)
    kw.update({k: lnd.pop(k) for k in ("conns_per_peer", "tos") if k in lnd})
    return C.NetAdd(net=i.net, interfaces=(i.name,), numa=i.numa, **kw,
                    lnd_tunables=tuple(f"{k}={v}" for k, v in lnd.items()))


def remote_steps(plan: Plan, node: NodePlan, lnet_dir: Path) -> list[Step]:
    """Phase 2, what names other nodes: static peers, routes, UDSP rules, and last the raw
    ``lnet:`` block, written into ``lnet_dir`` and imported (the daemon reads the file, as
    lnetctl import reads one; spec §9.4)."""
    steps: list[Step] = []
    for peer_name in node.peers:
        peer = plan.node(peer_name)
        # lnet_add_peer_ni keeps a configured MR peer MR, so a downrev one is --non_mr (bck-025)
        nids = peer.nid_values
        steps.append(C.PeerAdd(prim_nid=nids[0], nids=nids[1:],
                               non_mr=not peer.multi_rail))
    steps += [p.command() for p in node.static_peers]       # long-form peers (cfg-070)
    steps += [r.command() for r in node.routes]             # route add (spec §6.1)
    steps += list(node.udsp_rules)                           # udsp add, in order (spec §7)
    if node.lnet is not None:                                # raw export block (spec §9.4)
        path = lnet_dir / f"{node.name}.lnet.yaml"
        path.write_text(yaml.safe_dump(node.lnet, sort_keys=False))
        steps.append(ImportFile(str(path)))
    return steps


def config_steps(plan: Plan, node: NodePlan, lnet_dir: Path) -> list[Step]:
    """Both phases of one node, in order (a node configured alone, e.g. after a restart)."""
    return local_steps(node) + remote_steps(plan, node, lnet_dir)


def config_verbs(plan: Plan, node: NodePlan, lnet_dir: Path) -> list[list[str]]:
    """``config_steps`` rendered as lnetctl argv (logs, export, tests; never sent)."""
    return [step.argv() for step in config_steps(plan, node, lnet_dir)]


def awaited_routes(plan: Plan) -> dict[str, list[tuple[str, str, str]]]:
    """The routes bring-up waits for: node -> [(net, gateway NID, gateway node)], those whose
    gateway is a node of this testbed that forwards (``routing: true``). A route through a
    NID no node has, or through a node that does not forward, can never come up."""
    owner = {nid: n for n in plan.nodes for nid in n.nid_values}
    out: dict[str, list[tuple[str, str, str]]] = {}
    for node in plan.nodes:
        for r in node.routes:
            gw = owner.get(r.gateway)
            if gw is not None and dict(gw.tunables).get("forwarding"):
                out.setdefault(node.name, []).append((str(r.net), str(r.gateway), gw.name))
    return out
