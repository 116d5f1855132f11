"""Fault resources as typed values: what a fault changes on the host, made and undone.

Theory of operation (STYLE rules 9 and 10; issue 12 item 3): every change a fault makes is one
frozen resource -- an iptables rule, a tbf qdisc, a link set down, a stopped process, an
interposer process -- that knows how to ``create`` itself, ``undo`` itself (never raising: it
returns a problem line), say whether it is still ``present`` (``testbed clean``'s check) and
serialise itself (``to_dict``/``load``, the record in state.json, made *before* the change).
``faults.realise`` turns a fault spec into these without touching the system; the owner (the
Mininet supervisor's ``FaultManager``) records and creates them in order and undoes them in
reverse. A new kind of change is one class here plus its entry in ``RESOURCES``.

Where the rules live, and why: NFQUEUE/DROP rules go in the *node namespaces*' own ``filter``
table (OUTPUT for ``direction: out``, INPUT for ``in``), not on the bridge ports of the root
namespace (see faults/README.md "Where the rules live"); the NFQUEUE netlink socket is per
namespace, so the interposer runs in the node's namespace too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from faults import nfqproc, sh
from faults.interposer_spec import InterposerSpec
from faults.spec import FaultError

#: Comment prefix of every iptables rule we insert (``lntb:<fault id>``).
TAG = "lntb:"
#: Seconds an interposer gets to bind its queue (``READY_ENV`` in its environment: more, for
#: a host agent on an emulated guest, where Python starts ten times slower under load).
READY_TIMEOUT = 10.0
READY_ENV = "LNET_TESTBED_INTERPOSER_READY"


class FaultApplyError(Exception):
    """A fault could not be applied; the message is one line."""


# -- the host commands ------------------------------------------------------------------------

def iptables(op: str, rule: tuple[str, ...] | list[str], ns_pid: int,
             tool: str = "iptables") -> sh.Completed:
    """``tool`` is ``iptables`` or, for IPv6 addresses, ``ip6tables``."""
    return sh.run([tool, "-w", "5", op, *rule], ns_pid=ns_pid, timeout=15.0)


def tagged_rules(ns_pid: int, fid: str | None = None) -> list[str]:
    """``iptables -S`` and ``ip6tables -S`` lines carrying our tag (for one fault, or any) in a
    namespace (a host without ip6tables has none of those)."""
    want = f"{TAG}{fid}" if fid else TAG
    out: list[str] = []
    for tool in ("iptables", "ip6tables"):
        try:
            res = sh.run([tool, "-w", "5", "-S"], ns_pid=ns_pid, timeout=15.0)
        except FileNotFoundError:
            continue
        out += [ln if tool == "iptables" else f"(ip6) {ln}"
                for ln in res.out.splitlines() if want in ln]
    return out


def tagged_qdiscs(dev: str, ns_pid: int | None) -> list[str]:
    res = sh.run(["tc", "qdisc", "show", "dev", dev], ns_pid=ns_pid, timeout=15.0)
    return [ln for ln in res.out.splitlines() if ln.startswith("qdisc tbf")]


def _ns_alive(pid: int | None) -> bool:
    return bool(pid) and Path(f"/proc/{pid}/ns/net").exists()


def _checked(argv: list[str], ns_pid: int | None) -> None:
    result = sh.run(argv, ns_pid=ns_pid, timeout=15.0)
    if result.rc != 0:
        raise FaultApplyError(str(sh.CommandError(argv, result)))


# -- the resources ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """Base: ``type`` is the record's tag, ``node`` the node the change belongs to."""

    type: ClassVar[str] = ""
    node: str

    def create(self, env: dict[str, str]) -> Resource:
        """Make the change; returns the resource as made (an interposer learns its pid).

        Raises:
            FaultApplyError: the command failed or the process did not come up.
        """
        raise NotImplementedError  # pragma: no cover - every resource makes itself

    def undo(self) -> str | None:
        """Undo the change; never raises; a problem description or None."""
        raise NotImplementedError  # pragma: no cover

    def present(self) -> str | None:
        """What of the change is still there (None: nothing, or nothing to look at)."""
        return None

    def unseen(self) -> str | None:
        """For a change ``present`` cannot see: what undoing it anyway does (cleanup by
        record undoes it whenever its owner is gone)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """The state.json record (``load`` reads it back)."""
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_fields(cls, raw: dict[str, Any]) -> Resource:
        kw = {f.name: tuple(v) if isinstance(v := raw[f.name], list) else v
              for f in dataclasses.fields(cls) if f.name in raw}
        return cls(**kw)  # type: ignore[arg-type]  # our own records; a missing field: TypeError


@dataclass(frozen=True, slots=True, kw_only=True)
class IptablesRule(Resource):
    """One rule (the argv after ``-I``/``-D``) in a node's namespace, tagged ``lntb:<id>``."""

    type: ClassVar[str] = "iptables"
    ns_pid: int
    rule: tuple[str, ...]
    tool: str = "iptables"  # ip6tables: the rule matches IPv6 traffic (large NIDs)

    def create(self, env: dict[str, str]) -> Resource:
        _checked([self.tool, "-w", "5", "-I", *self.rule], self.ns_pid)
        return self

    def undo(self) -> str | None:
        r = iptables("-D", self.rule, self.ns_pid, self.tool)
        if r.rc != 0 and "does a matching rule exist" not in r.err and \
                "No such file" not in r.err and _ns_alive(self.ns_pid):
            return f"{self.tool} -D {' '.join(self.rule)}: {r.err.strip()}"
        return None

    def present(self) -> str | None:
        if _ns_alive(self.ns_pid) and tagged_rules(self.ns_pid):
            return f"{self.tool} rule {' '.join(self.rule)} in netns of {self.ns_pid}"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Qdisc(Resource):
    """A root ``tbf`` on ``dev``: in the node's namespace (its egress), or with ``ns_pid``
    None on the bridge-side veth in the root namespace (its egress is the node's ingress)."""

    type: ClassVar[str] = "qdisc"
    iface: str
    dev: str
    ns_pid: int | None
    bw: str
    burst: str
    latency: float

    def create(self, env: dict[str, str]) -> Resource:
        _checked(["tc", "qdisc", "replace", "dev", self.dev, "root", "tbf", "rate", self.bw,
                  "burst", self.burst, "latency", f"{self.latency:g}ms"], self.ns_pid)
        return self

    def undo(self) -> str | None:
        sh.run(["tc", "qdisc", "del", "dev", self.dev, "root"], ns_pid=self.ns_pid,
               timeout=15.0)
        return None

    def present(self) -> str | None:
        if self.ns_pid is None:
            return f"qdisc tbf on {self.dev}" if tagged_qdiscs(self.dev, None) else None
        if _ns_alive(self.ns_pid) and tagged_qdiscs(self.dev, self.ns_pid):
            return f"qdisc tbf on {self.dev} in netns of {self.ns_pid}"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkDown(Resource):
    """An interface of a node set down (``ip link set down``; undone: up)."""

    type: ClassVar[str] = "link"
    ns_pid: int
    iface: str

    def create(self, env: dict[str, str]) -> Resource:
        _checked(["ip", "link", "set", "dev", self.iface, "down"], self.ns_pid)
        return self

    def undo(self) -> str | None:
        sh.run(["ip", "link", "set", "dev", self.iface, "up"], ns_pid=self.ns_pid, timeout=15.0)
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoppedProcess(Resource):
    """A node daemon SIGSTOPped (undone: SIGCONT; the record's tag is ``signal``)."""

    type: ClassVar[str] = "signal"
    pid: int

    def create(self, env: dict[str, str]) -> Resource:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def undo(self) -> str | None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        return None

    def unseen(self) -> str | None:
        return f"SIGCONT to {self.pid}"  # a stop cannot be seen from outside: always resume


