"""Carry out a typed DLC command on a node runtime: the one place configuration happens.

Theory of operation: ``apply(rt, cmd)`` takes any ``Command`` (from lnetctl argv, from a
control-socket request, from ``import``) and calls the engine's DLC surface through the
runtime (``NodeRuntime`` on a node daemon, ``SimRuntime`` in the simulator), returning what
lnetctl prints: ``(rc, stdout, stderr)`` with the kernel's refusals as error YAML under the
command's ``add``/``del``/``set`` entry. What each branch follows: ``net add`` ->
``lnet_dyn_add_ni`` (api-ni.c), tunables < 0 meaning the LND default
(``lnet_ni_tunables_default``); ``net del`` -> ``lnet_dyn_del_ni``; ``net set`` ->
``set_value_helper``/``yaml_lnet_config_ni_value``; ``peer add|del`` -> ``lnet_add_peer_ni``/
``lnet_del_peer_ni``; ``route add|del`` -> ``lnet_add_route``/``lnet_del_route`` per gateway,
stopping at the first refusal as ``lnet_genl_parse_route`` does; ``udsp`` -> udsp.c;
``set`` -> ``nodes/dlc/verbs/lnetctl_set.py``. ``lctl add_uuid`` (``nodes/dlc/verbs/lctl_uuid.py``)
keeps obdclass's UUID table and hands LNet the UUID's NIDs here (``lnet_add_peer``:
``LNetAddPeer``).
"""

from __future__ import annotations

import errno as E
from typing import TYPE_CHECKING, Any

from nodes.dlc import commands as C
from nodes.dlc import glue, modparams
from nodes.dlc.ip2nets import parse_legacy, resolve
from nodes.dlc.nidlist import parse_expr_list
from nodes.dlc.output import Result, error, exit_code
from nodes.lnet import udsp
from nodes.lnet.actions import Action
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID, Net

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

#: verbs that work before ``lnet configure`` (lnetctl reaches the kernel either way)
UNCONFIGURED_OK = (C.LnetConfigure, C.LnetUnconfigure, C.SetTunable)


def not_configured(rt: NodeRuntime, cmd: C.Command) -> Result | None:
    """The error of a command that needs LNet up when it is down, else None."""
    if isinstance(cmd, UNCONFIGURED_OK) or rt.engine.configured:
        return None
    entity = cmd.verb.split("_")[0]
    action = cmd.verb.split("_")[1] if "_" in cmd.verb else "manage"
    return error(action, entity, -E.ENETDOWN, "LNet is not configured: Network is down")


def _cpts(text: str | None) -> tuple[int, ...] | None:
    """``--cpt``: a ``cfs_expr_list``; lnetctl ignores one that does not parse."""
    if text is None:
        return None
    try:
        exprs = parse_expr_list(text)
    except LNetConfigError:
        return None
    values: list[int] = []
    for r in exprs:
        values.extend(range(r.lo, min(r.hi, r.lo + 1024 * r.stride) + 1, r.stride))
    return tuple(dict.fromkeys(values)) or None


async def _add_nis(rt: NodeRuntime, net: Net, ifaces: list[str], cmd: C.NetAdd,
                   address: str | None = None) -> None:
    """``address``: the NI's IP when a NID named it (``lnet_inet_select`` with the address
    set: a large NID picks the interface's IPv6 address even where it has an IPv4 one)."""
    kw: dict[str, Any] = {} if address is None else {"address": address}
    if cmd.peer_credits > 0:
        kw["peer_credits"] = cmd.peer_credits
    if cmd.credits > 0:
        kw["credits"] = cmd.credits
    if cmd.peer_timeout >= 0:  # -1: the LND default (lnet_ni_tunables_default)
        kw["peer_timeout"] = cmd.peer_timeout
    cpts = _cpts(cmd.cpt)
    if cpts is not None:
        kw["cpts"] = cpts
    if cmd.numa is not None:
        kw["numa"] = cmd.numa
    if cmd.tos != -1 and not glue.tos_supported():
        raise LNetConfigError(-E.EOPNOTSUPP, "cannot add network: setting the ToS of an NI "
                                             "is not supported yet")
    for iface in ifaces:
        nid = await rt.net_add(net, iface, **kw)
        glue.set_ni_lnd_tunables(rt, nid, cmd.conns_per_peer, cmd.tos)
        glue.set_o2ib_tunables(rt, nid, cmd.lnd_tunables)
        glue.set_peer_buffer_credits(rt.engine, nid, cmd.peer_buffer_credits)


