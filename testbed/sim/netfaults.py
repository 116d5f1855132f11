"""Faults of a sim testbed: the kinds the in-memory fabric can model, on virtual time.

Theory of operation: the requests and events are the Mininet supervisor's
(``testbed/mininet/faultctl.py``): ``fault_add|list|del|clear`` replies, ids ``f1, f2...``,
``faults.spec`` validation, ``faults.sched`` timelines, and ``fault_added``,
``fault_applied``, ``fault_reverted``, ``fault_deleted`` events with the same fields, in the
sim's event log with virtual ``t``. ``start``/``at``/``duration``/flap times are virtual
seconds; a fault without a seed gets one derived from the testbed's seed and its id, so a
replay is exact. The faults and their schedule are the one fault manager's
(``testbed/faultbook.py`` ``FaultBook``: ids, names, seeds, the walk of each fault's due
transitions); this module is the sim's part, which only applies and undoes an activation
(a ``Rule`` with its packet model installed on the fabric's links, a link, a process, an
o2iblnd fault), and schedules each fault's next transition on the fabric's own queue
(``Fabric.at``), where ``FaultBook.advance`` runs it.

What each kind does to a message the rule matches (direction ``out``: sent by the node, from
``iface`` if given; ``in``: received by it; ``both``), as the socklnd over TCP would see it:

* ``loss``: TCP retransmits a lost segment, so LNet sees no loss but delay: each lost attempt
  adds the retransmission timeout (RTO 200 ms, doubling, Linux's TCP_RTO_MIN and backoff);
  once the added delay reaches the sending NI's LND timeout the socklnd gives up on the
  connection (posted tx: -ETIMEDOUT, NETWORK_TIMEOUT). Only ``rate`` (Bernoulli) is modelled.
* ``delay``: ``delay`` ms plus ``jitter`` ms (uniform or normal), on a ``rate`` fraction.
* ``blackhole``, ``partition`` (both ways, or ``oneway`` a -> b: a's messages to b vanish
  unless they ride a connection b opened), ``flap`` with ``style=blackhole``: the message
  vanishes. On an established connection (either end's, ``Fabric.established``) the write
  is taken by the socket and the tx completes OK after the latency; the connection is closed
  once it made no progress for the NI's LND timeout (``paths.py``, measured on Linux: a
  peer that stops answering raises nothing on a write for many seconds). Without one the
  connect never completes: the tx fails at the LND timeout (LOCAL_TIMEOUT, seed 003).
* ``carrier``, ``flap`` (``style=carrier``): the interface's link goes down (``tb.link``).
* ``kill``: the node's engine stops (``SimTestbed.kill``); with a ``duration`` it is
  restarted on revert. ``restart``: a new incarnation configured as at bring-up.

* ``qp-error``, ``rnr``, ``rdma-error``, ``cm-reject``: on the node's o2iblnd
  (``O2ibSim.ib_fault``); ``port-down`` is the o2ib interface's link going down (``tb.link``).
* ``rst``, ``reorder``, ``duplicate``, ``corrupt``, ``stall``, ``bandwidth``: modelled by
  their effect on the socklnd's byte stream (``netmodels.py``: a reset at both ends, head-of-
  line holds, TCP dropping copies, protocol errors or flipped payload bits, a token bucket).

``stop`` is refused with one line: the sim has no process to stop.
"""

from __future__ import annotations

import errno
import random
from typing import TYPE_CHECKING, Any

from faults.ibspec import IB, ib_nid
from faults.prefilter import Matcher
from faults.spec import FaultError, FaultSpec, parse_fault
from nodes.lnd import errmap
from nodes.lnd.wire import LNET_ACCEPTOR_PORT
from nodes.lnet.nid import NID
from testbed.faultbook import FaultBook, FaultRecord, never_raise
from testbed.sim.faultapi import SimFaultAPI
from testbed.sim.netmodels import MODELS, Knobs, Model

if TYPE_CHECKING:
    from nodes.lnet.actions import Transmit
    from testbed.sim.fabric import Fabric
    from testbed.sim.inproc import SimTestbed

MODELLED = ("loss", "delay", "blackhole", "partition", "carrier", "flap", "kill", "restart",
            *MODELS, *sorted(IB))
#: Linux TCP_RTO_MIN (200 ms) and TCP_RTO_MAX (120 s): the first retransmission timeout and
#: the cap of its exponential backoff
RTO_MIN, RTO_MAX = 0.2, 120.0
#: match keys the fabric can test on a message (it has no ports or TCP)
SIM_MATCH = ("proto", "type", "src_nid", "dst_nid", "portal")


