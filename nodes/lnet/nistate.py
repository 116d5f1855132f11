"""Local NI state: NIs added and removed, link (fatal) state, manual health, and one
error-level log line for every change of a local NI's state (seed 000 dbg-110).

Theory of operation: a local NI's status moves in many places (send/receive health, spec
§3.1-3.2; recovery pings, §3.5; ``net set --health``, §3.6; the router checker's
``lnet_update_ni_status_locked``, §6.4). Rather than a log call at each, ``NIStateLog``
remembers the status last logged for every NI and ``status_logs`` compares: each status that
moved, each NI added and each NI removed gives one ``Log(level="error")``. The engine sweeps
at the end of ``handle``, ``handle_timer`` and ``ni_set_fatal``; code that knows why a status
moved (a send's health status, a recovery ping) logs through ``log_status`` with that reason;
changes made by calls that return no actions (``net add/del``, ``net set --health``) make
``deadline`` due at once, so the next tick logs them. Link changes (the LND's carrier events,
``lnet_set_link_fatal_state``) have their own error line here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodes.lnet import recovery, udsp
from nodes.lnet.actions import Action, Log
from nodes.lnet.errors import EEXIST, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.health import set_ni_health
from nodes.lnet.ni import LNET_NI_STATUS_UP, LNetNet, LNetNI
from nodes.lnet.nid import LO_NET, NID, Net
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine


class NIStateLog:
    """The status last logged per local NI, and why a pending change happened if known."""

    def __init__(self) -> None:
        self.logged: dict[LNetNI, int] = {}
        self.why: dict[LNetNI, str] = {}


def _word(status: int) -> str:
    return "up" if status == LNET_NI_STATUS_UP else "down"


def log_status(eng: LNetEngine, ni: LNetNI, why: str) -> list[Action]:
    """dbg-110: the error line for ``ni``'s status change, if it moved since last logged.
    An NI not announced yet is left to ``status_logs`` (its "added" line carries it)."""
    st = eng.nistate
    old = st.logged.get(ni)
    if old is None or old == ni.status:
        return []
    st.logged[ni] = ni.status
    st.why.pop(ni, None)
    return [Log(level="error", text=f"local NI {ni.nid} status {_word(ni.status)}: health "
                                    f"{ni.healthv} after {why}")]


def status_logs(eng: LNetEngine) -> list[Action]:
    """Every local NI state change not logged yet: added, removed, status up/down."""
    st = eng.nistate
    logs: list[Action] = []
    live = eng.local_nis()
    for ni in live:
        if ni not in st.logged:
            st.logged[ni] = ni.status
            logs.append(Log(level="error", text=f"local NI {ni.nid} added on {ni.interface}: "
                                                f"status {_word(ni.status)}"))
        elif st.logged[ni] != ni.status:
            logs += log_status(eng, ni, st.why.get(ni, "a health change"))
    if len(st.logged) != len(live):
        alive = set(live)
        for ni in [n for n in st.logged if n not in alive]:
            del st.logged[ni]
            st.why.pop(ni, None)
            logs.append(Log(level="error", text=f"local NI {ni.nid} removed from "
                                                f"{ni.interface}"))
    return logs


def pending(eng: LNetEngine) -> bool:
    """A change ``status_logs`` would log (the engine's deadline is then due at once)."""
    logged = eng.nistate.logged
    count = 0
    for ni in eng.local_nis():
        count += 1
        if logged.get(ni) != ni.status:
            return True
    return count != len(logged)


# ------------------------------------------------------------------ NI add / del (DLC)
def net_add(eng: LNetEngine, net: Net, interface: str, nid: NID, *,
            peer_credits: int | None, credits: int | None, peer_timeout: int | None,
            cpts: tuple[int, ...], numa: int | None) -> LNetNI:
    """``lnetctl net add`` (cfg-020, cfg-040); see ``LNetEngine.net_add``."""
    if net == LO_NET:
        raise LNetConfigError(-EINVAL, "cannot add network: Invalid argument")
    if numa is not None and numa < 0:
        raise LNetConfigError(-EINVAL, f"cannot add network: invalid NUMA node {numa}")
    if any(ni.nid == nid for ni in eng.local_nis()):
        raise LNetConfigError(-EEXIST, "cannot add network: File exists")
    lnet = eng.nets.get(net)
    if lnet is None:
        lnet = LNetNet(net)
        if peer_credits is not None:
            lnet.tunables.peer_credits = peer_credits
        if credits is not None:
            lnet.tunables.credits = credits
        if peer_timeout is not None:
            lnet.tunables.peer_timeout = peer_timeout
        eng.nets[net] = lnet
        udsp.on_net(eng, lnet)  # spec §7.3: rules applied to a new net
    elif any(ni.interface == interface for ni in lnet.nis):
        raise LNetConfigError(-EEXIST, "cannot add network: File exists")
    elif not eng.multi_rail:  # downrev LNet: one NI per net (discovery.py, bck-*)
        raise LNetConfigError(-EEXIST, f"cannot add network: non-Multi-Rail node "
                                       f"already has an NI on {net}")
    max_cr = lnet.tunables.credits
    ni = LNetNI(nid, interface, lnet, cpts=cpts, tx_credits=max_cr, max_tx_credits=max_cr,
                min_tx_credits=max_cr, dev_cpt=-1 if numa is None else numa)
    lnet.nis.append(ni)
    udsp.on_ni(eng, ni)  # spec §7.3: rules applied to a new NI
    eng._ping_changed()
    # peer NIs on this net created before it existed now get credits (spec §1.3)
    for lpni in eng.peers.by_nid.values():
        if lpni.nid.net == net and lpni.max_tx_credits == 0:
            c = lnet.tunables.peer_credits
            lpni.tx_credits = lpni.max_tx_credits = lpni.min_tx_credits = c
            lpni.rtr_credits = lpni.min_rtr_credits = c
    return ni


def net_del(eng: LNetEngine, net: Net, interface: str | None) -> list[NID]:
    """``lnetctl net del --net N [--if IF]``: returns the NIDs removed."""
    lnet = eng.nets.get(net)
    if lnet is None or net == LO_NET:
        raise LNetConfigError(-ENOENT, "cannot delete network: No such file or directory")
    victims = [ni for ni in lnet.nis if interface is None or ni.interface == interface]
    if not victims:
        raise LNetConfigError(-ENOENT, "cannot delete network: No such file or directory")
    for ni in victims:
        lnet.nis.remove(ni)
        if ni in eng.ni_recoveryq:
            eng.ni_recoveryq.remove(ni)
    if not lnet.nis:
        del eng.nets[net]
    eng._ping_changed()
    return [ni.nid for ni in victims]


# ------------------------------------------------------------------ link state and health
def ni_set_fatal(eng: LNetEngine, nid: NID, fatal: bool, now: float,
                 cause: str) -> list[Action]:
    """``lnet_set_link_fatal_state``; see ``LNetEngine.ni_set_fatal``."""
    ni = eng.ni_by_nid(nid)
    if ni is None or ni.is_lo:
        return [Log(level="warning", text=f"link state change for unknown NI {nid}")]
    old = ni.fatal_error
    ni.fatal_error = fatal
    if old == fatal:
        return []
    if fatal:
        ni.link_events.down += 1
    else:
        ni.link_events.up += 1
    eng.notices.emit("ni_link", nid=str(nid), link="down" if fatal else "up", cause=cause)
    # the NI's status is updated in place in the ping buffer: no rebuild, no push (§5.1)
    if not fatal:
        if ni.healthv == LNET_MAX_HEALTH_VALUE:
            ni.status = LNET_NI_STATUS_UP
        else:
            recovery.ni_enqueue(eng, ni, now, manual=True)
    return [Log(level="error", text=f"local NI {nid} link {'down' if fatal else 'up'}: "
                                    f"fatal state {'set' if fatal else 'cleared'}"),
            *log_status(eng, ni, f"link {'down' if fatal else 'up'}")]


def net_set_health(eng: LNetEngine, nid: NID | None, value: int, now: float) -> None:
    """``lnetctl net set --nid X|--all --health V`` (spec §3.6; out of range -> 1000). A
    status change is logged at the next tick, which ``pending`` makes due at once."""
    if not 0 <= value <= LNET_MAX_HEALTH_VALUE:
        value = LNET_MAX_HEALTH_VALUE
    for ni in eng.local_nis():
        if nid is not None and ni.nid != nid:
            continue
        was = ni.status
        set_ni_health(ni, value)
        if ni.status != was:
            eng.nistate.why[ni] = "lnetctl net set --health"
        recovery.ni_enqueue(eng, ni, now, manual=True)
