"""``lnetctl set <tunable> <value>``: the liblnetconfig and kernel layers (spec §9.1).

Theory of operation: the value arrives parsed (``nodes/dlc/parse.py`` ran lnetctl's
``parse_long``, the first layer, and built a ``SetTunable``); ``apply_set`` runs the other two
layers of real LNet with their texts, from the one tunable table (``nodes/dlc/tunables.py``):

2. liblnetconfig passes the ``long`` on as a C ``int``, applies its own range check
   (``response_tracking`` 0..3, ``recovery_limit`` >= 0, ``max_recovery_ping_interval`` > 0:
   LUSTRE_CFG_RC_BAD_PARAM; router buffers >= -1: LUSTRE_CFG_RC_OUT_OF_RANGE_PARAM, entity
   ``buf``, -1 leaving a pool alone, 0 its default size) and coerces what the kernel gets
   (``discovery``/``drop_asym_route`` as 0/1, ``numa_range`` as the ioctl's __u32, so -1 is
   shown as 4294967295);
3. the kernel setter is the engine's ``set_tunable``; a refusal through sysfs comes back from
   ``write_sysfs_file`` as LUSTRE_CFG_RC_GENERIC_ERR (-61) with ``cannot configure <words>:
   <strerror>``; ``numa_range`` goes by ioctl: -errno and ``cannot configure numa_range to <v>:
   <strerror>``; routing: ``cannot enable|disable routing <strerror>``.

Testbed-only tunables (router checker knobs, ``forwarding``) keep the engine's own text.
"""

from __future__ import annotations

import errno as errno_mod
import os
from typing import TYPE_CHECKING

from nodes.dlc.output import Result, error, exit_code
from nodes.dlc.output import parser_error as _parser_error
from nodes.dlc.tunables import TUNABLES, c_int, coerced, lib_refusal, parse_long
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.tunables import Tunables

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

#: liblnetconfig.h LUSTRE_CFG_RC_GENERIC_ERR: what write_sysfs_file returns on a failed write
LUSTRE_CFG_RC_GENERIC_ERR = -61

__all__ = ["apply_set", "c_int", "parse_long", "parser_error"]


def parser_error(text: str) -> str:
    """``cYAML_build_error(-1, -1, "parser", "set", text)`` as cYAML prints it."""
    return _parser_error("parser", "set", text)


def _fail(entity: str, errno: int, descr: str) -> Result:
    return error("add", entity, errno, descr)


def apply_set(rt: NodeRuntime, name: str, long_value: int) -> Result:
    """Layers 2 and 3 of ``lnetctl set NAME VALUE`` on the node's engine."""
    spec = TUNABLES.get(name)
    value = c_int(long_value)
    if spec is not None:
        refused = lib_refusal(spec, value)
        if refused is not None:
            return _fail(spec.entity, *refused)
        value = coerced(spec, value)
        if spec.via == "buffers":
            if value == -1:  # "-1 indicates to ignore changes to this field"
                return 0, "", ""
            if value == 0:  # lnet_nrb_*_calculate: 0 means the default number of buffers
                value = getattr(Tunables(), name)
    try:
        rt.execute(rt.engine.set_tunable(name, value, rt.now()))  # re-arms the timer
    except LNetConfigError as e:
        why = os.strerror(-e.errno)
        if spec is None:
            return _fail(name, e.errno, e.descr)
        if spec.via == "sysfs":
            return _fail(spec.entity, LUSTRE_CFG_RC_GENERIC_ERR,
                         f"cannot configure {spec.words}: {why}")
        if spec.via == "ioctl":
            return _fail(name, e.errno, f"cannot configure numa_range to {c_int(value)}: {why}")
        if spec.via == "buffers":
            return _fail("buf", e.errno, f"cannot configure buffers: {why}")
        verb = "enable" if value else "disable"
        return (exit_code(e.errno), "", error("add" if value else "del", "routing", e.errno,
                                              f"cannot {verb} routing {why}")[2])
    return 0, "", ""


def set_multi_rail(rt: NodeRuntime, value: int) -> Result:
    """``lnetctl set multi_rail 0|1`` (testbed only): 0 makes this node a non-Multi-Rail
    ("downrev") node: no MULTI_RAIL/DISCOVERY feature bits, pushes dropped, never initiates
    discovery, one NI per net (seed 000 Backwards Compatibility). Only before any NI exists."""
    if rt.engine.local_nis():
        return _fail("multi_rail", -errno_mod.EBUSY,
                     "multi_rail can only be set before any NI is added")
    rt.engine.multi_rail = value == 1
    return 0, "", ""
