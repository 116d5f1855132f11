"""``lnetctl udsp add|del|show``, ``lnetctl export`` and ``lnetctl import`` (spec §7, §9.4).

Theory of operation: ``run`` receives the argv after the object word. UDSP verbs parse their
options as lnetctl.c's ``jt_add_udsp``/``jt_del_udsp``/``jt_show_udsp`` do and call the
engine's UDSP module (``nodes/lnet/udsp.py``). ``export`` assembles the YAML of spec §9.4 in
its order -- net, route, routing/buffers, peer, global, udsp -- from the same show verbs
lnetctl itself would run (so whatever the routing and discovery code prints is exported).
``import`` reads the file (the daemon shares the host filesystem) and turns each entry into
the lnetctl verb that configures it (``net add``, ``route add``, ``set``, ``peer add``,
``udsp add``; ``--del`` the matching ``del`` verbs), then runs those verbs through
``lnetctl_cmd.run``: the same code paths as typing them (cfg-065, cfg-165, cfg-170). Every
entry is attempted; errors are collected and the last non-zero status is returned, as
``lustre_yaml_config`` does. A file that cannot be read or is not YAML gives cYAML's builder
error YAML (``yaml_token_error``); bad options or keys are a one-line error.

``apply_module_params`` is the node's "modprobe lnet key=value": module parameters given to the
daemon at start (``--lnet-param``) before LNet is configured (spec §0).
"""

from __future__ import annotations

import contextlib
import getopt
import os
from typing import TYPE_CHECKING, Any

import yaml

from nodes.lnet import udsp
from nodes.lnet.errors import EINVAL, ENETDOWN, LNetConfigError
from nodes.lnet.tunables import MODULE_PARAMS, apply_module_param
from nodes.tools.yamlfmt import dump, error_doc

if TYPE_CHECKING:
    from nodes.driver import Runtime as NodeRuntime

Result = tuple[int, str, str]

#: import: top-level keys in the order they are applied (spec §9.4)
IMPORT_ORDER = ("net", "route", "routing", "buffers", "peer", "global", "numa", "udsp")
#: understood but not configuration: ignored as lnetctl does
IMPORT_IGNORED = ("statistics", "ip2nets", "ping", "discover")
#: `global:` keys that are shown but cannot be set
GLOBAL_READ_ONLY = ("lnd_timeout",)


def _exit(err: int) -> int:
    return (256 + err) % 256 or 1


def _err(cmd: str, entity: str, e: LNetConfigError) -> Result:
    return _exit(e.errno), "", error_doc(cmd, entity, e.errno, e.descr)


def _getopt(argv: list[str], short: str, long: list[str], prog: str) -> dict[str, str]:
    try:
        opts, rest = getopt.gnu_getopt(argv, short, long)
    except getopt.GetoptError as e:
        raise LNetConfigError(-EINVAL, f"{prog}: {e.msg}") from e
    if rest:
        raise LNetConfigError(-EINVAL, f"{prog}: unexpected argument '{rest[0]}'")
    return {o.lstrip("-"): v for o, v in opts}


def _long(text: str, what: str, minimum: int) -> int:
    """``parse_long`` plus the caller's lower bound: 'Invalid <what> "<text>"' otherwise."""
    try:
        value = int(text, 0)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise LNetConfigError(-EINVAL, f'Invalid {what} "{text}"')
    return value


# ------------------------------------------------------------------------------- udsp
async def _udsp(rt: NodeRuntime, argv: list[str]) -> Result:
    verb, rest = (argv[0], argv[1:]) if argv else ("", [])
    eng = rt.engine
    if verb == "add":
        try:
            o = _getopt(rest, "s:d:r:p:i:", ["src=", "dst=", "rte=", "priority=", "idx="],
                        "lnetctl udsp add")
            pick = {k: o.get(k, o.get(k[0])) for k in ("src", "dst", "rte", "priority", "idx")}
            prio = None if pick["priority"] is None else _long(pick["priority"], "priority", 0)
            idx = None if pick["idx"] is None else _long(pick["idx"], "index", 0)
            rule = udsp.make_rule(pick["src"], pick["dst"], pick["rte"], prio)
            udsp.add(eng, rule, idx)
        except LNetConfigError as e:
            return _err("add", "udsp", e)
        return 0, "", ""
    if verb == "del":
        try:
            o = _getopt(rest, "ai:", ["all", "idx="], "lnetctl udsp del")
            has_all = "all" in o or "a" in o
            idx_s = o.get("idx", o.get("i"))
            if has_all and idx_s is not None:
                raise LNetConfigError(-EINVAL, "Cannot combine --all with --idx")
            if not has_all and idx_s is None:
                raise LNetConfigError(-EINVAL, "Must specify --idx or --all")
            udsp.delete(eng, None if has_all else _long(idx_s or "", "index", 0))
        except LNetConfigError as e:
            return _err("del", "udsp", e)
        return 0, "", ""
    if verb == "show":
        try:
            o = _getopt(rest, "i:", ["idx="], "lnetctl udsp show")
            idx_s = o.get("idx", o.get("i"))
            doc = udsp.show(eng, None if idx_s is None else _long(idx_s, "index", 0))
        except LNetConfigError as e:
            return _err("show", "udsp", e)
        return 0, dump(doc) if doc else "", ""
    return 255, "", "lnetctl udsp: unknown command (valid: add, del, show)\n"