async def _net_add(rt: NodeRuntime, cmd: C.NetAdd) -> None:
    if cmd.ip2net is not None:
        local = glue.local_addresses(rt)
        done = 0
        for rule in parse_legacy(cmd.ip2net):
            try:
                ifaces = resolve(rule, local)
            except LNetConfigError:
                continue
            await _add_nis(rt, Net.parse(rule.net), list(ifaces), cmd)
            done += 1
        if not done:
            raise LNetConfigError(-E.ENOENT, "cannot add network: no ip2net rule matched")
        return
    for nid in cmd.nids:
        await _add_nis(rt, nid.net, [glue.interface_of(rt, nid)], cmd,
                       nid.ip if nid.is_large else None)
    if cmd.net is not None:  # NetAdd validates: net, nids or ip2net (net not with nids)
        await _add_nis(rt, cmd.net, list(cmd.interfaces), cmd)


async def _net_del(rt: NodeRuntime, cmd: C.NetDel) -> None:
    if cmd.nids:
        for nid in cmd.nids:
            ni = rt.engine.ni_by_nid(nid)
            if ni is None or ni.is_lo:
                raise LNetConfigError(-E.ENOENT, "cannot delete network: No such file or "
                                                 "directory")
            await rt.net_del(ni.nid.net, ni.interface)
        return
    assert cmd.net is not None
    for iface in cmd.interfaces or (None,):
        await rt.net_del(cmd.net, iface)


def _net_set(rt: NodeRuntime, cmd: C.NetSet) -> None:
    if cmd.lnd_timeout >= 0:  # yaml_lnet_config_ni_value returns after it
        assert cmd.net is not None
        if not rt.timeouts.set_lnd_timeout(cmd.net, cmd.lnd_timeout):
            raise LNetConfigError(-E.ENOENT, f"no NI on net {cmd.net}")
        return
    if cmd.health == -1 and cmd.conns_per_peer == -1:
        return
    if not cmd.all and cmd.nid is None:
        raise LNetConfigError(-E.EINVAL, "missing --nid or --all")
    nid = None if cmd.all else cmd.nid
    if cmd.health != -1:
        rt.engine.net_set_health(nid, cmd.health, rt.now())
        rt.execute([])  # re-arm the timer: recovery may now be due
    if cmd.conns_per_peer >= 0:
        for ni in rt.engine.local_nis():
            if nid is None or ni.nid == nid:
                glue.set_ni_lnd_tunables(rt, ni.nid, cmd.conns_per_peer, -1)


def _peer_set(rt: NodeRuntime, cmd: C.PeerSet) -> None:
    if cmd.state != -1:
        if cmd.nid is None:
            raise LNetConfigError(-E.EINVAL, "invalid peer state param")
        glue.peer_set_state(rt.engine, cmd.nid, cmd.state)
    if cmd.health != -1:
        if not cmd.all and cmd.nid is None:
            raise LNetConfigError(-E.EINVAL, "missing --nid or --all")
        rt.engine.peer_set_health(None if cmd.all else cmd.nid, cmd.health, rt.now())
        rt.execute([])


async def _route_add(rt: NodeRuntime, cmd: C.RouteAdd) -> None:
    """One ``lnet_add_route`` per gateway, each a step: other requests are served between
    (issue 27: at most ``nidlist.MAX_ROUTE_GATEWAYS``)."""
    for gw in cmd.gateways:
        await rt.share()
        rt.execute(rt.engine.router.add(cmd.net, gw, None if cmd.hop == -1 else cmd.hop,
                                        max(cmd.priority, 0), rt.now()))


def _route_del(rt: NodeRuntime, cmd: C.RouteDel) -> None:
    for gw in cmd.gateways or (None,):
        rt.engine.router.delete(cmd.net, gw)


def _udsp_add(rt: NodeRuntime, cmd: C.UdspAdd) -> None:
    rule = udsp.make_rule(cmd.src, cmd.dst, cmd.rte,
                          None if cmd.priority == -1 else cmd.priority)
    udsp.add(rt.engine, rule, None if cmd.idx == -1 else cmd.idx)


