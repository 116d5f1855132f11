"""``lnetctl udsp show``, ``lnetctl import`` and the node's module parameters (spec §7, §9.4).

Theory of operation: ``udsp add|del`` are typed DLC commands (``nodes/dlc``); ``udsp show``
prints the engine's rules. ``import`` gets the parsed document as ``content`` -- read and
parsed by whoever ran lnetctl (``nodes/dlc/importfile.py``: the ``lnetctl`` client, or the
testbed) -- and runs the typed commands it stands for (``lnetctl_import.import_commands``)
through ``nodes/dlc/apply.py``, the code path of typing them (cfg-065, cfg-165, cfg-170).
A FILE operand that reaches the daemon itself (``testbed lnetctl NODE import FILE``) is read
with the same bounded reader, regular files only: the daemon never blocks on a FIFO or a
device and never reads more than ``MAX_IMPORT_BYTES`` (issue 11 item 1). The document is
checked as a whole first, so a bad entry creates nothing; then every step is attempted, errors
collected and the last non-zero status returned, as ``lustre_yaml_config`` does; a ``set``
refused by a cross-check is retried once after the rest. ``--exec`` runs the ``ping:`` and
``discover:`` entries; ``--show`` prints the document.

``apply_module_params`` is the node's "modprobe lnet key=value" (and "modprobe ksocklnd
key=value", given as ``ksocklnd.key=value``): module parameters given to the daemon at start
(``--lnet-param``) before LNet is configured (spec §0). The engine's go to its tunables
(``nodes/lnet/tunables.py``), the socket side's to the driver and the socklnd
(``nodes/lnd/modparams.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno as E
import os
from typing import TYPE_CHECKING, Any

from nodes.dlc import commands as C
from nodes.dlc.apply import apply
from nodes.dlc.cmdline import NO, REQ, LongOpt, Stop, check_cmd, options
from nodes.dlc.glue import local_addresses
from nodes.dlc.help import IMPORT_HELP
from nodes.dlc.importfile import (
    Content,
    ImportFileError,
    content_error,
    read_import_file,
    show,
)
from nodes.dlc.ip2nets import resolve
from nodes.dlc.output import Result, error, exit_code
from nodes.dlc.tunables import parse_long
from nodes.dlc.verbs.lnetctl_import import Ip2netsBlock, import_commands, import_verbs, nids_of
from nodes.dlc.yamltoken import yaml_token_error
from nodes.echo import clip
from nodes.lnd.modparams import LND_PARAMS, set_lnd_param
from nodes.lnet import udsp
from nodes.lnet.cpt import CPT_PARAMS
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.tunables import MODULE_PARAMS, STRING_MODULE_PARAMS, apply_module_param
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

_IMPORT = (LongOpt("add", NO, "a"), LongOpt("del", NO, "d"), LongOpt("show", NO, "s"),
           LongOpt("exec", NO, "e"), LongOpt("old-api", NO, "o"), LongOpt("help", NO, "h"))


def import_target(args: list[str]) -> tuple[str, str | None]:
    """``jt_import``'s options: (mode a|d|s|e, FILE or None for stdin).

    Raises:
        Stop: ``-h`` (help, exit 0) or an unknown option (glibc's line, exit 0).
    """
    opts, operands = options("import", args, "adseoh", _IMPORT, fail=(0, "", ""))
    mode = "a"
    for o, _ in opts:
        if o == "h":
            raise Stop((0, IMPORT_HELP, ""))
        if o in "adse":
            mode = o  # the last one given wins, as ``cmd = opt`` does
    return mode, operands[0] if operands else None


async def _udsp_show(rt: NodeRuntime, args: list[str]) -> Result:
    check_cmd("udsp", "show", args, 0)
    opts, _ = options("show", args, "i:", (LongOpt("idx", REQ, "i"),), help_of=("net", "show"))
    idx = None
    for _o, v in opts:
        value = parse_long(v or "")
        if value is None or value < -1:
            return exit_code(-E.EINVAL), f"Invalid index \"{v}\"\n", ""
        idx = None if value == -1 else value
    doc = udsp.show(rt.engine, idx)
    return 0, dump(doc) if doc else "", ""


async def _ip2nets(rt: NodeRuntime, block: Ip2netsBlock) -> Result:
    """``handle_net_config_sequence`` for an ``ip2nets:`` sequence."""
    local = local_addresses(rt)
    done: list[str] = []
    for rule, add in block.rules:
        try:
            ifaces = resolve(rule, local)
        except LNetConfigError:
            continue  # LUSTRE_CFG_RC_NO_MATCH is fine for one rule
        if rule.net in done:
            continue  # a second rule for a configured net changes nothing
        cmd: C.Command = (C.NetDel(net=add.net, interfaces=ifaces) if block.delete else
                          dataclasses.replace(add, ip2net=None, interfaces=ifaces))
        rc, out, err = await apply(rt, cmd)
        if rc:
            return rc, out, err
        done.append(rule.net)
    if not done:
        return error("del" if block.delete else "add", "import", -E.EINVAL,
                     "No ip2nets rules applied")
    return 0, "", ""


async def _run_all(rt: NodeRuntime, steps: list[Any]) -> Result:
    rc, outs, errs = 0, [], []
    pending = steps
    for _ in range(2):  # a `set` refused by a cross-check is retried once after the rest
        retry = []
        for step in pending:
            await rt.share()  # each command a step: others are served between (issue 27)
            if isinstance(step, Ip2netsBlock):
                vrc, out, err = await _ip2nets(rt, step)
            else:
                vrc, out, err = await apply(rt, step)
            if vrc != 0 and isinstance(step, C.SetTunable) and pending is steps:
                retry.append(step)
                continue
            if vrc != 0:
                rc = vrc
                errs.append(err or f"lnetctl {' '.join(step.argv())}: failed ({vrc})\n")
            outs.append(out)
        if not retry:
            break
        pending = retry
    return rc, "".join(outs), "".join(errs)


async def _exec(rt: NodeRuntime, doc: Any) -> Result:
    """``import --exec``: run the ``ping:``/``discover:`` entries (``nids: {0: NID}``)."""
    from nodes.dlc.verbs import lnetctl_cmd  # lnetctl_cmd dispatches import: no top import

    rc, outs, errs = 0, [], []
    if isinstance(doc, dict):
        for key in ("ping", "discover"):
            if doc.get(key) is None:
                continue
            try:
                nids = nids_of(doc[key])
            except LNetConfigError as e:
                return error("manage", key, e.errno, e.descr)
            if nids:
                vrc, out, err = await lnetctl_cmd.run(rt, [key, *nids])
                rc = vrc or rc
                outs.append(out)
                errs.append(err)
    return rc, "".join(outs), "".join(errs)


def _read(path: str) -> Content:
    if not os.path.isabs(path):
        raise ImportFileError((255, "", "lnetctl import: FILE must be an absolute path (the "
                                        f"node daemon reads it): '{clip(str(path))}'\n"))
    return read_import_file(path)


async def _read_off_loop(path: str) -> Content:
    """``_read`` in a thread, so that the loop serves other requests while a large file is
    parsed (issue 27); the in-process simulator has no loop to keep serving."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _read(path)
    return await asyncio.to_thread(_read, path)


async def _import(rt: NodeRuntime, args: list[str], content: Content | None) -> Result:
    try:
        mode, path = import_target(args)
        if content is None and path is not None:
            content = await _read_off_loop(path)
    except Stop as stop:
        return stop.result
    except ImportFileError as e:
        return e.result
    if content is None:
        return 255, "", ("lnetctl import: no input: the lnetctl command reads stdin and FILE "
                         "and sends their content\n")
    bad = content_error(content)
    if bad is not None:
        return 255, "", f"lnetctl import: {bad}\n"
    doc = content["doc"]
    if mode == "s":
        return 0, show(content), ""
    if mode == "e":
        return await _exec(rt, doc)
    action = "del" if mode == "d" else "add"
    if not rt.engine.configured:
        return error("import", "lnet", -E.ENETDOWN, "LNet is not configured: Network is down")
    try:
        steps = import_commands(doc, delete=mode == "d")
    except LNetConfigError as e:
        return error(action, "import", e.errno, e.descr)
    return await _run_all(rt, steps)


def apply_module_params(rt: NodeRuntime, params: list[tuple[str, str]]) -> None:
    """``modprobe lnet name=value ...``: before LNet is configured (spec §0); the string
    parameters (``networks``, ``ip2nets``, ``routes``) are kept as given, parsed by
    ``lnet configure --all``/``lctl net up`` (nodes/dlc/modparams.py).

    Raises:
        LNetConfigError: unknown parameter or value refused, naming it.
    """
    strings = rt.engine.module_strings
    for name, value in params:
        if name in LND_PARAMS:
            _apply_lnd_param(rt, name, value)
            continue
        if name in CPT_PARAMS:  # libcfs's, read when LNet starts (nodes/lnet/cpt.py)
            rt.engine.set_cpu_param(name, str(value))
            continue
        if name in STRING_MODULE_PARAMS:  # parsed when LNet is configured from them
            setattr(strings, name, str(value))
            continue
        if name not in MODULE_PARAMS:
            known = ", ".join([*MODULE_PARAMS, *STRING_MODULE_PARAMS, *LND_PARAMS, *CPT_PARAMS])
            raise LNetConfigError(-E.EINVAL, f"unknown LNet module parameter '{clip(str(name))}' "
                                             f"(known: {known})")
        apply_module_param(rt.engine.tunables, name, value)
        strings.forwarding_given |= name == "forwarding"


def _apply_lnd_param(rt: NodeRuntime, name: str, value: str) -> None:
    """A socket-side parameter: ``sock_timeout`` is the driver's (``ksocknal_timeout``, on
    every backend); the bulk port is the socklnd's (a simulated node has no sockets: it keeps
    the value and nothing listens)."""
    number = set_lnd_param(rt.timeouts.lnd_params, name, value)
    if name == "ksocklnd.sock_timeout":
        rt.timeouts.set_module_sock_timeout(number)
    if name == "accept_port_bulk":
        rt.set_bulk_port(number)


async def run(rt: NodeRuntime, obj: str, argv: list[str],
              content: Content | None = None) -> Result:
    """Entry point for ``udsp show`` (argv after ``udsp``), ``export`` and ``import``."""
    if obj == "import":
        return await _import(rt, argv, content)
    if not rt.engine.configured:
        return error(argv[0] if obj == "udsp" and argv else "manage", obj, -E.ENETDOWN,
                     "LNet is not configured: Network is down")
    if obj == "export":
        from nodes.dlc.verbs import lnetctl_export

        return await lnetctl_export.run(rt, argv)
    try:
        return await _udsp_show(rt, argv[1:])
    except Stop as stop:
        return stop.result


#: names other modules and tests import from here
__all__ = ["apply_module_params", "import_target", "import_verbs", "run",
           "yaml_token_error"]