# ------------------------------------------------------------------------------- export
async def _show(rt: NodeRuntime, argv: list[str]) -> dict[str, Any]:
    """Run a show verb and read its YAML back; a verb that does not exist gives nothing."""
    from nodes.daemon import lnetctl_cmd

    rc, out, _err_text = await lnetctl_cmd.run(rt, argv)
    if rc != 0 or not out.strip():
        return {}
    doc = yaml.safe_load(out)
    return doc if isinstance(doc, dict) else {}


def _backup_net(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``export --backup``: no lo, no NIDs/status/stats; read-only LND tunables dropped."""
    nets = []
    for net in doc.get("net", []):
        if net.get("net type") == "lo":
            continue
        nis = []
        for ni in net.get("local NI(s)", []):
            item: dict[str, Any] = {}
            for key in ("interfaces", "tunables", "lnd tunables", "CPT"):
                if key in ni:
                    item[key] = ni[key]
            if isinstance(item.get("lnd tunables"), dict):
                item["lnd tunables"] = {k: v for k, v in item["lnd tunables"].items()
                                        if k != "timeout"}
            nis.append(item)
        nets.append({"net type": net["net type"], "local NI(s)": nis})
    return nets


async def export_doc(rt: NodeRuntime, backup: bool) -> dict[str, Any]:
    """The ``lnetctl export [--backup]`` document, keys in spec §9.4 order."""
    out: dict[str, Any] = {}
    net = await _show(rt, ["net", "show", "-v", "1" if backup else "2"])
    if net.get("net"):
        out["net"] = _backup_net(net) if backup else net["net"]
    route = await _show(rt, ["route", "show", "-v"])
    if route.get("route"):
        out["route"] = [{k: v for k, v in r.items() if not backup or k in
                         ("net", "gateway", "hop", "priority")} for r in route["route"]]
    routing = await _show(rt, ["routing", "show"])
    if routing.get("routing"):
        enable = next((i["enable"] for i in routing["routing"]
                       if isinstance(i, dict) and "enable" in i), None)
        if backup and enable is not None:
            out["routing"] = {"enable": enable}
        elif not backup:
            out["routing"] = routing["routing"]
    if routing.get("buffers"):
        out["buffers"] = routing["buffers"]
    peer = await _show(rt, ["peer", "show", "-v", "3"])
    if peer.get("peer"):
        out["peer"] = [_backup_peer(p) for p in peer["peer"]] if backup else peer["peer"]
    out.update(await _show(rt, ["global", "show"]))
    rules = udsp.show(rt.engine)
    if rules:
        out["udsp"] = rules["udsp"]
    return out


def _backup_peer(p: dict[str, Any]) -> dict[str, Any]:
    return {"primary nid": p.get("primary nid"), "Multi-Rail": p.get("Multi-Rail"),
            "peer ni": [{"nid": n.get("nid")} for n in p.get("peer ni", [])]}


async def _export(rt: NodeRuntime, argv: list[str]) -> Result:
    try:
        o, rest = getopt.gnu_getopt(argv, "b", ["backup"])
    except getopt.GetoptError as e:
        return 255, "", f"lnetctl export: {e.msg}\n"
    if len(rest) > 1:
        return 255, "", f"lnetctl export: unexpected argument '{rest[1]}'\n"
    text = dump(await export_doc(rt, backup=bool(o)))
    if not rest:
        return 0, text, ""
    try:
        path = _abs(rest[0], "export")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except (OSError, LNetConfigError) as e:
        why = e.descr if isinstance(e, LNetConfigError) else (e.strerror or str(e))
        return 255, "", f"lnetctl export: cannot write {rest[0]}: {why}\n"
    return 0, "", ""


def _abs(path: str, verb: str) -> str:
    if not os.path.isabs(path):
        raise LNetConfigError(-EINVAL, f"FILE must be an absolute path (the node daemon "
                              f"{'reads' if verb == 'import' else 'writes'} it): '{path}'")
    return path


# ------------------------------------------------------------------------------- import
class ImportError_(LNetConfigError):
    """A YAML entry that does not describe configuration (names the entry)."""


def _s(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _net_verbs(entries: Any, delete: bool) -> list[list[str]]:
    verbs = []
    for i, net in enumerate(_seq(entries, "net")):
        name = _key(net, "net type", f"net[{i}]")
        if name == "lo":
            continue
        nis = net.get("local NI(s)") or []
        if delete and not nis:
            verbs.append(["net", "del", "--net", _s(name)])
        for j, ni in enumerate(_seq(nis, f"net[{i}].local NI(s)")):
            ifaces = ni.get("interfaces") if isinstance(ni, dict) else None
            if not isinstance(ifaces, dict) or not ifaces:
                raise ImportError_(-EINVAL, f"net[{i}].local NI(s)[{j}]: no interfaces")
            iface = ",".join(_s(v) for v in ifaces.values())
            if delete:
                verbs.append(["net", "del", "--net", _s(name), "--if", iface])
                continue
            verb = ["net", "add", "--net", _s(name), "--if", iface]
            tun = ni.get("tunables") or {}
            for key, opt in (("peer_timeout", "--peer-timeout"), ("peer_credits",
                             "--peer-credits"), ("credits", "--credits")):
                if isinstance(tun, dict) and key in tun:
                    verb += [opt, _s(tun[key])]
            verbs.append(verb)
    return verbs


def _route_verbs(entries: Any, delete: bool) -> list[list[str]]:
    verbs = []
    for i, r in enumerate(_seq(entries, "route")):
        verb = ["route", "del" if delete else "add", "--net", _s(_key(r, "net", f"route[{i}]")),
                "--gateway", _s(_key(r, "gateway", f"route[{i}]"))]
        if not delete:
            for key in ("hop", "priority"):
                if key in r and r[key] is not None:
                    verb += [f"--{key}", _s(r[key])]
        verbs.append(verb)
    return verbs


def _peer_verbs(entries: Any, delete: bool) -> list[list[str]]:
    verbs = []
    for i, p in enumerate(_seq(entries, "peer")):
        prim = _s(_key(p, "primary nid", f"peer[{i}]"))
        nids = [_s(n.get("nid")) for n in _seq(p.get("peer ni") or [], f"peer[{i}].peer ni")
                if isinstance(n, dict) and n.get("nid") is not None and _s(n.get("nid")) != prim]
        verb = ["peer", "del" if delete else "add", "--prim_nid", prim]
        if delete:  # the listed NIDs; the primary among them deletes the peer (spec §9.4)
            nids = [prim, *nids]
        if nids:
            verb += ["--nid", ",".join(nids)]
        if not delete:
            if p.get("Multi-Rail") is False:
                verb.append("--non_mr")
            state = p.get("peer state")
            if isinstance(state, int) and state & 0x100000:  # LNET_PEER_LOCK_PRIMARY
                verb.append("--lock_prim")
        verbs.append(verb)
    return verbs


def _global_verbs(entries: Any, section: str) -> list[list[str]]:
    if not isinstance(entries, dict):
        raise ImportError_(-EINVAL, f"{section}: expected a mapping")
    verbs = []
    for key, value in entries.items():
        name = {"max_intf": "max_interfaces", "range": "numa_range", "enable": "routing",
                "tiny": "tiny_buffers", "small": "small_buffers",
                "large": "large_buffers"}.get(key, key)
        if name in GLOBAL_READ_ONLY:
            continue
        verbs.append(["set", _s(name), _s(value)])
    return verbs


def _udsp_verbs(entries: Any, delete: bool) -> list[list[str]]:
    verbs = []
    items = list(enumerate(_seq(entries, "udsp")))
    for i, rule in (reversed(items) if delete else items):
        if not isinstance(rule, dict):
            raise ImportError_(-EINVAL, f"udsp[{i}]: expected a mapping")
        if delete:
            verbs.append(["udsp", "del", "--idx", _s(_key(rule, "idx", f"udsp[{i}]"))])
            continue
        verb = ["udsp", "add"]
        for key in ("src", "dst", "rte"):
            if rule.get(key) is not None:
                verb += [f"--{key}", _s(rule[key])]
        action = rule.get("action")
        if isinstance(action, dict) and action.get("priority") is not None:
            verb += ["--priority", _s(action["priority"])]
        if rule.get("idx") is not None:
            verb += ["--idx", _s(rule["idx"])]
        verbs.append(verb)
    return verbs


def _seq(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ImportError_(-EINVAL, f"{where}: expected a list")
    return value


def _key(entry: Any, key: str, where: str) -> Any:
    if not isinstance(entry, dict) or entry.get(key) is None:
        raise ImportError_(-EINVAL, f"{where}: missing '{key}'")
    return entry[key]


def import_verbs(doc: Any, delete: bool = False) -> list[list[str]]:
    """The lnetctl verbs a document stands for, in application order (spec §9.4).

    Raises:
        LNetConfigError: the document is not an lnetctl configuration (names the entry).
    """
    if not isinstance(doc, dict):
        raise ImportError_(-EINVAL, "the file is not a YAML mapping of lnetctl sections")
    unknown = [k for k in doc if k not in IMPORT_ORDER and k not in IMPORT_IGNORED]
    if unknown:
        raise ImportError_(-EINVAL, f"unknown section '{unknown[0]}' (known: "
                                    f"{', '.join(IMPORT_ORDER)})")
    verbs: list[list[str]] = []
    order = reversed(IMPORT_ORDER) if delete else IMPORT_ORDER
    for key in order:
        if key not in doc or doc[key] is None:
            continue
        value = doc[key]
        if key == "net":
            verbs += _net_verbs(value, delete)
        elif key == "route":
            verbs += _route_verbs(value, delete)
        elif key == "peer":
            verbs += _peer_verbs(value, delete)
        elif key == "udsp":
            verbs += _udsp_verbs(value, delete)
        elif not delete:  # routing, buffers, global, numa: nothing to delete
            verbs += _global_verbs(value, key)
    return verbs


async def _run_all(rt: NodeRuntime, verbs: list[list[str]]) -> Result:
    from nodes.daemon import lnetctl_cmd

    rc, outs, errs = 0, [], []
    pending = verbs
    for _ in range(2):  # a `set` refused by a cross-check is retried once after the rest
        retry = []
        for verb in pending:
            vrc, out, err = await lnetctl_cmd.run(rt, verb)
            if vrc != 0 and verb[0] == "set" and pending is verbs:
                retry.append(verb)
                continue
            if vrc != 0:
                rc = vrc
                errs.append(err if err else f"lnetctl {' '.join(verb)}: failed ({vrc})\n")
            outs.append(out)
        if not retry:
            break
        pending = retry
    return rc, "".join(outs), "".join(errs)


def _token_name(tok: Any) -> str:
    """libyaml's ``yaml_token_type_t`` name of a PyYAML token (same scanner, same tokens)."""
    if isinstance(tok, yaml.DirectiveToken):
        return "YAML_VERSION_DIRECTIVE_TOKEN" if tok.name == "YAML" else "YAML_TAG_DIRECTIVE_TOKEN"
    camel = type(tok).__name__.removesuffix("Token")
    return "YAML_" + "".join(f"_{c}" if c.isupper() else c.upper() for c in camel)[1:] + "_TOKEN"


#: libyaml's yaml_token_type_t, in enum order (cyaml.c token_type_string)
_TOKEN_TYPES = ("NO", "STREAM_START", "STREAM_END", "VERSION_DIRECTIVE", "TAG_DIRECTIVE",
                "DOCUMENT_START", "DOCUMENT_END", "BLOCK_SEQUENCE_START", "BLOCK_MAPPING_START",
                "BLOCK_END", "FLOW_SEQUENCE_START", "FLOW_SEQUENCE_END", "FLOW_MAPPING_START",
                "FLOW_MAPPING_END", "BLOCK_ENTRY", "FLOW_ENTRY", "KEY", "VALUE", "ALIAS",
                "ANCHOR", "TAG", "SCALAR")


def yaml_token_error(text: str, e: yaml.YAMLError) -> str:
    """cyaml.c ``cYAML_parser_to_tree``'s descr for a file it cannot build a tree from:
    "Failed to handle token:N NAME [...]", the token the parse stopped at (NO_TOKEN when the
    scanner itself failed, as libyaml's ``yaml_parser_scan`` gives). The bracket holds the
    line/column and the problem instead of cYAML's builder state (docs/differences.md)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    name = "YAML_NO_TOKEN"
    if mark is not None and not isinstance(e, yaml.scanner.ScannerError):
        at: list[Any] = []  # the tokens starting where the parse stopped
        with contextlib.suppress(yaml.YAMLError):
            for tok in yaml.scan(text):
                if tok.start_mark.index >= mark.index:
                    if at and tok.start_mark.index != at[0].start_mark.index:
                        break
                    at.append(tok)
        named = [t for t in at if f"'{t.id}'" in (getattr(e, "problem", None) or "")]
        if at:
            name = _token_name((named or at)[0])
    num = _TOKEN_TYPES.index(name.removeprefix("YAML_").removesuffix("_TOKEN"))
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"Failed to handle token:{num} {name} [{where}{problem}]"


async def _import(rt: NodeRuntime, argv: list[str]) -> Result:
    try:
        o, rest = getopt.gnu_getopt(argv, "adse", ["add", "del", "show", "exec"])
    except getopt.GetoptError as e:
        return 255, "", f"lnetctl import: {e.msg}\n"
    modes = {opt.lstrip("-")[0] for opt, _ in o} or {"a"}
    if len(modes) > 1:
        return 255, "", "lnetctl import: give one of --add, --del, --show, --exec\n"
    if len(rest) != 1:
        return 255, "", ("lnetctl import: FILE is required (the node daemon reads it; "
                         "stdin is not forwarded)\n")
    try:
        with open(_abs(rest[0], "import"), encoding="utf-8") as f:
            text = f.read()
    except LNetConfigError as e:
        return 255, "", f"lnetctl import: {e.descr}\n"
    except (OSError, UnicodeDecodeError) as e:  # jt_import: -errno, a builder error
        no = e.errno or EINVAL if isinstance(e, OSError) else EINVAL
        why = e.strerror or str(e) if isinstance(e, OSError) else "not UTF-8 text"
        return (_exit(-no), "",
                error_doc("yaml", "builder", -1, f"cannot open '{rest[0]}': {why}"))
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:  # lustre_yaml_config -> cYAML_build_tree: -EINVAL
        return _exit(-EINVAL), "", error_doc("yaml", "builder", -1, yaml_token_error(text, e))
    mode = modes.pop()
    if mode == "s":
        return 0, dump(doc) if isinstance(doc, dict) else "", ""
    if mode == "e":
        return await _exec(rt, doc)
    if not rt.engine.configured:
        e = LNetConfigError(-ENETDOWN, "LNet is not configured: Network is down")
        return _err("import", "lnet", e)
    try:
        verbs = import_verbs(doc, delete=mode == "d")
    except LNetConfigError as e:
        return 255, "", f"lnetctl import: {rest[0]}: {e.descr}\n"
    return await _run_all(rt, verbs)


async def _exec(rt: NodeRuntime, doc: Any) -> Result:
    """``import --exec``: run the ``ping:``/``discover:`` entries (``nid`` lists)."""
    from nodes.daemon import lnetctl_cmd

    verbs = []
    if isinstance(doc, dict):
        for key in ("ping", "discover"):
            for entry in doc.get(key) or []:
                if isinstance(entry, dict) and entry.get("primary nid"):
                    verbs.append([key, _s(entry["primary nid"])])
    rc, outs, errs = 0, [], []
    for verb in verbs:
        vrc, out, err = await lnetctl_cmd.run(rt, verb)
        rc = vrc or rc
        outs.append(out)
        errs.append(err)
    return rc, "".join(outs), "".join(errs)


# ------------------------------------------------------------------------------- module params
def apply_module_params(rt: NodeRuntime, params: list[tuple[str, str]]) -> None:
    """``modprobe lnet name=value ...``: before LNet is configured (spec §0).

    Raises:
        LNetConfigError: unknown parameter or value refused, naming it.
    """
    for name, value in params:
        if name not in MODULE_PARAMS:
            raise LNetConfigError(-EINVAL, f"unknown LNet module parameter '{name}' "
                                           f"(known: {', '.join(MODULE_PARAMS)})")
        apply_module_param(rt.engine.tunables, name, value)


async def run(rt: NodeRuntime, obj: str, argv: list[str]) -> Result:
    """Entry point from ``lnetctl_cmd.run`` for ``udsp``, ``export`` and ``import``."""
    if obj != "import" and not rt.engine.configured:
        e = LNetConfigError(-ENETDOWN, "LNet is not configured: Network is down")
        return _err(argv[0] if obj == "udsp" and argv else "manage", obj, e)
    if obj == "udsp":
        return await _udsp(rt, argv)
    if obj == "export":
        return await _export(rt, argv)
    return await _import(rt, argv)