def lnet_add_peer(rt: NodeRuntime, nids: list[NID], console: list[Action]) -> None:
    """``LNetAddPeer`` (api-ni.c), the call obdclass's ``class_add_uuid`` makes with a UUID's
    whole NID list (``lctl add_uuid``): one peer, the first NID its primary
    (``LNetEngine.add_peer``, nodes/lnet/addpeer.py). ``console`` (the caller's CWARN lines)
    is carried out first, in the same batch."""
    rt.execute(console + rt.engine.add_peer(nids, rt.now()))


async def configure(rt: NodeRuntime, *, from_params: bool, large: bool = False) -> None:
    """``lnet_configure``: LNet up; ``from_params`` (``lnet configure --all``, ``lctl net
    up``: no ``NLM_F_EXCL``) also the NIs and routes of the module parameters
    (``LNetNIInit``, nodes/dlc/modparams.py); ``large`` (``--large``) lets the LNDs take
    IPv6 interface addresses as large NIDs. An LNet already up is left as it is; a failure
    leaves LNet unconfigured, as ``LNetNIInit``'s error path does.
    """
    if rt.engine.configured:
        return
    rt.engine.configure(large)
    if not from_params:
        return
    try:
        await modparams.load(rt)
    except LNetConfigError:
        await rt.unconfigure()
        raise


#: (action, entity) of each verb's error YAML
_WHERE = {C.NetAdd: ("add", "net"), C.NetDel: ("del", "net"), C.NetSet: ("set", "net"),
          C.PeerAdd: ("add", "peer"), C.PeerDel: ("del", "peer"), C.PeerSet: ("set", "peer"),
          C.RouteAdd: ("add", "route"), C.RouteDel: ("del", "route"),
          C.UdspAdd: ("add", "udsp"), C.UdspDel: ("del", "udsp"),
          C.LnetConfigure: ("configure", "lnet"), C.LnetUnconfigure: ("configure", "lnet")}


async def apply(rt: NodeRuntime, cmd: C.Command) -> Result:
    """Carry out ``cmd``; lnetctl's output for it."""
    down = not_configured(rt, cmd)
    if down is not None:
        return down
    if isinstance(cmd, C.SetTunable):
        from nodes.dlc.verbs import lnetctl_set

        if cmd.name == "multi_rail":
            return lnetctl_set.set_multi_rail(rt, cmd.value)
        return lnetctl_set.apply_set(rt, cmd.name, cmd.value)
    eng = rt.engine
    try:
        if isinstance(cmd, C.LnetConfigure):
            await configure(rt, from_params=cmd.all, large=cmd.large)
        elif isinstance(cmd, C.LnetUnconfigure):
            await rt.unconfigure()
        elif isinstance(cmd, C.NetAdd):
            await _net_add(rt, cmd)
        elif isinstance(cmd, C.NetDel):
            await _net_del(rt, cmd)
        elif isinstance(cmd, C.NetSet):
            _net_set(rt, cmd)
        elif isinstance(cmd, C.PeerAdd):
            eng.peer_add(cmd.prim_nid, list(cmd.nids),
                         non_mr=cmd.non_mr, lock_prim=cmd.lock_prim)
        elif isinstance(cmd, C.PeerDel):
            eng.peer_del(cmd.prim_nid, list(cmd.nids),
                         force=cmd.force)
        elif isinstance(cmd, C.PeerSet):
            _peer_set(rt, cmd)
        elif isinstance(cmd, C.RouteAdd):
            await _route_add(rt, cmd)
        elif isinstance(cmd, C.RouteDel):
            _route_del(rt, cmd)
        elif isinstance(cmd, C.UdspAdd):
            _udsp_add(rt, cmd)
        elif isinstance(cmd, C.UdspDel):
            udsp.delete(eng, None if cmd.idx == -1 else cmd.idx)
        else:  # pragma: no cover - COMMANDS and this chain are kept in step by a test
            raise LNetConfigError(-E.EOPNOTSUPP, f"no handler for {cmd.verb}")
    except LNetConfigError as e:
        action, entity = _WHERE.get(type(cmd), ("manage", cmd.verb))
        descr = f"LNet configure error: {e.descr}" if isinstance(cmd, C.LnetConfigure) \
            else e.descr  # jt_config_lnet's errstr
        return exit_code(e.errno), "", error(action, entity, e.errno, descr)[2]
    return 0, "", ""
