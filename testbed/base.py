"""What every backend offers: the ``Testbed`` and ``NodeHandle`` protocols, and their error.

Theory of operation: a backend (``testbed.mininet``, ``testbed.sim``, ``testbed.vagrant`` for
guests and hosts) is any pair of classes that satisfy these ``typing.Protocol`` s structurally;
none inherits from another backend, and nothing here imports a backend. The verbs a node offers
are its daemon's: ``verb(cmd, argv)`` carries an ``lnetctl``/``lctl`` command line exactly as
given, and ``NodeVerbs`` derives the conveniences (``lnetctl("net show -v")``, ``yaml``,
``ping``, ``lnd_link``, ``testbed_stats``) from it once, for every backend. What a backend
cannot do raises ``TestbedError`` with one line naming the backend and the operation
(``unsupported``), never an inherited method that fails in an odd way. """

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import yaml

from nodes.echo import shown
from nodes.limits import argv_refusal
from testbed import shellwords
from testbed.plan.model import NAME_RE, RESERVED_NAMES
from testbed.sh import Completed

__all__ = ["Completed", "FaultAPI", "NodeHandle", "NodeVerbs", "Testbed", "TestbedError",
           "check_name", "split_argv", "unsupported"]


class TestbedError(Exception):
    """A testbed operation failed; the message is one line, fit for the user."""

    __test__ = False  # not a pytest test class


def unsupported(backend: str, operation: str, why: str = "") -> TestbedError:
    """The one-line error of an operation a backend cannot do."""
    return TestbedError(f"{backend} backend: {operation} is not supported"
                        + (f" ({why})" if why else ""))