class Rule:
    """One activation of a fault, as the fabric consults it per message."""

    def __init__(self, rec: FaultRecord, k: int, tb: SimTestbed) -> None:
        spec = rec.spec
        self.model: Model | None = None
        self.rec, self.kind, self.spec = rec, spec.kind, spec
        self.rng = random.Random(rec.seed + k)  # per-activation, as the interposer does
        self.counters: dict[str, int] = {}
        plan = tb.plan
        if spec.kind == "partition":
            self.a = {n for name in spec.params["a"] for n in plan.node(name).nid_values}
            self.b = {n for name in spec.params["b"] for n in plan.node(name).nid_values}
            return
        node = plan.node(spec.node or "")
        self.nids = {i.nid_value for i in node.interfaces
                     if spec.iface is None or i.name == spec.iface}
        model = MODELS.get(spec.kind)
        self.model = model(Knobs(dict(spec.params), self.rng, self.counters, self.nids)) \
            if model is not None else None
        self.matcher = Matcher(spec.match)  # the interposer's own (faults/prefilter.py)

    def _count(self, key: str) -> None:
        self.counters[key] = self.counters.get(key, 0) + 1

    def matches(self, act: Transmit) -> bool:
        """Whether the rule takes ``act``: sent or received on the node's interfaces (the
        interposer's iptables rule: ``direction``, ``iface``), then the one matcher's
        verdict on its LNet header (``Matcher.header``)."""
        d = self.spec.direction
        if not ((d in ("out", "both") and act.ni in self.nids)
                or (d in ("in", "both") and act.lpni in self.nids)):
            return False
        return self.matcher.header(act.hdr)

    def vanishes(self, act: Transmit, connected: set[tuple[str, NID, NID]], dst: str) -> bool:
        """Does this message vanish (blackhole, partition)?"""
        if self.kind == "partition":
            if act.ni in self.a and act.lpni in self.b:
                if self.spec.params["oneway"] and (dst, act.lpni, act.ni) in connected:
                    return False  # it answers on a connection b opened (--ctdir ORIGINAL)
            elif self.spec.params["oneway"] or not (act.ni in self.b and act.lpni in self.a):
                return False
        elif self.kind not in ("blackhole", "flap") or not self.matches(act):
            return False
        self._count("dropped")
        return True

    def delay(self, act: Transmit) -> float:
        """Seconds this message is held up (loss: TCP retransmissions; delay)."""
        if self.kind not in ("loss", "delay") or not self.matches(act):
            return 0.0
        p = self.spec.params
        if self.kind == "delay":
            if self.rng.random() >= p["rate"]:
                return 0.0
            j = p["jitter"]
            extra = (self.rng.uniform(-j, j) if p["dist"] == "uniform"
                     else self.rng.gauss(0.0, j)) if j else 0.0
            self._count("delayed")
            return max(0.0, float(p["delay"]) + extra) / 1000.0
        added, rto = 0.0, RTO_MIN
        while self.rng.random() < p["rate"]:
            added += rto
            rto = min(rto * 2, RTO_MAX)
            self._count("retransmits")
            if added > 3600:
                break
        if added:
            self._count("delayed")
        return added


def check_modelled(spec: FaultSpec) -> None:
    """Refuse, in one line, what the fabric cannot model."""
    if spec.kind not in MODELLED:
        raise FaultError(f"{spec.kind}: not modelled by the sim backend (the in-memory fabric "
                         f"has no packets, windows or processes; kinds: {', '.join(MODELLED)})")
    if spec.kind == "loss" and spec.params["rate"] is None:
        raise FaultError("loss: the sim backend models rate only (no Gilbert-Elliott p/r)")
    if spec.kind == "delay" and spec.params["reorder"]:
        raise FaultError("delay: reorder is not modelled by the sim backend (TCP delivers "
                         "in order)")
    # every message of the fabric rides a socklnd connection to port 988 (the default match
    # of stall and rst)
    bad = [k for k in spec.match.as_dict() if k not in SIM_MATCH
           and not (k == "port" and spec.match.port == LNET_ACCEPTOR_PORT)]
    if bad or spec.match.proto not in ("any", "lnet", "tcp"):
        raise FaultError(f"{spec.kind}: match on {bad[0] if bad else 'proto'} is not "
                         f"modelled by the sim backend (it can match: type, src_nid, "
                         f"dst_nid, portal)")