@dataclass(frozen=True, slots=True, kw_only=True)
class Interposer(Resource):
    """A ``python -m faults.interposer`` process in the node's namespace, reading ``spec``
    from ``spec_path`` and writing ``counters``; ``pid`` once it runs."""

    type: ClassVar[str] = "interposer"
    ns_pid: int
    interposer: InterposerSpec
    spec_path: str
    counters: str
    log: str
    pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = Resource.to_dict(self)
        out["interposer"] = self.interposer.to_dict()
        if self.pid is None:
            del out["pid"]
        return out

    @classmethod
    def from_fields(cls, raw: dict[str, Any]) -> Resource:
        return cls(node=raw["node"], ns_pid=raw["ns_pid"],
                   interposer=InterposerSpec.from_dict(raw["interposer"]),
                   spec_path=raw["spec_path"], counters=raw["counters"], log=raw["log"],
                   pid=raw.get("pid"))

    def create(self, env: dict[str, str]) -> Resource:
        return dataclasses.replace(self, pid=_start_interposer(self, env))

    def undo(self) -> str | None:
        nfqproc.stop(self.pid)
        return None

    def present(self) -> str | None:
        return f"interposer process {self.pid}" if nfqproc.is_interposer(self.pid) else None


#: record tag -> resource type (``load``).
RESOURCES: dict[str, type[Resource]] = {c.type: c for c in (
    IptablesRule, Qdisc, LinkDown, StoppedProcess, Interposer)}


def load(record: Any) -> Resource:
    """A state.json record -> its resource.

    Raises:
        FaultError: not a record of a known type, or a field missing or of the wrong shape.
    """
    cls = RESOURCES.get(str(record.get("type"))) if isinstance(record, dict) else None
    if cls is None:
        raise FaultError(f"not a fault resource record: {str(record)[:60]}")
    try:
        return cls.from_fields(record)
    except (KeyError, TypeError) as exc:
        raise FaultError(f"{cls.type} record: bad or missing field {exc}") from None


# -- the interposer process ------------------------------------------------------------------

def _start_interposer(res: Interposer, env: dict[str, str]) -> int:
    """Start the interposer of ``res`` in its node's namespace; wait until its queue is bound."""
    counters = Path(res.counters)
    counters.unlink(missing_ok=True)
    Path(res.spec_path).write_text(json.dumps(res.interposer.to_dict()))
    argv = sh.ns_argv([sys.executable, "-m", "faults.interposer", res.spec_path], res.ns_pid)
    log = open(res.log, "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd="/",
                                start_new_session=True)
    finally:
        log.close()
    ready = float(env.get(READY_ENV, READY_TIMEOUT))
    deadline = time.monotonic() + ready
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FaultApplyError(f"interposer exited with rc {proc.returncode}: "
                                  f"{nfqproc.tail(res.log)}")
        if nfqproc.read_counters(counters).get("ready"):
            return proc.pid
        time.sleep(0.02)
    nfqproc.stop(proc.pid)
    raise FaultApplyError(f"interposer did not bind queue {res.interposer.queue} "
                          f"within {ready:g}s: {nfqproc.tail(res.log)}")
