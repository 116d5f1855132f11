"""Typed DLC commands: one frozen dataclass per configuration verb (issue 12 item 4).

Theory of operation: ``lnetctl`` argv is parsed once (``nodes/dlc/parse.py``) into one of these
commands; the orchestrator makes the same commands from its typed plan and sends them as
fields over the control socket (``fields()``, at the process edge), where the daemon's
``nodes/dlc/request.py`` ``from_fields`` parses them back once; one function
(``nodes/dlc/apply.py`` ``apply``) carries any of them out on a node runtime. A command is
data that has already been checked: nets and NIDs are typed (``Net``, ``NID``: parsed where
their text entered, never again), field types and the option ranges lnetctl itself enforces
are validated on construction, so a bad request is a one-line ``CommandError`` naming the
verb and field, never a traceback. ``argv()`` renders the command
as the lnetctl words that stand for it -- for ``export``, logs and the round-trip test
(``parse(cmd.argv()) == cmd``).

Field conventions follow lnetctl's own: an integer option that was not given is ``-1`` (as
``jt_add_ni`` initialises ``pto = pc = pbc = cre = cpp = tos = -1``); NID and gateway lists
are already expanded from ranges (``nidlist.expand_nids``).

Control socket request (``nodes/dlc/request.py``)::

    {"cmd": "dlc", "verb": "peer_add", "prim_nid": "10.0.0.2@tcp",
     "nids": ["10.1.0.2@tcp"], "non_mr": false, "lock_prim": false}

The reply is ``{"rc": N, "out": "...", "err": "..."}`` exactly as for ``lnetctl`` argv; a
request that does not validate is ``{"ok": false, "error": "dlc peer_add: ..."}``. Omitted
fields take the defaults below; unknown fields are errors.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from nodes.echo import clip
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, Net


class CommandError(ValueError):
    """A typed command that does not validate (one line: verb, field, reason)."""


def parse_nid_field(verb: str, field: str, text: str) -> NID:
    """``text`` as the NID of ``verb``'s ``field``: where a NID enters as text (the wire's
    ``from_fields``, an import file), parsed once; a ``CommandError`` naming both otherwise."""
    try:
        return NID.parse(text)
    except LNetConfigError:
        raise CommandError(f"dlc {verb}: {field}: cannot parse NID '{clip(str(text))}'") from None


def parse_net_field(verb: str, field: str, text: str) -> Net:
    """``text`` as the net of ``verb``'s ``field`` (see ``parse_nid_field``)."""
    try:
        return Net.parse(text)
    except LNetConfigError:
        raise CommandError(f"dlc {verb}: {field}: cannot parse net '{clip(str(text))}'") from None


