"""The host agent's fault verbs: a fault's resources made on the host where its node's packets are.

Theory of operation (issue 32 item 1): the same path as on Mininet, run on the guest or host
that holds the node's namespace. The orchestrator sends the fault spec as recorded
(``FaultSpec.as_dict``), the activation (id, number, seed, NFQUEUE number) and every node's
interfaces, addresses and NIDs; :func:`apply` builds a :class:`faults.realise.Site` of this
host (each local node's namespace entered through its daemon's pid, or any process left in
it; on a machine each interface's bridge-side veth), asks ``faults.realise.resources_for``
what the activation is, keeps the resources of the nodes that live here (a partition spans
hosts: each host makes its own side), and makes each with ``faults.netops.create`` *after*
recording it under ``faults.<id>`` in the host's ``state.json`` (STYLE rule 9). So the
interposer (NFQUEUE + scapy) runs inside the guest, in the node's namespace, as on Mininet;
tc runs on the node's egress there, or on the bridge-side veth of a machine for ingress.
:func:`revert` undoes a fault's records newest first and returns its interposers' counters;
:func:`counters` reads them fresh (``fault list``); :func:`undo_all` is ``teardown``'s (and so
``testbed down``'s and ``clean``'s) first step. Ingress bandwidth on a *guest* is not here: its
bridge side is the guest's host-side NIC on the orchestrator's machine
(``testbed/vagrant/faults.py``).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from faults import netops
from faults.realise import Activation, NodeSite, Site, resources_for
from faults.resources import READY_ENV
from faults.spec import FaultError, parse_fault

#: Seconds an interposer gets to bind its queue here: a QEMU TCG guest under a load average
#: of 20 took 1,123 s to come up and more than the 10 s of Mininet to start one (issue 32)
READY_TIMEOUT = 120.0

#: integer counters of an interposer that are no counts (``read_counters``)
_NOT_COUNTS = ("pid",)


def _ns_pid(st: Any, node: str) -> int:
    """A process in ``node``'s namespace: its daemon, else any (``ip netns pids``); 0 when
    nothing runs there (the namespace cannot be entered by pid: ``apply`` says so)."""
    pid = st.data.get("daemons", {}).get(node, {}).get("pid")
    if isinstance(pid, int) and os.path.exists(f"/proc/{pid}/ns/net"):
        return pid
    out = subprocess.run(["ip", "netns", "pids", st.data["nodes"][node]["netns"]],
                         capture_output=True, text=True, check=False, timeout=15).stdout.split()
    return int(out[0]) if out else 0


def _ports(st: Any, node: str) -> dict[str, str]:
    """Interface -> its bridge-side veth (machines; a guest's NICs have none here)."""
    return {str(c["iface"]): str(c["name"]) for c in st.data.get("created", [])
            if c.get("kind") == "veth" and c.get("node") == node}


def site(st: Any, nodes: dict[str, Any]) -> Site:
    """The testbed as this host sees it: namespaces of its own nodes, the rest by address."""
    local = st.data.get("nodes", {})
    out = {}
    for name, n in nodes.items():
        here = name in local
        daemon = st.data.get("daemons", {}).get(name, {}).get("pid") if here else None
        out[name] = NodeSite(name=name, ns_pid=_ns_pid(st, name) if here else 0,
                             interfaces=tuple(n["interfaces"]), ips=tuple(n["ips"]),
                             nids=tuple(n["nids"]), ports=_ports(st, name) if here else {},
                             daemon_pid=daemon)
    return Site(nodes=out, fault_dir=str(st.dir / "faults"))


def _env(st: Any) -> dict[str, str]:
    spec = st.data.get("spec", {})
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(spec.get("pythonpath")),
            "LNET_TESTBED": str(spec.get("testbed", "")), READY_ENV: str(READY_TIMEOUT)}


def apply(st: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Make activation ``body['k']`` of fault ``body['fid']`` on this host's nodes.

    A resource that fails leaves the ones made before it recorded: the orchestrator reverts.
    """
    nodes = body["nodes"]
    spec = parse_fault(body["spec"], nodes={n: list(v["interfaces"]) for n, v in nodes.items()})
    act = Activation(str(body["fid"]), int(body["k"]), int(body["seed"]), int(body["queue"]))
    here = set(st.data.get("nodes", {}))
    made = [r for r in resources_for(spec, site(st, nodes), act) if r.node in here]
    for res in made:
        if getattr(res, "ns_pid", None) == 0:
            ns = st.data["nodes"][res.node]["netns"]
            return {"ok": False, "error": f"node {res.node}: no process left in its "
                                          f"namespace {ns} to enter"}
    (st.dir / "faults").mkdir(exist_ok=True, mode=0o700)
    records = st.data.setdefault("faults", {}).setdefault(act.fid, [])
    for res in made:
        rec = res.to_dict()
        records.append(rec)
        st.save()  # recorded before it is made
        try:
            netops.create(rec, _env(st))
        except netops.FaultApplyError as exc:
            st.save()
            return {"ok": False, "error": f"{res.type} on {res.node}: {exc}"}
        st.save()  # with the interposer's pid
    return {"ok": True, "made": [r["type"] for r in records]}


def _counts(rec: dict[str, Any], fresh: bool) -> dict[str, int]:
    if rec.get("type") != "interposer":
        return {}
    return {k: v for k, v in netops.read_counters(rec["counters"], fresh=fresh).items()
            if isinstance(v, int) and not isinstance(v, bool) and k not in _NOT_COUNTS}


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def revert(st: Any, fid: str) -> dict[str, Any]:
    """Undo fault ``fid``'s records here, newest first; its interposers' final counters."""
    records = st.data.get("faults", {}).get(fid, [])
    counters: dict[str, int] = {}
    problems = []
    for rec in reversed(records):
        problem = netops.undo(rec)
        if problem:
            problems.append(problem)
        _add(counters, _counts(rec, fresh=False))
    st.data.get("faults", {}).pop(fid, None)
    st.save()
    return {"ok": True, "counters": counters, "problems": problems}


def counters(st: Any) -> dict[str, Any]:
    """Every applied fault's interposer counters, current when read."""
    out: dict[str, dict[str, int]] = {}
    for fid, records in st.data.get("faults", {}).items():
        total: dict[str, int] = {}
        for rec in records:
            _add(total, _counts(rec, fresh=True))
        out[fid] = total
    return {"ok": True, "counters": out}


def undo_all(st: Any) -> list[str]:
    """Every fault resource still recorded here, undone (teardown); what went."""
    removed = []
    for fid in list(st.data.get("faults", {})):
        for rec in reversed(st.data["faults"][fid]):
            netops.undo(rec)
            removed.append(f"fault {fid}: {rec.get('type')} on {rec.get('node')}")
        st.data["faults"].pop(fid)
        st.save()
    return removed


def main_verb(st: Any, verb: str, fid: str | None, body: dict[str, Any] | None) -> dict[str, Any]:
    """``fault-apply`` (body on stdin), ``fault-revert --fault ID``, ``fault-counters``."""
    try:
        if verb == "fault-apply":
            return apply(st, body or {})
        if verb == "fault-revert":
            return revert(st, str(fid))
        return counters(st)
    except FaultError as exc:
        return {"ok": False, "error": str(exc)}
