"""The supervisor's fault manager: add/list/del/clear faults, schedule them, log them, undo them.

Theory of operation: one :class:`FaultManager` lives in each testbed's supervisor process
(``testbed/mininet/supervisor.py``), which owns the faults of its testbed. Requests arrive as ctl
verbs (``fault_add``, ``fault_list``, ``fault_del``, ``fault_clear``) from the CLI and the
Python API, or from the topology's ``faults:`` list at bring-up. Each fault gets an id
(``f1``, ``f2``...), a seed (given, or drawn and recorded), and a
:class:`faults.sched.Timeline`; the supervisor's loop calls :meth:`tick` with the time and
sleeps until :meth:`next_deadline`.

Applying an activation turns the spec into typed resources (``faults.realise``, pure); each
one's record is appended to ``state.json`` under ``faults.<id>.resources`` *before*
``faults.netops.create`` makes it from that record (STYLE rule 9), and undone in reverse
order on revert, delete, ``down`` and ``clean``. Events (events.jsonl):
``fault_added`` (spec, seed), ``fault_applied`` (activation, parameters, seed),
``fault_reverted`` (activation, per-rule counters from the interposer), ``fault_deleted``.
Per-packet randomness is seeded ``seed + activation`` so a recorded schedule replays.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from faults import netops
from faults.ibspec import IB, ib_nid
from faults.resources import Resource
from faults.spec import FaultError, parse_fault
from nodes.daemon.client import DaemonUnreachable, request
from testbed import modload, runstate
from testbed.base import TestbedError
from testbed.faultbook import FaultBook
from testbed.faultbook import FaultRecord as _Fault
from testbed.faultbook import never_raise as _never_raise
from testbed.mininet import daemons
from testbed.mininet.faultres import FaultResources
from testbed.mininet.netbuild import BringUpError
from testbed.plan import NodePlan

#: the IB kinds the node daemon's o2iblnd applies (port-down is the ib* link: faults/realise.py)
LND_IB = IB - {"port-down"}
#: Seconds a restarted daemon gets to answer ``hello``.
RESTART_TIMEOUT = 30.0


class FaultManager(FaultResources):
    """Faults of one testbed; ``sup`` is its :class:`testbed.mininet.supervisor.Supervisor`."""

    def __init__(self, sup: Any) -> None:
        self.sup = sup
        #: the faults and their schedule; this class applies and undoes their resources
        self.book = FaultBook(self._apply, self._revert, self._failed)
        self.faults = self.book.faults
        self.next_queue = 1
        self.fdir = sup.rdir / "faults"
        sup.state.setdefault("faults", {})

    # -- requests -----------------------------------------------------------------------------

    def _nodes(self) -> dict[str, list[str]]:
        return {n.name: [i.name for i in n.interfaces] for n in self.sup.plan.nodes}

    @_never_raise
    def add(self, raw: Any, now: float | None = None) -> dict[str, Any]:
        """``fault_add``: validate, record, and apply at once if due."""
        try:
            spec = parse_fault(raw, nodes=self._nodes())
            ib_nid(spec, self.sup.plan)  # an IB kind only on an o2ib NI (faults/ibspec.py)
        except FaultError as exc:
            return {"ok": False, "error": str(exc)}
        now = time.time() if now is None else now
        fault = self.book.create(spec, now)
        if isinstance(fault, str):
            return {"ok": False, "error": fault}
        fid, seed = fault.fid, fault.seed
        self.sup.state["faults"][fid] = {"spec": spec.as_dict(), "seed": seed, "added": now,
                                         "resources": []}
        self.sup.save()
        runstate.append_event(self.sup.rdir, "fault_added", id=fid, spec=spec.as_dict(),
                              seed=seed)
        self.tick(now)
        if fault.error:
            self._forget(fault)
            return {"ok": False, "error": f"{fid} ({spec.kind}): {fault.error}"}
        return {"ok": True, "fault": self.describe(fault)}

    def describe(self, f: _Fault) -> dict[str, Any]:
        counters = dict(f.totals)
        for res in f.resources:
            if res["type"] == "interposer":
                live = netops.read_counters(res["counters"], fresh=True)
                for k, v in live.items():
                    if isinstance(v, int) and not isinstance(v, bool) and k != "pid":
                        counters[k] = counters.get(k, 0) + v
        return {"id": f.fid, "kind": f.spec.kind, "name": f.spec.name, "seed": f.seed,
                "state": f.state, "activations": f.activations, "spec": f.spec.as_dict(),
                "next": f.timeline.next_deadline(), "counters": counters,
                "error": f.error}

    @_never_raise
    def list(self, residue: bool = False) -> dict[str, Any]:
        reply: dict[str, Any] = {"ok": True,
                                 "faults": [self.describe(f) for f in self.faults.values()]}
        if residue:
            reply["residue"] = self.residue()
        return reply

    @_never_raise
    def delete(self, key: Any) -> dict[str, Any]:
        f = self.book.withdraw(str(key))
        if isinstance(f, str):
            return {"ok": False, "error": f}
        final = self.describe(f)
        self._forget(f)
        runstate.append_event(self.sup.rdir, "fault_deleted", id=f.fid,
                              counters=f.totals)
        final["counters"] = dict(f.totals)
        return {"ok": True, "fault": final}

    @_never_raise
    def clear(self) -> dict[str, Any]:
        gone = [self.delete(fid)["fault"] for fid in list(self.faults)]
        return {"ok": True, "faults": gone}

    def _forget(self, f: _Fault) -> None:
        self.faults.pop(f.fid, None)
        self.sup.state["faults"].pop(f.fid, None)
        self.sup.save()

    def shutdown(self) -> None:
        """Teardown: revert every active fault (never raises)."""
        for f in list(self.faults.values()):
            try:
                if f.timeline.active:
                    self._revert(f, f.timeline.index)
            except Exception as exc:  # teardown must go on
                print(f"fault {f.fid}: revert failed: {exc}", flush=True)

    # -- scheduling ---------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        return self.book.next_deadline()

    def tick(self, now: float | None = None) -> None:
        """Due transitions (``FaultBook.tick``); a failed one's resources are undone."""
        self.book.tick(time.time() if now is None else now)

    # -- apply / revert -----------------------------------------------------------------------

    def _apply(self, f: _Fault, k: int) -> None:
        """Apply activation ``k``. ``fault_applied`` is logged before the first effect, so
        every event the fault causes (the supervisor's ``link_down``, a daemon's NI going
        down, its death) comes after it in the log and in time (issue 27 item 13: it was
        logged 3-60 ms after them); an activation that fails is logged ``fault_reverted``
        (with the error) and ``fault_failed``, closing what it opened."""
        f.activations += 1
        runstate.append_event(self.sup.rdir, "fault_applied", id=f.fid, activation=k,
                              fault_kind=f.spec.kind, spec=f.spec.as_dict(), seed=f.seed)
        try:
            if f.spec.kind in ("kill", "restart"):
                self._process(f, k)
            elif f.spec.kind in LND_IB:
                self._ib(f, True)
            else:
                for res in self._resources(f, k):
                    self._create(f, res)
        except (netops.FaultApplyError, OSError, FaultError, DaemonUnreachable) as exc:
            f.error = str(exc)
            counters = self._undo_all(f)
            runstate.append_event(self.sup.rdir, "fault_reverted", id=f.fid, activation=k,
                                  fault_kind=f.spec.kind, counters=counters, seed=f.seed,
                                  error=f.error)
            runstate.append_event(self.sup.rdir, "fault_failed", id=f.fid, error=f.error)

    def _revert(self, f: _Fault, k: int) -> None:
        counters = self._undo_all(f)
        if f.spec.kind == "kill" and f.spec.duration is not None:
            self._restart(f.spec.node or "")
        elif f.spec.kind in LND_IB and f.spec.node in self.sup.daemons \
                and self.sup.daemons[f.spec.node].poll() is None:
            self._ib(f, False)
        for key, v in counters.items():
            f.totals[key] = f.totals.get(key, 0) + v
        runstate.append_event(self.sup.rdir, "fault_reverted", id=f.fid, activation=k,
                              fault_kind=f.spec.kind, counters=counters, seed=f.seed)

    def _failed(self, f: _Fault) -> None:
        """A transition raised (``FaultBook.tick``): what the fault made is undone."""
        self._undo_all(f)

    def _create(self, f: _Fault, res: Resource) -> None:
        record = res.to_dict()
        f.resources.append(record)
        self.sup.state["faults"][f.fid]["resources"] = f.resources
        self.sup.save()  # recorded before it is made
        netops.make(res, record, self.sup.env)  # (typed: no record -> resource here)
        self.sup.save()  # with the interposer's pid
        if record["type"] == "link":
            self._link_state(record, "down")

    def _link_state(self, res: dict[str, Any], state: str) -> None:
        """Keep ``testbed status`` and the event log in step with a carrier fault."""
        self.sup.link_state[res["node"]][res["iface"]] = state
        runstate.append_event(self.sup.rdir, f"link_{state}", node=res["node"],
                              iface=res["iface"], by="fault")

    def _undo_all(self, f: _Fault) -> dict[str, int]:
        counters: dict[str, int] = {}
        problems = []
        for res in reversed(f.resources):
            problem = netops.undo(res)
            if res["type"] == "link":
                self._link_state(res, "up")
            if problem:
                problems.append(problem)
            if res["type"] == "interposer":
                for key, v in netops.read_counters(res["counters"]).items():
                    if isinstance(v, int) and not isinstance(v, bool) and key != "pid":
                        counters[key] = counters.get(key, 0) + v
        f.resources = []
        if f.fid in self.sup.state["faults"]:
            self.sup.state["faults"][f.fid]["resources"] = []
            self.sup.save()
        if problems:
            runstate.append_event(self.sup.rdir, "fault_revert_problem", id=f.fid,
                                  problems=problems)
        return counters

    def _ib(self, f: _Fault, on: bool) -> None:
        """An IB kind other than port-down: the node daemon's o2iblnd (``ib_fault``,
        nodes/o2ib/ibfaults.py ``apply``)."""
        spec = f.spec
        reply = request(str(runstate.node_sock(self.sup.rdir, spec.node or "")),
                        {"cmd": "ib_fault", "kind": spec.kind, "nid": ib_nid(spec, self.sup.plan),
                         "params": spec.params, "on": on}, timeout=10.0, ctx=self.sup.zctx)
        if not reply.get("ok"):
            raise FaultError(f"{spec.node}: {reply.get('error')}")

    # -- process faults -----------------------------------------------------------------------

    def _process(self, f: _Fault, k: int) -> None:
        node = f.spec.node or ""
        if f.spec.kind == "kill":
            proc = self.sup.daemons[node]
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
        else:
            self._restart(node)

    def reload(self, node: str, modules: dict[str, Any]) -> dict[str, Any]:
        """``reload``: ``lnet unconfigure``, then the daemon restarted with ``modules``'
        parameters and LNet left unconfigured (``testbed/modload.py``)."""
        if node not in self.sup.daemons:
            return {"ok": False, "error": f"no node {node!r} in testbed {self.sup.name}"}
        try:
            plan = modload.reloaded_plan(self.sup.plan.node(node), modules)
            if self.sup.daemons[node].poll() is None:
                daemons.verb(self.sup, node, ["lnet", "unconfigure"])
            self._restart(node, plan)
        except (TestbedError, netops.FaultApplyError, BringUpError) as e:
            return {"ok": False, "error": f"reload {node}: {e}"}
        return {"ok": True, "node": node}

    def _restart(self, node: str, reloaded: NodePlan | None = None) -> None:
        """A fresh daemon in the node's namespace, configured as at bring-up; or with the
        ``reloaded`` plan's module parameters and left unconfigured."""
        old = self.sup.daemons[node]
        if old.poll() is None:
            old.send_signal(signal.SIGKILL)
            old.wait(timeout=10)
        plan = reloaded or self.sup.plan.node(node)
        sock = runstate.node_sock(self.sup.rdir, node)
        sock.unlink(missing_ok=True)
        daemons.start_daemon(self.sup, plan)
        self.sup.dead_reported.discard(node)
        deadline = time.monotonic() + RESTART_TIMEOUT
        while True:
            if self.sup.daemons[node].poll() is not None:
                raise netops.FaultApplyError(f"restarted daemon of {node} exited")
            try:
                if sock.exists() and request(str(sock), {"cmd": "hello"},
                                             timeout=1.0).get("ok"):
                    break
            except DaemonUnreachable:
                pass
            if time.monotonic() > deadline:
                raise netops.FaultApplyError(f"restarted daemon of {node} did not answer")
            time.sleep(0.05)
        if reloaded is None:
            daemons.configure(self.sup, plan)
        runstate.append_event(self.sup.rdir, "node_restarted", node=node,
                              pid=self.sup.daemons[node].pid)