class SimFaults:
    """The faults of one ``SimTestbed`` (see the module docstring)."""

    def __init__(self, tb: SimTestbed) -> None:
        self.tb = tb
        #: the faults and their schedule (the one tick); this class applies and undoes them
        self.book = FaultBook(self._apply, self._revert, self._failed, self._draw,
                              quiet=True)
        self.faults = self.book.faults
        self.rules: dict[str, Rule] = {}  # fault id -> its active activation
        self.api = SimFaultAPI(self)  # ``tb.fault``: no control request to itself

    # -- requests (the ctl protocol) ------------------------------------------------------------
    def request(self, msg: dict[str, Any], timeout: float = 0.0) -> dict[str, Any]:
        cmd = msg.get("cmd")
        with self.tb.lock:
            if cmd == "fault_add":
                return self.add(msg.get("spec"))
            if cmd == "fault_list":
                reply = self.list()
                if msg.get("residue"):
                    reply["residue"] = []  # nothing outside this process to leave behind
                return reply
            if cmd == "fault_del":
                return self.delete(msg.get("id"))
            if cmd == "fault_clear":
                return self.clear()
        return {"ok": False, "error": f"unknown request {cmd!r}"}

    @never_raise
    def add(self, raw: Any) -> dict[str, Any]:
        try:
            spec = parse_fault(raw, nodes={n.name: [i.name for i in n.interfaces]
                                           for n in self.tb.plan.nodes})
            check_modelled(spec)
            ib_nid(spec, self.tb.plan)  # an IB kind only on an o2ib NI (faults/ibspec.py)
        except FaultError as exc:
            return {"ok": False, "error": str(exc)}
        rec = self.book.create(spec, self.tb.fabric.now)
        if isinstance(rec, str):
            return {"ok": False, "error": rec}
        fid = rec.fid
        self.tb.fabric.record_global("fault_added", id=fid, spec=spec.as_dict(), seed=rec.seed)
        self.tick(rec)
        if rec.error:
            self.faults.pop(fid, None)
            return {"ok": False, "error": f"{fid} ({spec.kind}): {rec.error}"}
        return {"ok": True, "fault": self.describe(rec)}

    def _draw(self, fid: str) -> int:
        """The seed of fault ``fid`` given none: from the testbed's seed, so a replay is
        exact (``FaultBook.draw``)."""
        return random.Random(f"{self.tb.seed}:{fid}").randrange(2**31)

    def describe(self, f: FaultRecord) -> dict[str, Any]:
        counters = dict(f.totals)
        rule = self.rules.get(f.fid)
        for k, v in (rule.counters if rule is not None else {}).items():
            counters[k] = counters.get(k, 0) + v
        return {"id": f.fid, "kind": f.spec.kind, "name": f.spec.name, "seed": f.seed,
                "state": f.state, "activations": f.activations, "spec": f.spec.as_dict(),
                "next": f.timeline.next_deadline(), "counters": counters, "error": f.error}

    def list(self) -> dict[str, Any]:
        return {"ok": True, "faults": [self.describe(f) for f in self.faults.values()]}

    @never_raise
    def delete(self, key: Any) -> dict[str, Any]:
        f = self.book.withdraw(str(key))
        if isinstance(f, str):
            return {"ok": False, "error": f}
        self.tb.fabric.record_global("fault_deleted", id=f.fid, counters=dict(f.totals))
        final = self.describe(f)
        final["counters"] = dict(f.totals)
        return {"ok": True, "fault": final}

    def clear(self) -> dict[str, Any]:
        return {"ok": True, "faults": [self.delete(fid)["fault"] for fid in list(self.faults)]}

    # -- virtual-time schedule ------------------------------------------------------------------
    def tick(self, rec: FaultRecord) -> None:
        """``rec``'s due transitions (``FaultBook.advance``), then its next one scheduled on
        the fabric's queue at its own virtual time (one entry per fault, as before the
        book: the order of applies and undoes among the fabric's events is the same)."""
        if rec.fid not in self.faults or rec.error:
            return
        fab = self.tb.fabric
        self.book.advance(rec, fab.now)
        if rec.state == "failed":  # (``_failed`` logged it)
            return
        nxt = rec.timeline.next_deadline()
        if nxt is not None:
            fab.at(max(nxt, fab.now), lambda: self.tick(rec))

    def _failed(self, f: FaultRecord) -> None:
        """A transition raised (``FaultBook.advance``): the event log says so."""
        self.tb.fabric.record_global("fault_failed", id=f.fid, error=f.error)

    def _apply(self, f: FaultRecord, k: int) -> None:
        f.activations += 1
        spec, tb = f.spec, self.tb
        if spec.kind == "kill":
            tb.kill(spec.node or "", f"killed by fault {f.fid}")
        elif spec.kind == "restart":
            tb.restart(spec.node or "")
        elif spec.kind in ("carrier", "port-down") or (spec.kind == "flap"
                                                       and spec.params["style"] == "carrier"):
            tb.link(spec.node or "", spec.iface or "", "down", by="fault")  # o2ib: port event
        elif spec.kind in IB:
            self._ib(spec, True)
        else:
            self.rules[f.fid] = Rule(f, k, tb)
            tb.fabric.rules = list(self.rules.values())
        tb.fabric.record_global("fault_applied", id=f.fid, activation=k, fault_kind=spec.kind,
                                spec=spec.as_dict(), seed=f.seed)

    def _revert(self, f: FaultRecord, k: int) -> None:
        spec, tb = f.spec, self.tb
        counters: dict[str, int] = {}
        if spec.kind == "kill" and spec.duration is not None:
            tb.restart(spec.node or "")
        elif spec.kind in ("carrier", "port-down") or (spec.kind == "flap"
                                                       and spec.params["style"] == "carrier"):
            tb.link(spec.node or "", spec.iface or "", "up", by="fault")
        elif spec.kind in IB:
            self._ib(spec, False)
        rule = self.rules.pop(f.fid, None)
        if rule is not None:
            if rule.model is not None:
                rule.model.close(tb.fabric)  # held messages go on
            counters = rule.counters
            tb.fabric.rules = list(self.rules.values())
        for key, v in counters.items():
            f.totals[key] = f.totals.get(key, 0) + v
        tb.fabric.record_global("fault_reverted", id=f.fid, activation=k, fault_kind=spec.kind,
                                counters=counters, seed=f.seed)

    def _ib(self, spec: FaultSpec, on: bool) -> None:
        """An IB kind on its node's o2iblnd (nodes/o2ib/ibfaults.py ``apply``)."""
        nid = NID.parse(ib_nid(spec, self.tb.plan) or "")
        self.tb.fabric.o2ib.ib_fault(spec.node or "", nid, spec.kind, spec.params, on)


