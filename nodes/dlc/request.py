"""The control-socket requests of the front end: ``lnetctl``/``lctl`` argv, typed ``dlc``, lst.

Theory of operation: the node daemon's control server (``nodes/daemon/control.py``, given this
module by the daemon's entry point: the daemon imports nothing of ``nodes/dlc``) hands the
request kinds of ``KINDS`` here. ``lst`` and its console ioctls (``lstio``) go to
``nodes/dlc/verbs/lst_verb.py`` as they are; the other three are validated on receipt and
answered with
``{"rc": N, "out": "...", "err": "..."}`` as the command would print, or ``{"ok": false,
"error": "<one line>"}`` when the request itself is bad:

* ``{"cmd": "lnetctl"|"lctl", "argv": [str, ...]}`` -- argv refused beyond execve's limits
  (``nodes/limits.py``) before any parsing; ``lnetctl import`` may carry
  ``"input": {"name": str, "doc": <parsed YAML>}``, the file content the caller read
  (``nodes/dlc/importfile.py``; ``lnetctl`` and the testbed's ``read_import_file``);
* ``{"cmd": "dlc", "verb": "<verb>", <field>: <value>, ...}`` -- one typed DLC command
  (``nodes/dlc/commands.py`` lists the verbs and fields), the form the orchestrator sends
  instead of argv: ``from_fields`` makes the command, its nets and NIDs parsed here, once (the
  daemon's wire edge), and ``apply_command`` carries it out (``nodes/dlc/apply.py``). An
  orchestrator in this process (the simulator) hands ``apply_command`` its typed command
  directly: no request, nothing parsed again.

A request that fails inside the daemon keeps the reply shape of its command: ``rc`` 1 and the
error on ``err``, so every client -- ``lnetctl``, ``lctl``, ``testbed lnetctl`` -- shows it
(issue 11 item 8).
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from typing import TYPE_CHECKING, Any

from nodes.dlc import debuglog
from nodes.dlc.apply import apply
from nodes.dlc.commands import (
    COMMANDS,
    Command,
    CommandError,
    field_types,
    parse_net_field,
    parse_nid_field,
)
from nodes.dlc.importfile import content_error
from nodes.dlc.verbs import lctl_cmd, lnetctl_cmd, lst_verb
from nodes.limits import argv_error
from nodes.lnet.nid import NID, Net

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

log = logging.getLogger("control")
#: the argv and typed DLC requests, then lnet_selftest's (``lst_verb.VERBS``)
KINDS = ("lnetctl", "lctl", "dlc", *lst_verb.VERBS)
debuglog.install()  # this process serves a node: its engine log feeds `lctl dk`


async def handle(rt: NodeRuntime, req: dict[str, Any]) -> dict[str, Any]:
    """Answer one front-end request (``req["cmd"]`` is one of ``KINDS``)."""
    cmd = req["cmd"]
    if cmd in lst_verb.VERBS:  # lnet_selftest: lst and its console ioctls
        return await lst_verb.dispatch(rt, req)
    if cmd == "dlc":
        fields = {k: v for k, v in req.items() if k not in ("cmd", "verb")}
        try:
            command = from_fields(req.get("verb"), fields)
        except CommandError as e:
            return {"ok": False, "error": str(e)}
        return await apply_command(rt, command)
    argv = req.get("argv")
    bad = argv_error(cmd, argv)
    if bad is not None:
        return {"ok": False, "error": bad}
    content = req.get("input")
    if content is not None:
        why = content_error(content) if cmd == "lnetctl" else "only lnetctl takes input"
        if why is not None:
            return {"ok": False, "error": f"{cmd}: input: {why}"}
    if cmd == "lnetctl":
        return await _run(rt, cmd, lambda: lnetctl_cmd.run(rt, argv, content))
    return await _run(rt, cmd, lambda: lctl_cmd.run(rt, argv))


async def apply_command(rt: NodeRuntime, command: Command) -> dict[str, Any]:
    """Carry out one typed DLC command; the reply of a ``dlc`` request."""
    return await _run(rt, "dlc", lambda: apply(rt, command))


def from_fields(verb: object, fields: dict[str, Any]) -> Command:
    """Build the command ``verb`` from request fields: lists become tuples, the text of a net
    or NID field its ``Net``/``NID`` (the one parse of a request's nets and NIDs).

    Raises:
        CommandError: unknown verb, unknown/missing field, or a field that does not validate.
    """
    cls = COMMANDS.get(verb) if isinstance(verb, str) else None
    if cls is None:
        raise CommandError(f"dlc: unknown verb {verb!r:.40} (known: {', '.join(COMMANDS)})")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(k for k in fields if k not in known)
    if unknown:
        raise CommandError(f"dlc {cls.verb}: unknown field '{unknown[0]:.40}'")
    hints = field_types(cls)
    kw = {k: _decode(cls.verb, k, hints[k], v) for k, v in fields.items()}
    try:
        return cls(**kw)
    except TypeError as e:  # a required field is missing
        raise CommandError(f"dlc {cls.verb}: {e}") from None


def _decode(verb: str, name: str, hint: Any, value: Any) -> Any:
    """One field's JSON value as its type; a value of the wrong JSON type is left for the
    command's own check (``expected a net, not 5``)."""
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return tuple(_decode(verb, name, item, v) for v in value) \
            if isinstance(value, list) else value
    if not isinstance(value, str):
        return value
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    kinds = typing.get_args(hint) if union else (hint,)
    if Net in kinds:
        return parse_net_field(verb, name, value)
    if NID in kinds:
        return parse_nid_field(verb, name, value)
    return value


async def _run(rt: NodeRuntime, tool: str, call: Any) -> dict[str, Any]:
    try:
        rc, out, err = await call()
    except Exception as e:  # a bug: the client still gets the reason (issue 11 item 8)
        log.exception("%s request failed", tool)
        return {"ok": False, "rc": 1, "out": "", "err": f"{tool}: internal error: {e!r}\n",
                "error": f"internal error: {e!r}"}
    rt.flush_notices()  # e.g. `lnetctl net set --health`: status changes
    return {"rc": rc, "out": out, "err": err}
