"""``lnetctl export [--backup] [FILE]`` (spec §9.4; lnetctl.c ``jt_export``).

Theory of operation: the document is assembled in spec §9.4's order -- net, route,
routing/buffers, peer, global, udsp -- from the same show verbs lnetctl itself would run, so
whatever they print is exported; ``--backup`` keeps what configures a node again (no lo, no
NIDs, status or statistics, no read-only LND ``timeout``). The ``lnetctl`` client writes FILE
itself, as real lnetctl does; a FILE reaching the daemon (``testbed lnetctl``) must be an
absolute path and is written without ever blocking: opened non-blocking, refused unless it is a
regular file (a FIFO without a reader, a device, a directory). An unknown option or ``-h``
prints the help, exit 0, as ``jt_export`` does.
"""

from __future__ import annotations

import errno as E
import os
import stat
from typing import TYPE_CHECKING, Any

import yaml

from nodes.dlc.cmdline import NO, LongOpt, Stop, options
from nodes.dlc.help import EXPORT_HELP
from nodes.dlc.output import Result
from nodes.lnet import udsp
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime


async def _show(rt: NodeRuntime, argv: list[str]) -> dict[str, Any]:
    """Run a show verb and read its YAML back; a verb that does not exist gives nothing."""
    from nodes.dlc.verbs import lnetctl_cmd  # lnetctl_cmd dispatches export: no top import

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


def _backup_peer(p: dict[str, Any]) -> dict[str, Any]:
    return {"primary nid": p.get("primary nid"), "Multi-Rail": p.get("Multi-Rail"),
            "peer ni": [{"nid": n.get("nid")} for n in p.get("peer ni", [])]}


async def export_doc(rt: NodeRuntime, backup: bool) -> dict[str, Any]:
    """The ``lnetctl export [--backup]`` document, keys in spec §9.4 order."""
    out: dict[str, Any] = {}
    net = await _show(rt, ["net", "show", "-v", "1" if backup else "2"])
    nets = (_backup_net(net) if backup else net.get("net")) if net.get("net") else []
    if nets:  # --backup leaves out 0@lo: no net section for a node without NIs
        out["net"] = nets
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


def export_target(args: list[str]) -> tuple[bool, str | None]:
    """``jt_export``'s options: (backup, FILE or None for stdout).

    Raises:
        Stop: ``-h`` or an unknown option (help, exit 0).
    """
    opts, operands = options("export", args, "bh", (LongOpt("backup", NO, "b"),
                                                     LongOpt("help", NO, "h")),
                             fail=(0, EXPORT_HELP, ""))
    if any(o == "h" for o, _ in opts):
        raise Stop((0, EXPORT_HELP, ""))
    return any(o == "b" for o, _ in opts), operands[0] if operands else None


def write_export(path: str, text: str) -> str | None:
    """Write an export to ``path`` without blocking; an error line or None."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        return f"lnetctl export: cannot write {path}: {os.strerror(e.errno or E.EIO)}\n"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"lnetctl export: cannot write {path}: not a regular file\n"
        os.set_blocking(fd, True)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as f:
            f.write(text)
    except OSError as e:
        return f"lnetctl export: cannot write {path}: {os.strerror(e.errno or E.EIO)}\n"
    finally:
        os.close(fd)
    return None


async def run(rt: NodeRuntime, args: list[str]) -> Result:
    try:
        backup, path = export_target(args)
    except Stop as stop:
        return stop.result
    text = dump(await export_doc(rt, backup=backup))
    if path is None:
        return 0, text, ""
    if not os.path.isabs(path):
        return 255, "", (f"lnetctl export: FILE must be an absolute path (the node daemon "
                         f"writes it): '{path}'\n")
    err = write_export(path, text)
    return (255, "", err) if err else (0, "", "")