def check_name(name: str) -> str:
    """``name`` if it is a valid testbed name (it reaches paths and kernel names); names of
    the run root's shared entries (``by-netns``) are refused (issue 11 item 4)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise TestbedError(f"bad testbed name {shown(name)}: must match {NAME_RE.pattern}")
    if name in RESERVED_NAMES:
        raise TestbedError(f"bad testbed name {shown(name)}: reserved (the run root's {name}/ is "
                           "shared by every testbed)")
    return name


def split_argv(argv: Sequence[str]) -> list[str]:
    """One argument with spaces is split as a shell would: ``lnetctl("net show -v")``."""
    if len(argv) == 1 and " " in argv[0]:
        return shellwords.split(argv[0])
    return list(argv)


@runtime_checkable
class NodeHandle(Protocol):
    """One node of a running testbed (``tb.node("c1")``)."""

    name: str
    nids: list[str]

    def verb(self, cmd: str, argv: Sequence[str], timeout: float = 60.0) -> Completed:
        """Daemon verb ``cmd`` (``lnetctl``, ``lctl``) with ``argv`` exactly as given."""
        ...

    def lnetctl(self, *argv: str, timeout: float = 60.0) -> Completed: ...
    def lctl(self, *argv: str, timeout: float = 60.0) -> Completed: ...
    def lnetctl_yaml(self, *argv: str, timeout: float = 60.0) -> Any: ...
    def yaml(self, command: str, timeout: float = 60.0) -> Any: ...

    def ping(self, nid: str, *, source: str | None = None,
             timeout: float | None = None) -> Completed: ...

    def put(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            numa: int | None = None) -> dict[str, Any]: ...

    def get(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            numa: int | None = None) -> dict[str, Any]: ...

    def exec(self, argv: Sequence[str], *, input: str | None = None,
             timeout: float = 60.0) -> Completed: ...

    def log(self) -> str: ...
    def lnd_link(self, nid: str, up: bool) -> bool: ...
    def testbed_stats(self, nid: str | None = None) -> dict[str, Any]: ...


@runtime_checkable
class FaultAPI(Protocol):
    """A testbed's faults (``tb.fault``): add/list/delete/clear, one method per kind."""

    def add(self, kind: str, **spec: Any) -> dict[str, Any]: ...
    def list(self) -> list[dict[str, Any]]: ...
    def delete(self, fid: str) -> dict[str, Any]: ...
    def clear(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class Testbed(Protocol):
    """A running testbed, whatever carries it."""

    name: str

    @property
    def nodes(self) -> list[str]: ...

    @property
    def now(self) -> float:
        """The testbed's clock: wall time on Mininet, virtual seconds on the sim (the
        clock of the event log's ``t``)."""
        ...

    @property
    def fault(self) -> FaultAPI: ...

    def node(self, name: str) -> NodeHandle: ...
    def link(self, node: str, iface: str, state: str) -> None: ...
    def events(self) -> list[dict[str, Any]]: ...
    def status(self) -> dict[str, Any]: ...

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass on the testbed's clock."""
        ...

    def down(self, timeout: float = 60.0) -> list[str]: ...


class NodeVerbs:
    """The conveniences of ``NodeHandle`` derived from ``verb``, shared by every backend."""

    name: str

    def verb(self, cmd: str, argv: Sequence[str], timeout: float = 60.0) -> Completed:
        """Send daemon verb ``cmd`` ("lnetctl", "lctl") with ``argv`` exactly as given; an
        argv beyond ``ARG_MAX`` is refused here, as the daemon would (``argv_refusal``)."""
        refused = argv_refusal(cmd, list(argv))
        if refused is not None:
            return Completed(*refused)
        reply = self._request({"cmd": cmd, "argv": list(argv)}, timeout)
        return Completed(int(reply.get("rc", 1)), str(reply.get("out", "")),
                         str(reply.get("err", "")))

    def _request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request to this node's daemon, its reply: a backend's own channel (a socket
        on this machine, CURVE over TCP, ...). ``verb`` and the bursts go through it.

        Raises:
            TestbedError: the daemon cannot be reached (one line naming the node).
            TypeError, ValueError: an argument JSON cannot carry.
        """
        raise NotImplementedError

    def lnetctl(self, *argv: str, timeout: float = 60.0) -> Completed:
        """Run ``lnetctl ARGV`` on this node; exactly what lnetctl would print.

        A single argument with spaces is split like a shell would: ``lnetctl("net show -v")``.
        """
        return self.verb("lnetctl", split_argv(argv), timeout)

    def lctl(self, *argv: str, timeout: float = 60.0) -> Completed:
        """Run ``lctl ARGV`` on this node (a single string is split like ``lnetctl``)."""
        return self.verb("lctl", split_argv(argv), timeout)

    def lnetctl_yaml(self, *argv: str, timeout: float = 60.0) -> Any:
        """``lnetctl ARGV`` parsed as YAML.

        Raises:
            TestbedError: lnetctl exited non-zero (message holds its output).
        """
        result = self.lnetctl(*argv, timeout=timeout)
        if result.rc != 0:
            raise TestbedError(f"node {self.name}: lnetctl {' '.join(argv)} failed with "
                               f"rc {result.rc}: {(result.out + result.err).strip()}")
        return yaml.safe_load(result.out)

    def yaml(self, command: str, timeout: float = 60.0) -> Any:
        """``node.yaml("net show -v 3")``: one lnetctl command string, its output parsed."""
        return self.lnetctl_yaml(*shellwords.split(command), timeout=timeout)

    def resolve_nid(self, dst: str) -> str:
        """A NID as given; a node name of this testbed -> that node's primary NID (its first
        NI's). The testbed's own API takes node names wherever it takes a NID (issue 18);
        lnetctl and lctl command lines stay exactly as real lnetctl takes them."""
        testbed = getattr(self, "testbed", None)
        if not isinstance(dst, str) or "@" in dst or testbed is None:
            return dst
        try:
            return str(testbed.node(dst).nids[0])
        except (TestbedError, IndexError):
            return dst  # not a node: the verb says what is wrong with it

    def ping(self, nid: str, *, source: str | None = None, timeout: float | None = None
             ) -> Completed:
        """``lnetctl ping NID`` (an LNet GET of the peer's ping buffer); rc, out, err.
        ``nid`` may be a node name (its primary NID)."""
        argv = ["ping", self.resolve_nid(nid)]
        if source is not None:
            argv += ["--source", source]
        if timeout is not None:
            argv += ["--timeout", str(max(1, round(timeout)))]
        return self.lnetctl(*argv, timeout=60.0 if timeout is None else timeout + 30.0)

    def put(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            numa: int | None = None) -> dict[str, Any]:
        """A burst of ``count`` LNet PUTs of ``size`` bytes to ``dst`` (a NID) on the
        lnet_selftest bulk portal, at most 64 in flight; ``numa`` is the NUMA node of the
        messages' memory (emulated ``md_cpt``, snd-020); ``dst`` may be a node name. Returns
        ok, sent, completed, failed, errors (``"KIND:status"`` -> count)."""
        return self._burst("put", self.resolve_nid(dst), count, size, timeout, numa)

    def get(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            numa: int | None = None) -> dict[str, Any]:
        """A burst of ``count`` LNet GETs of ``size`` bytes from ``dst``'s bulk portal; each
        succeeds on its REPLY (``dst`` may be a node name). Same result dict as ``put``."""
        return self._burst("get", self.resolve_nid(dst), count, size, timeout, numa)

    def _burst(self, op: str, dst: str, count: int, size: int, timeout: float,
               numa: int | None) -> dict[str, Any]:
        """The daemon's ``put``/``get`` request (``nodes/burst.py`` runs it there)."""
        req: dict[str, Any] = {"cmd": op, "dst": dst, "count": count, "size": size}
        if numa is not None:
            req["numa"] = numa
        try:
            return self._request(req, timeout)
        except (TypeError, ValueError) as exc:  # an argument JSON cannot carry
            return {"ok": False, "error": f"{op}: bad argument: {exc}"}

    def lnd_link(self, nid: str, up: bool) -> bool:
        """Have the node's LND report a link down/up event on local NI ``nid``, as on a
        carrier change, without touching the interface (testbed-only ``lctl net_ni_down|up``,
        hlth-dbg-sim-ni-down/up). Returns whether the NI's link state changed.

        Raises:
            TestbedError: ``nid`` is not a local NI of this node (message holds lctl's).
        """
        res = self.lctl("net_ni_up" if up else "net_ni_down", nid)
        if res.rc != 0:
            raise TestbedError(f"node {self.name}: {(res.out + res.err).strip()}")
        return "event reported" in res.out

    def testbed_stats(self, nid: str | None = None) -> dict[str, Any]:
        """``lctl testbed_stats [NID]`` parsed: ``{"local NI(s)": [...], "peer NI(s)": [...]}``
        (seed 003 DESIRED statistics, docs/differences.md)."""
        res = self.lctl("testbed_stats", *([nid] if nid else []))
        if res.rc != 0:
            raise TestbedError(f"node {self.name}: lctl testbed_stats: "
                               f"{(res.out + res.err).strip()}")
        return dict(yaml.safe_load(res.out)["testbed stats"])
