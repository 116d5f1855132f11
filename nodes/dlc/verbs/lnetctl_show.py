"""lnetctl's read-only verbs: ``net show``, ``peer show|list``, ``stats``, ``global show``,
``debug recovery|peer|nidlist``, ``cpt-of-nid`` (spec §9.2-9.3).

Theory of operation: each reads its options as its ``jt_*`` function in lnetctl.c does
(``check_cmd`` first, then ``getopt_long``; ``-v [N]`` takes the next word as the level only
when it parses as a number, ``jt_show_net``), asks the engine for the view and prints it with
lnetctl's cYAML layout (``nodes/tools/yamlfmt.py``). A view that is empty prints nothing.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.dlc import debuglog
from nodes.dlc.cmdline import OPT, REQ, LongOpt, Stop, check_cmd, is_level, options, verbose_level
from nodes.dlc.output import Result, error, exit_code
from nodes.lnet import cpt as cpts_
from nodes.lnet import nidmatch
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.nid import NID
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime


async def net_show(rt: NodeRuntime, args: list[str]) -> Result:
    check_cmd("net", "show", args, 0)
    return _show(rt, "net", "net", args, "n:v", (LongOpt("net", REQ, "n"),
                                                LongOpt("verbose", OPT, "v")))


async def peer_show(rt: NodeRuntime, args: list[str]) -> Result:
    check_cmd("peer", "show", args, 1)
    # api-ni.c lnet_peer_ni_show_dump skips a peer whose primary NID is 0@lo (the node's own
    # peer that `discover 0@lo` leaves while only the loopback NI exists); `export` reads this
    return _show(rt, "peer", "nid", args, "hn:v::",
                 (LongOpt("help", 0, "h"), LongOpt("nid", REQ, "n"), LongOpt("verbose", OPT, "v")),
                 keep=lambda p: p["primary nid"] != "0@lo")


def _show(rt: NodeRuntime, obj: str, key: str, args: list[str], short: str,
          longs: tuple[LongOpt, ...], keep: Callable[[Any], bool] | None = None) -> Result:
    """``jt_show_net``/``jt_show_peer``: ``-n`` names one ``key`` (net, NID), ``-v [N]`` the
    level; the engine's view of ``obj``, the entries ``keep`` says, printed unless empty."""
    opts, _ = options("show", args, short, longs, help_of=(obj, "show"),
                      lookahead={"v": is_level})
    name, level = None, 0
    for o, v in opts:
        if o == "h":
            return 0, "", ""  # jt_show_peer has no case for it: default, return 0
        if o == "n":
            name = v
        else:
            level = verbose_level(v)
    try:
        doc: dict[str, Any] = rt.engine.view(obj, **{key: name}, verbose=level)  # (YAML)
    except LNetConfigError as e:
        return error("show", obj, e.errno, e.descr)
    if keep is not None:
        doc[obj] = [entry for entry in doc[obj] if keep(entry)]
    return 0, dump(doc) if doc[obj] else "", ""


async def peer_list(rt: NodeRuntime, args: list[str]) -> Result:
    """``lnetctl peer list`` (``jt_list_peer``): the primary NID of every peer."""
    check_cmd("peer", "list", args, 0)
    view: dict[str, Any] = rt.engine.view("peer", nid=None, verbose=0)  # (YAML)
    peers = view["peer"]
    doc = {"peer list": [{"nid": p["primary nid"]} for p in peers]}
    return 0, dump(doc) if peers else "", ""


async def stats(rt: NodeRuntime, sub: str, args: list[str]) -> Result:
    check_cmd("stats", sub, args, 0)
    if sub == "reset":
        rt.engine.stats_reset()  # spec §4.5: health counters are kept
        return 0, "", ""
    return 0, dump(rt.engine.view("stats")), ""


async def global_show(rt: NodeRuntime, args: list[str]) -> Result:
    check_cmd("global", "show", args, 0)
    return 0, dump(rt.engine.view("global")), ""


async def debug_recovery(rt: NodeRuntime, args: list[str]) -> Result:
    """``lnetctl debug recovery --local|--peer`` (``jt_show_recovery``); nothing when the
    queue is empty; neither option is LUSTRE_CFG_RC_BAD_PARAM."""
    check_cmd("debug", "recovery", args, 0)
    opts, _ = options("recovery", args, "lp", (LongOpt("local", 0, "l"),
                                                LongOpt("peer", 0, "p")), fail=(0, "", ""))
    kind = opts[-1][0] if opts else None
    if kind is None:  # lnetctl returns -EINVAL silently; a hint costs nothing
        return exit_code(-E.EINVAL), "", ("lnetctl debug recovery: give exactly one of "
                                          "--local, --peer\n")
    doc = rt.engine.view("recovery", local=kind == "l")
    return 0, dump(doc) if doc else "", ""


