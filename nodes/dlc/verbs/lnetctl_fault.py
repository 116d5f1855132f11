"""``lnetctl fault drop|delay add|del|reset|show`` and the option parsing lctl shares (spec §8.1).

Theory of operation: both front ends take the same getopt options (lnetctl.c ``jt_fault_add``,
portals.c ``fault_simul_rule_add``): short letters ``-s -d -o -r -i -n -x -e -m -p -l`` and the
long names ``--source --dest --local_nid --rate --interval --random --drop_all --health_error
--message --portal --latency``; ``parse_add`` turns them into a ``FaultAttr`` or raises
``LNetConfigError`` carrying the message the real tool prints. The rules themselves live in the
engine (``nodes/lnet/fault.py``). ``show`` prints the kernel's YAML keys (``fault:`` sequence).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.dlc import getopt
from nodes.echo import clip
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.faultrule import (
    HEALTH_ERRORS,
    HSTATUS_RANDOM,
    MSG_BITS,
    FaultAttr,
    parse_fault_nid,
)
from nodes.lnet.hdr import LNET_MAX_PORTALS
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

Result = tuple[int, str, str]

_ADD_LONG = ["source=", "dest=", "local_nid=", "rate=", "interval=", "random", "drop_all",
             "health_error=", "message=", "portal=", "latency=", "rule_type="]
_DEL_LONG = ["source=", "dest=", "all"]
_SHORT = {"drop": "s:d:o:r:i:p:m:e:nxt:", "delay": "s:d:o:r:l:p:m:"}
_LONG_TO_SHORT = {"source": "s", "dest": "d", "local_nid": "o", "rate": "r", "interval": "i",
                  "random": "n", "drop_all": "x", "health_error": "e", "message": "m",
                  "portal": "p", "latency": "l", "rule_type": "t", "all": "a"}


def _getopt(argv: list[str], short: str, long: list[str]) -> list[tuple[str, str]]:
    """glibc ``getopt_long`` (``nodes/dlc/getopt.py``: prefixes, ``--opt=value``)."""
    longs = tuple(getopt.LongOpt(name.rstrip("="), getopt.REQUIRED if name.endswith("=")
                                 else getopt.NO_ARG, _LONG_TO_SHORT[name.rstrip("=")])
                  for name in long)
    try:
        opts, rest = getopt.parse("fault", argv, short, longs)
    except getopt.GetoptError as e:
        # glibc's line, then portals.c's own (``fault_simul_rule_add``)
        raise LNetConfigError(-EINVAL, f"{e.message}\nerror: {e.message.split(':')[0]}: "
                                       f"option '{clip(str(e.word))}' unrecognized") from e
    if rest:
        raise LNetConfigError(-EINVAL, f"error: unexpected argument '{clip(str(rest[0]))}'")
    return [(o, v or "") for o, v in opts]


def _uint(text: str, what: str) -> int:
    """``strtoul(optarg, NULL, 0)``, but refusing garbage instead of reading it as 0."""
    try:
        value = int(text.strip(), 0)
    except ValueError:
        raise LNetConfigError(-EINVAL, f"invalid {what}: '{clip(str(text))}'") from None
    if not 0 <= value <= 0xFFFF_FFFF:
        raise LNetConfigError(-EINVAL, f"invalid {what}: '{clip(str(text))}'")
    return value


def parse_add(kind: str, argv: list[str]) -> FaultAttr:
    """Options of ``net_drop_add``/``net_delay_add``/``fault drop|delay add`` -> FaultAttr.

    Raises:
        LNetConfigError: a bad option or value (message as lctl/lnetctl print it).
    """
    if not argv:
        raise LNetConfigError(-EINVAL, "Failed, please provide source, destination and rate "
                                       "of rule")
    attr = FaultAttr(src=None, dst=None)
    src = dst = local = None
    for opt, val in _getopt(argv, _SHORT[kind], _ADD_LONG):
        if opt == "s":
            src = val
        elif opt == "d":
            dst = val
        elif opt == "o":
            local = val
        elif opt == "r":
            attr.rate = _uint(val, "rate")
        elif opt == "i":
            attr.interval = _uint(val, "interval")
        elif opt == "l":
            attr.latency = _uint(val, "latency")
        elif opt == "n":
            attr.random = True
        elif opt == "x":
            attr.drop_all = True
        elif opt == "e":
            name = val.strip().lower()
            if name == "random":
                attr.health_mask = HSTATUS_RANDOM
            elif name in HEALTH_ERRORS:
                attr.health_mask |= 1 << HEALTH_ERRORS[name]
            else:
                raise LNetConfigError(-EINVAL, f"unknown health error '{clip(str(val))}' (valid: "
                                               f"{', '.join(HEALTH_ERRORS)}, random)")
        elif opt == "m":
            bit = MSG_BITS.get(val.strip().lower())
            if bit is None:
                raise LNetConfigError(-EINVAL, f"unknown message type {val}")
            attr.msg_mask |= bit
        elif opt == "p":
            ptl = _uint(val, "portal")
            if ptl >= LNET_MAX_PORTALS:
                raise LNetConfigError(-EINVAL, f"invalid portal: {ptl}")
            attr.ptl_mask |= 1 << ptl
    if src is None or dst is None:
        # same order as the tools: rate/interval/latency checks come first
        probe = FaultAttr(src=None, dst=None, rate=attr.rate, interval=attr.interval,
                          latency=attr.latency, random=attr.random)
        probe.validate(kind)
        raise LNetConfigError(-EINVAL, f"Please provide both source and destination of "
                                       f"{kind} rule")
    attr.src, attr.dst = parse_fault_nid(src), parse_fault_nid(dst)
    attr.local_nid = parse_fault_nid(local) if local is not None else None
    return attr


def parse_del(argv: list[str]) -> tuple[Any, Any]:
    """``-s SRC -d DST`` or ``-a`` -> (src, dst) where None means any."""
    if not argv:
        raise LNetConfigError(-EINVAL, "Failed, please provide source and destination of rule")
    opts = dict(_getopt(argv, "s:d:a", _DEL_LONG))
    if "a" in opts:
        if "s" in opts or "d" in opts:
            raise LNetConfigError(-EINVAL, "'-s' or '-d' cannot be combined with '-a'")
        return None, None
    if "s" not in opts or "d" not in opts:
        raise LNetConfigError(-EINVAL, "Failed, please provide source and destination of rule")
    return parse_fault_nid(opts["s"]), parse_fault_nid(opts["d"])


def kick(rt: NodeRuntime) -> None:
    """Let the driver send what a deleted delay rule released (and re-arm its timer)."""
    rt.execute(rt.engine.handle_timer(rt.now()))


# ---------------------------------------------------------------------------- lnetctl
_VERBS = ("add", "del", "reset", "show")


async def run(rt: NodeRuntime, argv: list[str]) -> Result:
    """``lnetctl fault KIND VERB ...`` (argv starts after ``fault``)."""
    if len(argv) < 2 or argv[0] not in ("drop", "delay") or argv[1] not in _VERBS:
        return 255, "", ("usage: lnetctl fault drop|delay add|del|reset|show [options]\n"
                         "       (add: --source NID --dest NID --rate R|--interval I ...)\n")
    kind, verb, rest = argv[0], argv[1], argv[2:]
    faults = rt.engine.faults
    try:
        if verb == "add":
            faults.add(kind, parse_add(kind, rest), rt.now())
            return 0, "", ""
        if verb == "del":
            src, dst = parse_del(rest)
            faults.delete(kind, src, dst, rt.now())
            kick(rt)
            return 0, "", ""
        if rest:
            raise LNetConfigError(-EINVAL, f"error: unexpected argument '{clip(str(rest[0]))}'")
        if verb == "reset":
            faults.reset(kind, rt.now())
            return 0, "", ""
    except LNetConfigError as e:
        return 255, "", f"{e.descr}\n"
    rules = faults.rules(kind)
    return 0, (dump({"fault": [r.show() for r in rules]}) if rules else ""), ""
