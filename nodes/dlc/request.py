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
  instead of argv; applied by ``nodes/dlc/apply.py``.

A request that fails inside the daemon keeps the reply shape of its command: ``rc`` 1 and the
error on ``err``, so every client -- ``lnetctl``, ``lctl``, ``testbed lnetctl`` -- shows it
(issue 11 item 8).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nodes.dlc import debuglog
from nodes.dlc.apply import apply
from nodes.dlc.commands import CommandError, from_fields
from nodes.dlc.importfile import content_error
from nodes.dlc.verbs import lctl_cmd, lnetctl_cmd, lst_verb
from nodes.limits import argv_error

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
        return await _run(rt, cmd, lambda: apply(rt, command))
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


async def _run(rt: NodeRuntime, tool: str, call: Any) -> dict[str, Any]:
    try:
        rc, out, err = await call()
    except Exception as e:  # a bug: the client still gets the reason (issue 11 item 8)
        log.exception("%s request failed", tool)
        return {"ok": False, "rc": 1, "out": "", "err": f"{tool}: internal error: {e!r}\n",
                "error": f"internal error: {e!r}"}
    rt.flush_notices()  # e.g. `lnetctl net set --health`: status changes
    return {"rc": rc, "out": out, "err": err}