def _type_ok(value: Any, hint: Any) -> bool:
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, Net, NID):
        return isinstance(value, hint)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(_type_ok(v, typing.get_args(hint)[0])
                                                for v in value)
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """Base of every typed DLC command."""

    verb: ClassVar[str] = ""
    #: int fields with a bounded range: name -> (lo, hi)
    ranges: ClassVar[dict[str, tuple[int, int]]] = {}

    def __post_init__(self) -> None:
        hints = field_types(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _type_ok(value, hints[f.name]):
                raise CommandError(f"dlc {self.verb}: {f.name}: expected "
                                   f"{_type_name(hints[f.name])}, not {value!r:.60}")
        for name, (lo, hi) in self.ranges.items():
            value = getattr(self, name)
            if value is not None and not lo <= value <= hi:
                raise CommandError(f"dlc {self.verb}: {name}: {value} not in {lo}..{hi}")

    def fields(self) -> dict[str, Any]:
        """The request fields (JSON-able) without the ``cmd``/``verb`` keys: a net or NID as
        lnetctl prints it (``from_fields`` parses it back)."""
        return {f.name: [_text(x) for x in v] if isinstance(v := getattr(self, f.name), tuple)
                else _text(v) for f in dataclasses.fields(self)}

    def argv(self) -> list[str]:  # pragma: no cover - every subclass renders itself
        raise NotImplementedError


def _text(value: Any) -> Any:
    return str(value) if type(value) in (Net, NID) else value


def _type_name(hint: Any) -> str:
    names = {bool: "a boolean", int: "an integer", str: "a string", Net: "a net", NID: "a NID"}
    if typing.get_origin(hint) is tuple:
        return "a list of " + {str: "strings", NID: "NIDs"}[typing.get_args(hint)[0]]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return names.get(args[0] if len(args) == 1 else hint) or str(hint)


def _opt(flag: str, value: int) -> list[str]:
    return [] if value == -1 else [flag, str(value)]


def _joined(nids: tuple[NID, ...]) -> str:
    return ",".join(map(str, nids))


def _flag(flag: str, on: bool) -> list[str]:
    return [flag] if on else []


@dataclass(frozen=True, slots=True, kw_only=True)
class LnetConfigure(Command):
    verb: ClassVar[str] = "lnet_configure"
    all: bool = False
    large: bool = False

    def argv(self) -> list[str]:
        return ["lnet", "configure", *_flag("--all", self.all), *_flag("--large", self.large)]


@dataclass(frozen=True, slots=True, kw_only=True)
class LnetUnconfigure(Command):
    verb: ClassVar[str] = "lnet_unconfigure"

    def argv(self) -> list[str]:
        return ["lnet", "unconfigure"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NetAdd(Command):
    """``lnetctl net add`` (``jt_add_ni``); ``nids`` is ``--nid``, ``numa`` the testbed's
    NUMA node of the interface (docs/differences.md)."""

    verb: ClassVar[str] = "net_add"
    ranges: ClassVar[dict[str, tuple[int, int]]] = {
        "conns_per_peer": (-1, 127), "tos": (-1, 255), "numa": (0, 2**31 - 1)}
    net: Net | None = None
    interfaces: tuple[str, ...] = ()
    nids: tuple[NID, ...] = ()
    ip2net: str | None = None
    peer_timeout: int = -1
    peer_credits: int = -1
    peer_buffer_credits: int = -1
    credits: int = -1
    cpt: str | None = None
    conns_per_peer: int = -1
    tos: int = -1
    lnd_tunables: tuple[str, ...] = ()  # "key=value": an o2ib net's (YAML: no lnetctl flag)
    skip_mr_route_setup: bool = False
    numa: int | None = None

    def __post_init__(self) -> None:
        Command.__post_init__(self)
        if self.net is None and not self.nids and self.ip2net is None:
            raise CommandError("dlc net_add: one of net, nids, ip2net is required")
        if self.net is not None and self.nids:
            raise CommandError("dlc net_add: net is invalid with nids")

    def argv(self) -> list[str]:
        out = ["net", "add"]
        out += ["--net", str(self.net)] if self.net is not None else []
        out += ["--if", ",".join(self.interfaces)] if self.interfaces else []
        out += ["--nid", _joined(self.nids)] if self.nids else []
        out += ["--ip2net", self.ip2net] if self.ip2net is not None else []
        out += _opt("--peer-timeout", self.peer_timeout) + _opt("--peer-credits",
                                                                 self.peer_credits)
        out += _opt("--peer-buffer-credits", self.peer_buffer_credits)
        out += _opt("--credits", self.credits)
        out += ["--cpt", self.cpt] if self.cpt is not None else []
        out += _opt("--conns-per-peer", self.conns_per_peer) + _opt("--tos", self.tos)
        out += _flag("--skip-mr-route-setup", self.skip_mr_route_setup)
        return out + (["--numa", str(self.numa)] if self.numa is not None else [])


@dataclass(frozen=True, slots=True, kw_only=True)
class NetDel(Command):
    verb: ClassVar[str] = "net_del"
    net: Net | None = None
    interfaces: tuple[str, ...] = ()
    nids: tuple[NID, ...] = ()

    def argv(self) -> list[str]:
        out = ["net", "del"] + (["--net", str(self.net)] if self.net is not None else [])
        out += ["--if", ",".join(self.interfaces)] if self.interfaces else []
        return out + (["--nid", _joined(self.nids)] if self.nids else [])


@dataclass(frozen=True, slots=True, kw_only=True)
class NetSet(Command):
    """``lnetctl net set`` (``set_value_helper`` for LNET_CMD_NETS)."""

    verb: ClassVar[str] = "net_set"
    ranges: ClassVar[dict[str, tuple[int, int]]] = {"conns_per_peer": (-2**63, 127)}
    nid: NID | None = None
    all: bool = False
    net: Net | None = None
    lnd_timeout: int = -1
    health: int = -1
    conns_per_peer: int = -1

    def argv(self) -> list[str]:
        out = ["net", "set"] + (["--nid", str(self.nid)] if self.nid is not None else [])
        out += _flag("--all", self.all) + (["--net", str(self.net)] if self.net is not None else [])
        out += _opt("--lnd-timeout", self.lnd_timeout) + _opt("--health", self.health)
        return out + _opt("--conns-per-peer", self.conns_per_peer)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerAdd(Command):
    verb: ClassVar[str] = "peer_add"
    prim_nid: NID
    nids: tuple[NID, ...] = ()
    non_mr: bool = False
    lock_prim: bool = False

    def argv(self) -> list[str]:
        return ["peer", "add", "--prim_nid", str(self.prim_nid),
                *(["--nid", _joined(self.nids)] if self.nids else []),
                *_flag("--non_mr", self.non_mr), *_flag("--lock_prim", self.lock_prim)]


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerDel(Command):
    verb: ClassVar[str] = "peer_del"
    prim_nid: NID
    nids: tuple[NID, ...] = ()
    force: bool = False

    def argv(self) -> list[str]:
        return ["peer", "del", "--prim_nid", str(self.prim_nid),
                *(["--nid", _joined(self.nids)] if self.nids else []),
                *_flag("--force", self.force)]


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerSet(Command):
    """``lnetctl peer set`` (``set_value_helper`` for LNET_CMD_PEERS)."""

    verb: ClassVar[str] = "peer_set"
    nid: NID | None = None
    all: bool = False
    health: int = -1
    state: int = -1

    def argv(self) -> list[str]:
        out = ["peer", "set"] + (["--nid", str(self.nid)] if self.nid is not None else [])
        return out + _flag("--all", self.all) + _opt("--health", self.health) + _opt(
            "--state", self.state)


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteAdd(Command):
    """``lnetctl route add``: one route per gateway (a range gives several)."""

    verb: ClassVar[str] = "route_add"
    net: Net
    gateways: tuple[NID, ...]
    hop: int = -1
    priority: int = -1

    def argv(self) -> list[str]:
        return ["route", "add", "--net", str(self.net), "--gateway", _joined(self.gateways),
                *_opt("--hop", self.hop), *_opt("--priority", self.priority)]


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteDel(Command):
    verb: ClassVar[str] = "route_del"
    net: Net | None = None
    gateways: tuple[NID, ...] = ()

    def argv(self) -> list[str]:
        out = ["route", "del"] + (["--net", str(self.net)] if self.net is not None else [])
        return out + (["--gateway", _joined(self.gateways)] if self.gateways else [])


@dataclass(frozen=True, slots=True, kw_only=True)
class UdspAdd(Command):
    verb: ClassVar[str] = "udsp_add"
    ranges: ClassVar[dict[str, tuple[int, int]]] = {"priority": (-1, 2**63 - 1),
                                                    "idx": (-1, 2**63 - 1)}
    src: str | None = None
    dst: str | None = None
    rte: str | None = None
    priority: int = -1
    idx: int = -1

    def argv(self) -> list[str]:
        out = ["udsp", "add"]
        for key in ("src", "dst", "rte"):
            if getattr(self, key) is not None:
                out += [f"--{key}", getattr(self, key)]
        return out + _opt("--priority", self.priority) + _opt("--idx", self.idx)


@dataclass(frozen=True, slots=True, kw_only=True)
class UdspDel(Command):
    """``lnetctl udsp del --idx N`` or ``--all`` (``idx == -1``)."""

    verb: ClassVar[str] = "udsp_del"
    ranges: ClassVar[dict[str, tuple[int, int]]] = {"idx": (-1, 2**63 - 1)}
    idx: int = -1

    def argv(self) -> list[str]:
        return ["udsp", "del", *(["--all"] if self.idx == -1 else ["--idx", str(self.idx)])]


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTunable(Command):
    """``lnetctl set NAME VALUE`` with VALUE already parsed by ``parse_long`` (``routing``
    and ``*_buffers`` included: they are ``set`` verbs in lnetctl too)."""

    verb: ClassVar[str] = "set"
    name: str
    value: int

    def __post_init__(self) -> None:
        Command.__post_init__(self)
        from nodes.dlc.tunables import ENGINE_ONLY, TUNABLES

        if self.name not in TUNABLES and self.name not in ENGINE_ONLY \
                and self.name != "multi_rail":
            raise CommandError(f"dlc set: name: unknown tunable '{clip(str(self.name))}'")

    def argv(self) -> list[str]:
        return ["set", self.name, str(self.value)]


COMMANDS: dict[str, type[Command]] = {c.verb: c for c in (
    LnetConfigure, LnetUnconfigure, NetAdd, NetDel, NetSet, PeerAdd, PeerDel, PeerSet,
    RouteAdd, RouteDel, UdspAdd, UdspDel, SetTunable)}


_TYPES: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class: evaluating the string annotations
    was three quarters of the simulator's bring-up (every node's every configuration command)."""
    hints = _TYPES.get(cls)
    if hints is None:
        hints = _TYPES[cls] = typing.get_type_hints(cls)
    return hints
