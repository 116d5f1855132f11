"""``lctl add_uuid UUID NID`` and ``lctl del_uuid UUID``: Lustre's UUID -> NIDs table, the path
by which Lustre's configuration hands LNet a server's NIDs (``LNetAddPeer``).

lustre/utils/lustre_cfg.c ``jt_lcfg_add_uuid`` parses the NID ("Can't parse NID X") and sends
LCFG_ADD_UUID; obdclass lustre_peer.c ``class_add_uuid`` appends the NID to the UUID's list
(at most MTI_NIDS_MAX, a longer list keeps the NIDs it has; a UUID longer than UUID_MAX - 1 is
-EOVERFLOW) and calls ``LNetAddPeer`` with the UUID's whole list, which the engine turns into
one peer (``LNetEngine.add_peer``, nodes/lnet/addpeer.py). ``jt_lcfg_del_uuid`` /
``class_del_uuid``: the UUID's entry goes (``_all_``: every entry); an unknown UUID is
-EINVAL, printed as "error: del_uuid: Invalid argument". Peers stay: LNet is not told.

The table belongs to the node (obdclass), not to LNet: ``lnet unconfigure`` keeps it.
"""

from __future__ import annotations

import os
from errno import EOVERFLOW
from typing import TYPE_CHECKING

from nodes.dlc.apply import lnet_add_peer
from nodes.dlc.output import exit_code
from nodes.lnet.actions import Action, Log
from nodes.lnet.errors import EINVAL, LNetConfigError
from nodes.lnet.nid import NID

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime

Result = tuple[int, str, str]

#: lustre_idl.h MTI_NIDS_MAX, lustre_user.h UUID_MAX
MTI_NIDS_MAX = 32
UUID_MAX = 40


def _table(rt: Runtime) -> dict[str, list[NID]]:
    """obdclass's g_uuid_list of the node (``Runtime.dlc_state``: as long as its runtime)."""
    table: dict[str, list[NID]] = rt.dlc_state.setdefault("uuids", {})
    return table


def add_uuid(rt: Runtime, args: list[str]) -> Result:
    """``jt_lcfg_add_uuid`` -> ``class_add_uuid`` -> ``LNetAddPeer``."""
    if len(args) != 2:
        return exit_code(-EINVAL), "", ("add_uuid: associate a UUID with a NID\n"
                                        "usage: add_uuid <uuid> <nid>\n")
    uuid, text = args
    try:
        nid = NID.parse(text)
    except LNetConfigError:
        return exit_code(-1), "", f"Can't parse NID {text}\n"
    if len(uuid) > UUID_MAX - 1:
        return exit_code(-1), "", (f"IOC_PORTAL_ADD_UUID failed: "
                                   f"{os.strerror(EOVERFLOW)}\n")
    nids = _table(rt).setdefault(uuid, [])
    actions: list[Action] = []
    if nid not in nids:
        if len(nids) == MTI_NIDS_MAX:  # CWARN on the console; the NIDs it has go on
            actions.append(Log(level="warning", text=f"{uuid}: can't add NID {nid}: "
                                                     f"rc = {-EOVERFLOW}"))
        else:
            nids.append(nid)
    lnet_add_peer(rt, list(nids), actions)  # apply: where configuration happens
    return 0, f"Added uuid {uuid}: {nid}\n", ""


def del_uuid(rt: Runtime, args: list[str]) -> Result:
    """``jt_lcfg_del_uuid`` -> ``class_del_uuid``."""
    if len(args) != 1:
        return 0, "", "usage: del_uuid <uuid>\n"
    table = _table(rt)
    if args[0] == "_all_":
        table.clear()
    elif table.pop(args[0], None) is None:
        return EINVAL, "", f"error: del_uuid: {os.strerror(EINVAL)}\n"
    return 0, "", ""