def transmit_ruled(fab: Fabric, name: str, act: Transmit) -> None:
    """The fabric's ``transmit`` with faults active (``fab.rules``): a message may vanish
    (its tx fails at the sending NI's LND timeout, as the socklnd's would) or be held up
    (TCP retransmissions, delay), or a packet kind's model takes it (``netmodels.py``).
    (Its lambdas here: compiled, their environment is allocated on every call of the
    function holding them, so not per message.)"""
    link = fab.link(act.ni, act.lpni)
    if link.rc or fab.hold or link.dst is None:
        fab.transmit(name, act)
        return
    ni = fab.engines[name].ni_by_nid(act.ni)
    timeout = float(ni.lnd_timeout) if ni is not None else 50.0
    rules = fab.rules
    if any(rule.vanishes(act, fab.connected, link.dst) for rule in rules):
        if fab.established(name, act):  # the write is taken, then lost (paths.py)
            fab.at(fab.now + link.latency, lambda: fab.lost(name, act))
            return
        rc, hstatus = vanish_failure(False)
        fab.fail_at(fab.now + timeout, name, act, rc, hstatus)
        return
    for rule in rules:  # the packet kinds' models (netmodels.py)
        model = rule.model
        if model is not None:
            matched = rule.matches(act)
            if matched:
                model.k.count("matched")
            if model.take(fab, name, act, link, timeout, matched):
                return
    extra = sum(rule.delay(act) for rule in rules)
    if extra >= timeout:  # the socklnd gave up on the connection first
        rc, hstatus = errmap.FAILURES["posted_timeout"]
        fab.fail_at(fab.now + timeout, name, act, rc, hstatus)
        return
    delay = link.latency + extra + (fab.rng.uniform(0, fab.jitter) if fab.jitter else 0.0)
    fab.at_deliver(fab.now + delay, name, act)


def vanish_failure(connected: bool) -> tuple[int, Any]:
    """How the socklnd fails a tx whose bytes vanished, at its LND timeout: a posted tx on an
    established connection, or a connect that never completed (errmap.py)."""
    return errmap.FAILURES["posted_timeout"] if connected else errmap.connect_failure(
        -errno.ETIMEDOUT)
