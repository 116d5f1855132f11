"""The control requests of a testbed's ``ctl.sock``, checked field by field before use.

Theory of operation (issue 11 item 3): the Mininet supervisor and the sim server read JSON
requests from a ZeroMQ ROUTER that any process of the owner can write to. One request with a
list where a string belongs (``{"cmd": "link", "node": ["c1"]}``) used to kill the
supervisor, leaving its testbed up with nobody to take it down. Here every request is parsed
and checked against :data:`REQUESTS` (field -> accepted type, required or not) before a
handler sees it; what does not fit is refused with one line naming the field, and the
process goes on serving. Bounds: a request body of at most :data:`MAX_REQUEST_BYTES`, the
node daemons' bound (``nodes/limits.py``: every request carrying a largest argv, 2 MiB
as execve's ``ARG_MAX``, fits), refused with an error; a frame past four times that is dropped
by ZeroMQ unread (``ZMQ_MAXMSGSIZE``, :data:`MAX_FRAME_BYTES`), and the client
(``nodes/daemon/client.py``) refuses to send a body past the bound, so none of ours goes
unanswered (issue 27 item 2: a 1 MiB bound here under a README promising 2 MiB of argv
left ``testbed lnetctl`` waiting forever). JSON nested at most :data:`MAX_DEPTH` deep.
Fields a request does not list are not read by anyone, and ignored. Commands not listed
here are left to the server (which refuses them as unknown, or serves one a later issue
added).
"""

from __future__ import annotations

import json
from typing import Any

from nodes import limits
from nodes.echo import shown

#: Largest request body read: one number with the node daemons' (an lnetctl argv of up to
#: ARG_MAX, the sim server's node verbs carry it).
MAX_REQUEST_BYTES = limits.MAX_REQUEST_BYTES
#: Largest frame ZeroMQ reads at all (``ZMQ_MAXMSGSIZE``); larger ones are dropped unread.
MAX_FRAME_BYTES = 4 * MAX_REQUEST_BYTES
#: Deepest JSON nesting accepted (a fault spec's ``match`` is the deepest, at 3).
MAX_DEPTH = 32

_STR = (str,)
_NUM = (int, float)
#: command -> field -> (accepted types, required). ``bool`` is not an int here.
REQUESTS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "status": {},
    "down": {},
    "link": {"node": (_STR, True), "iface": (_STR, True), "state": (_STR, True)},
    "fault_add": {"spec": ((dict,), True)},
    "fault_list": {"residue": ((bool,), False)},
    "fault_del": {"id": (_STR, True)},
    "fault_clear": {},
    "reload": {"node": (_STR, True), "modules": ((dict,), True)},
    # the sim server's own (testbed/sim/server.py)
    "clock": {"op": (_STR, False), "seconds": (_NUM, False)},
    "lnetctl": {"node": (_STR, True), "argv": ((list,), True)},
    "lctl": {"node": (_STR, True), "argv": ((list,), True)},
    "sysfs": {"node": (_STR, True), "argv": ((list,), True)},  # testbed/sim/sysfs_exec.py
    "put": {"node": (_STR, True), "dst": (_STR, True), "count": ((int,), False),
            "size": ((int,), False), "src": (_STR, False), "numa": ((int,), False)},
    "get": {"node": (_STR, True), "dst": (_STR, True), "count": ((int,), False),
            "size": ((int,), False), "src": (_STR, False), "numa": ((int,), False)},
    "log": {"node": (_STR, True)},
    # the vagrant/hosts supervisor's own (testbed/vagrant/supervisor.py)
    "events_sync": {"all": ((bool,), False)},
}
#: fields whose value must also be one of these
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("link", "state"): ("up", "down"),
    ("clock", "op"): ("show", "advance"),
}


class RequestError(ValueError):
    """A refused request; the message is one line naming the field."""


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (bounded by MAX_DEPTH + 1)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else \
            item if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse(body: bytes) -> dict[str, Any]:
    """One request body -> a checked request (see :func:`check`).

    Raises:
        RequestError: not JSON, too large or too deep, or a field of the wrong type.
    """
    if len(body) > MAX_REQUEST_BYTES:
        raise RequestError(f"request larger than {MAX_REQUEST_BYTES} bytes")
    try:
        msg = json.loads(body)
    except RecursionError:  # the parser recurses per level: a million '[' end here
        raise RequestError(f"request nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise RequestError("request is not JSON") from None
    return check(msg)


def check(msg: Any) -> dict[str, Any]:
    """``msg`` if it is a request whose listed fields have the listed types and values.

    Raises:
        RequestError: one line naming the command and the field.
    """
    if not isinstance(msg, dict):
        raise RequestError(f"request must be a JSON object, not {_kind(msg)}")
    cmd = msg.get("cmd")
    if not isinstance(cmd, str):
        raise RequestError(f"request field 'cmd' must be a string, not {_kind(cmd)}")
    if _depth(msg) > MAX_DEPTH:
        raise RequestError(f"{cmd}: request nested deeper than {MAX_DEPTH} levels")
    for field, (types, required) in REQUESTS.get(cmd, {}).items():
        if field not in msg or (msg[field] is None and not required):
            if required:
                raise RequestError(f"{cmd}: field {field!r} is required")
            continue
        value = msg[field]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            want = " or ".join(_kind(t()) for t in types)
            raise RequestError(f"{cmd}: field {field!r} must be {want}, not {_kind(value)}")
        allowed = CHOICES.get((cmd, field))
        if allowed is not None and value not in allowed:
            raise RequestError(f"{cmd}: field {field!r} must be one of {', '.join(allowed)}, "
                               f"not {shown(value)}")
        if field == "argv" and not all(isinstance(a, str) for a in value):
            bad = next(a for a in value if not isinstance(a, str))
            raise RequestError(f"{cmd}: field 'argv' must be a list of strings, not one "
                               f"holding {_kind(bad)}")
    return msg