def _peer_line(rt: NodeRuntime, nid: NID) -> str:
    """peer.c ``lnet_debug_peer``'s line for ``nid``."""
    lpni = rt.engine.peers.find_lpni(nid)
    if lpni is None:
        return f"No peer {nid}"
    view: dict[str, Any] = rt.engine.view("peer", nid=str(nid), verbose=1)  # (YAML)
    show = view["peer"][0]
    mine = next(p for p in show["peer ni"] if p["nid"] == str(nid))
    alive = mine.get("state", "NA")
    return (f"{nid!s:<24} {mine['refcount']:4d} {alive:>5} {mine['max_ni_tx_credits']:5d} "
            f"{mine['available_rtr_credits']:5d} {mine['min_rtr_credits']:5d} "
            f"{mine['available_tx_credits']:5d} {mine['min_tx_credits']:5d} "
            f"{mine['tx_q_num_of_buf']}")


async def debug_peer(rt: NodeRuntime, args: list[str]) -> Result:
    """``lnetctl debug peer --nid NID`` (``jt_show_peer_debug_info`` ->
    IOC_LIBCFS_GET_PEER -> ``lnet_debug_peer``): the peer NI's line goes to the debug log
    (``lctl dk``), nothing to stdout."""
    check_cmd("debug", "peer", args, 0)
    opts, _ = options("peer", args, "k", (LongOpt("nid", REQ, "k"),), fail=(0, "", ""))
    nid = next((v for _o, v in opts), None)
    if nid is None:
        return error("debug", "peer", -E.EINVAL, "--nid must be specified")
    try:
        parsed = NID.parse(nid)
    except LNetConfigError:
        return error("debug", "peer", -E.EINVAL, f"badly formatted primary NID: {nid}")
    debuglog.add(rt, _peer_line(rt, parsed))
    return 0, "", ""


async def debug_nidlist(rt: NodeRuntime, args: list[str]) -> Result:
    """``lnetctl debug nidlist NIDLIST [NID]`` (``lustre_lnet_debug_nidlist``: the list as
    ``cfs_print_nidlist`` prints it, and whether NID matches it by ``cfs_match_nid``;
    netmasks and IPv6 addresses included: ``nodes/lnet/nidmatch.py``)."""
    if not args:
        return exit_code(-E.EINVAL), "", "Missing nidlist argument\n"
    if len(args) > 2:
        return exit_code(-E.EINVAL), "", "Too many arguments\n"
    try:
        nets = nidmatch.parse_nidlist(args[0])
    except LNetConfigError:
        return exit_code(-E.EINVAL), "", f"Unable to parse nidlist from: {args[0]}\n"
    out = f"nidlist parsed to: {nidmatch.print_nidlist(nets)}\n"
    if len(args) == 2:
        try:
            match = nidmatch.match_nid(nets, NID.parse(args[1]))
        except LNetConfigError:
            return exit_code(-E.EINVAL), out, f"Invalid nid for matching {args[1]}\n"
        out += (f"{args[1]} matches nidlist {args[0]}\n" if match else
                f"{args[1]} does not match nidlist {args[0]}\n")
    return 0, out, ""


async def cpt_of_nid(rt: NodeRuntime, args: list[str]) -> Result:
    """``lnetctl cpt-of-nid NID...`` (``jt_calc_cpt_of_nid``, kernel ``lnet_cpt_of_nid``):
    each NID's CPT on this node, ``lnet_cpt_of_nid_locked(nid, NULL)``: hashed over the CPTs
    of the NID's net when its NIs are restricted to some (``net_cpts``), else over all; the
    send path takes NI credits from the same CPT (``nodes/lnet/cpt.py``)."""
    check_cmd("", "cpt-of-nid", args, 2)
    out = []
    local = rt.engine.local
    for text in args:
        try:
            nid = NID.parse(text)
            net = local.nets.get(nid.net)
            spans = [ni.cpts for ni in net.nis] if net is not None else []
            every = tuple(range(local.cpt_table.ncpts))
            cpts = every if not spans or every in spans else \
                tuple(sorted({c for s in spans for c in s}))
            out.append({"nid": str(nid), "cpt": cpts_.cpt_of_nid(nid, cpts)})
        except LNetConfigError:
            return error("show", "cpt-of-nid", -E.EINVAL, f"cannot parse NID '{text}'")
    return 0, dump({"cpt-of-nid": out}), ""


__all__ = ["Stop"]
