"""lnetctl argv -> typed DLC command, as the ``jt_*`` functions of lnetctl.c read it.

Theory of operation: ``parse(group, sub, args)`` handles the configuration verbs (``lnet
configure|unconfigure``, ``net add|del|set``, ``peer add|del|set``, ``route add|del``, ``udsp
add|del``, ``set NAME VALUE``) and returns either a ``Command`` (``nodes/dlc/commands.py``) or
the ``Result`` lnetctl prints without reaching the kernel: help, option errors, the
user-space checks of each ``jt_*`` function and of the ``yaml_lnet_*`` request builders (which
refuse, for instance, a route without a gateway before any netlink message is sent). NID lists
are expanded here (``nidlist.expand_nids``), as ``yaml_lnet_peer``/``yaml_lnet_route`` do
before sending. Numbers follow C: ``parse_long`` then the ``int`` the request carries.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable

from nodes.dlc import commands as C
from nodes.dlc.cmdline import NO, REQ, LongOpt, Stop, check_cmd, long_or, options
from nodes.dlc.help import SUB, print_help
from nodes.dlc.nidlist import MAX_ROUTE_GATEWAYS, PEER_NID_LIMIT, NidListError, expand_nids
from nodes.dlc.output import Result, error, exit_code, parser_error
from nodes.dlc.tunables import ENGINE_ONLY, TUNABLES, c_int, parse_long
from nodes.echo import clip
from nodes.lnet.nid import NID, Net
from nodes.lnet.nid import parse_net as _net  # text as a net (once), None when it is not one
from nodes.lnet.nid import parse_nid as _nid  # text as a NID (once), None when it is not one

Parsed = C.Command | Result


def _einval(stdout: str) -> Result:
    """A check that prints on stdout and returns -EINVAL (``fprintf(stdout, ...)``)."""
    return exit_code(-E.EINVAL), stdout, ""


def _lnet_configure(args: list[str]) -> Parsed:
    check_cmd("lnet", "configure", args, 0)
    opts, _ = options("configure", args, "al", (LongOpt("all", NO, "a"),
                                                 LongOpt("large", NO, "l")))
    return C.LnetConfigure(all=any(o == "a" for o, _ in opts),
                           large=any(o == "l" for o, _ in opts))


def _lnet_unconfigure(args: list[str]) -> Parsed:
    check_cmd("lnet", "unconfigure", args, 0)
    return C.LnetUnconfigure()


_NET_ADD = (LongOpt("auth-key", REQ, "a"), LongOpt("peer-buffer-credits", REQ, "b"),
            LongOpt("peer-credits", REQ, "c"), LongOpt("if", REQ, "i"),
            LongOpt("skip-mr-route-setup", NO, "k"), LongOpt("conns-per-peer", REQ, "m"),
            LongOpt("net", REQ, "n"), LongOpt("nid", REQ, "N"), LongOpt("ip2net", REQ, "p"),
            LongOpt("credits", REQ, "r"), LongOpt("cpt", REQ, "s"),
            LongOpt("peer-timeout", REQ, "t"), LongOpt("traffic-class", REQ, "T"),
            LongOpt("tos", REQ, "S"),
            LongOpt("numa", REQ, "U"))  # testbed extension: the device's NUMA node


def _split_list(text: str) -> tuple[str, ...]:
    """``lustre_lnet_parse_interfaces``: comma-separated names (``eth0[0,1]`` keeps its
    bracket with the name)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return tuple(x for x in [*out, cur] if x)


def _nid_list(texts: tuple[str, ...], what: str) -> tuple[NID, ...]:
    """``--nid`` of net add/del: the NIDs."""
    nids = tuple(_nid(n) for n in texts)
    if None in nids:
        raise Stop((exit_code(-1), "", parser_error("ni", what, "bad NID list")))
    return nids  # type: ignore[return-value]  # (no None: checked above)


def _net_add(args: list[str]) -> Parsed:
    check_cmd("net", "add", args, 0)
    opts, _ = options("add", args, "a:b:c:i:k:m:n:p:r:s:t:T:", _NET_ADD,
                      help_of=("net", "add"))
    kw: dict[str, object] = {}
    nids: tuple[str, ...] = ()
    net = None
    for o, v in opts:
        assert v is not None or o == "k"
        if o in "bcrt" and len(o) == 1:
            kw[{"b": "peer_buffer_credits", "c": "peer_credits", "r": "credits",
                "t": "peer_timeout"}[o]] = long_or(v)
        elif o == "i":
            kw["interfaces"] = _split_list(v or "")
        elif o == "k":
            kw["skip_mr_route_setup"] = True
        elif o == "m":
            cpp = parse_long(v or "")
            if cpp is None or cpp > 127:
                raise Stop((exit_code(-1), "", parser_error(
                    "ni", "add", "invalid conns-per-peer value (valid range 0-127)")))
            kw["conns_per_peer"] = max(cpp, -1)
        elif o == "n":
            net = v
        elif o == "N":
            nids = _split_list(v or "")
        elif o == "p":
            kw["ip2net"] = v
        elif o == "s":
            kw["cpt"] = v
        elif o == "S":
            tos = parse_long(v or "")
            if tos is None or not -1 <= tos <= 0xFF:
                raise Stop((exit_code(-E.EINVAL), "",
                            parser_error("ni", "add", "Invalid ToS argument")))
            kw["tos"] = tos
        elif o == "U":
            numa = parse_long(v or "")
            if numa is None or numa < 0:
                raise Stop((exit_code(-E.EINVAL), "",
                            f"add: invalid NUMA node '{clip(v or '')}'\n"))
            kw["numa"] = numa
    if nids and net is not None:
        return _einval("--net is invalid with --nid option\n")
    if nids:
        kw["nids"] = _nid_list(nids, "add")
    if net is None and not nids and kw.get("ip2net") is None:
        return _einval("missing mandatory parameters in NI config: 'network'\n")
    if not kw.get("interfaces") and not kw.get("nids") and kw.get("ip2net") is None:
        return _einval("creating a local NI needs at least one interface\n")
    typed = None if net is None else _net(net)
    if net is not None and typed is None:
        return error("add", "net", -E.EINVAL, "cannot parse net")
    return C.NetAdd(net=typed, **kw)  # type: ignore[arg-type]


def _net_del(args: list[str]) -> Parsed:
    check_cmd("net", "del", args, 0)
    opts, _ = options("del", args, "n:i:", (LongOpt("net", REQ, "n"), LongOpt("if", REQ, "i"),
                                            LongOpt("nid", REQ, "N")), help_of=("net", "del"))
    got = dict(opts)
    net, ifs = got.get("n"), _split_list(got.get("i") or "")
    nids = _split_list(got.get("N") or "")
    if nids and net is not None:
        return _einval("--net is invalid with --nid option\n")
    if nids:
        return C.NetDel(nids=_nid_list(nids, "del"))
    if net is None:
        return _einval("missing mandatory parameters in NI config: 'network'\n")
    typed = _net(net)
    if typed is None:
        return error("del", "net", -E.EINVAL, "cannot parse net")
    return C.NetDel(net=typed, interfaces=ifs)


_SET_VALUE = (LongOpt("all", NO, "a"), LongOpt("net", REQ, "i"),
              LongOpt("lnd-timeout", REQ, "l"), LongOpt("conns-per-peer", REQ, "m"),
              LongOpt("nid", REQ, "n"), LongOpt("state", REQ, "s"),
              LongOpt("health", REQ, "t"))


def _set_fail(errno: int, descr: str) -> Stop:
    return Stop(error("net", "set", errno, descr))


def _set_value(group: str, args: list[str]) -> Parsed:
    """lnetctl.c ``set_value_helper`` (``net set`` and ``peer set``)."""
    check_cmd(group, "set", args, 0)
    bad = error("net", "set", -E.EINVAL, "Invalid option or missing argument")
    opts, _ = options("set", args, "ai:l:m:n:s:t:", _SET_VALUE, fail=bad)
    nid: str | None = None
    net: Net | None = None
    all_, lnd_to, cpp, state, health = False, -1, -1, -1, -1
    for o, v in opts:
        text = v or ""
        if o == "a":
            all_ = True
        elif o == "i":
            net = _net(text)
            if net is None:
                raise _set_fail(-E.EINVAL, f"Invalid network type: {clip(text)}")
        elif o == "l":
            lnd_to = c_int(int(text.strip()) if text.strip().lstrip("+-").isdigit() else 0)
            if lnd_to < 0:  # atoi
                raise _set_fail(-E.EINVAL,
                                f"Invalid LND timeout value '{clip(text)}', must be >= 0")
        elif o == "m" and group == "net":
            value = parse_long(text)
            if value is None or value > 127:
                raise Stop((exit_code(-1), "", parser_error(
                    "net", "set", "invalid conns-per-peer value (valid range 0-127)")))
            cpp = value
        elif o == "n":
            nid = text
        elif o == "s" and group == "peer":
            state = long_or(text)
        elif o == "t":
            health = long_or(text)
    if lnd_to >= 0 and net is None:
        raise _set_fail(-E.EINVAL, "Specified --lnd-timeout without --net option")
    typed = None if nid is None else _nid(nid)
    if nid is not None and typed is None:
        raise _set_fail(-E.EINVAL, f"cannot parse NID '{clip(nid)}'")
    if group == "peer":
        return C.PeerSet(nid=typed, all=all_, health=c_int(health), state=c_int(state))
    if all_ and typed is not None:
        raise _set_fail(-E.EINVAL, "")
    return C.NetSet(nid=typed, all=all_, net=net, lnd_timeout=lnd_to, health=c_int(health),
                    conns_per_peer=max(cpp, -2**63))


_PEER = (LongOpt("prim_nid", REQ, "k"), LongOpt("non_mr", NO, "m"), LongOpt("nid", REQ, "n"),
         LongOpt("force", NO, "f"), LongOpt("lock_prim", NO, "l"))


def _expand(text: str, cmd: str, entity: str, limit: int) -> tuple[NID, ...]:
    """A NID list expanded (``nidlist.expand_nids``: each NID parsed there, once)."""
    try:
        return tuple(expand_nids(text, limit))
    except NidListError as e:
        out = f"can't parse nidrange: \"{clip(text)}\"\n" if entity == "peer" else ""
        raise Stop((exit_code(e.errno), out, error(cmd, entity, e.errno, e.descr)[2])) \
            from None


def _peer_add_del(sub: str, args: list[str]) -> Parsed:
    """lnetctl.c ``jt_peer_nid_common``; ``-f`` on add and ``-l`` on del both set the
    exclusive flag, as lnetctl does (lock on add, force on del)."""
    check_cmd("peer", sub, args, 2)
    opts, _ = options(sub, args, "k:m:n:f:l", _PEER, help_of=("peer", sub))
    prim, nidstr, non_mr, excl = None, None, False, False
    for o, v in opts:
        if o == "k":
            prim = v
        elif o == "n":
            nidstr = v
        elif o == "m":
            if sub == "del":
                return exit_code(-E.EINVAL), "", parser_error("peer", "del",
                                                              "Unrecognized option '-m'")
            non_mr = True
        elif o in "fl":
            excl = True
    cmd = "add" if sub == "add" else "del"
    nids = _expand(nidstr, cmd, "peer", PEER_NID_LIMIT) if nidstr is not None else ()
    if prim is None:
        return error(cmd, "peer", -E.EINVAL, "missing required primary NID")
    prim_nid = _nid(prim)
    if prim_nid is None:
        return error(cmd, "peer", -E.EINVAL, f"invalid primary NID '{clip(prim)}'")
    if sub == "add":
        return C.PeerAdd(prim_nid=prim_nid, nids=nids, non_mr=non_mr, lock_prim=excl)
    return C.PeerDel(prim_nid=prim_nid, nids=nids, force=excl)


_ROUTE = (LongOpt("net", REQ, "n"), LongOpt("gateway", REQ, "g"), LongOpt("hop", REQ, "c"),
          LongOpt("hop-count", REQ, "c"), LongOpt("priority", REQ, "p"))


def _route(sub: str, args: list[str]) -> Parsed:
    """lnetctl.c ``jt_add_route``/``jt_del_route`` -> ``yaml_lnet_route``; the kernel's
    checks of ``lnet_genl_parse_route`` (hop 1..255 or -1, priority >= 0) on the ``int``s."""
    check_cmd("route", sub, args, 0)
    longs = _ROUTE if sub == "add" else _ROUTE[:2]
    opts, _ = options(sub, args, "n:g:c:p:" if sub == "add" else "n:g:", longs,
                      help_of=("route", sub))
    net = gw = None
    hop = prio = -1
    for o, v in opts:
        if o == "n":
            net = v
        elif o == "g":
            gw = v
        elif o == "c":
            hop = long_or(v)
        elif o == "p":
            prio = long_or(v)
    if not net or not gw:
        what = "net , gateway" if not net and not gw else "net" if not net else "gateway"
        return _einval(f"missing mandatory parameters:'{what}'\n")
    gws = _expand(gw, sub, "route", MAX_ROUTE_GATEWAYS)
    hop, prio = c_int(hop), c_int(prio)
    if hop != -1 and not 1 <= hop <= 255:
        return error(sub, "route", -E.EINVAL, "invalid hop count must be between 1 and 255")
    if prio < -1:
        return error(sub, "route", -E.EINVAL, "invalid priority, must not be negative")
    remote = _net(net)
    if remote is None:
        return error(sub, "route", -E.ENODEV, "cannot parse remote net")
    if sub == "add":
        return C.RouteAdd(net=remote, gateways=gws, hop=hop, priority=prio)
    return C.RouteDel(net=remote, gateways=gws)


def _index(text: str | None, lo: int, what: str = "index") -> int:
    value = parse_long(text or "") if text is not None else None
    if value is None or value < lo:
        raise Stop(_einval(f"Invalid {what} \"{clip(str(text))}\"\n"))
    return value


def _udsp_add(args: list[str]) -> Parsed:
    check_cmd("udsp", "add", args, 0)
    opts, _ = options("add", args, "s:d:r:p:i:", (
        LongOpt("src", REQ, "s"), LongOpt("dst", REQ, "d"), LongOpt("rte", REQ, "r"),
        LongOpt("priority", REQ, "p"), LongOpt("idx", REQ, "i")), help_of=("udsp", "add"))
    kw: dict[str, object] = {}
    for o, v in opts:
        if o in "sdr":
            kw[{"s": "src", "d": "dst", "r": "rte"}[o]] = v
        elif o == "p":
            kw["priority"] = _index(v, 0, "priority")
        elif o == "i":
            kw["idx"] = _index(v, 0)
    if not any(k in kw for k in ("src", "dst", "rte")):
        return 0, print_help("udsp", "add"), ""
    return C.UdspAdd(**kw)  # type: ignore[arg-type]


def _udsp_del(args: list[str]) -> Parsed:
    check_cmd("udsp", "del", args, 0)
    opts, _ = options("del", args, "ai:", (LongOpt("all", NO, "a"), LongOpt("idx", REQ, "i")),
                      help_of=("udsp", "del"))
    all_, idx = False, -2
    for o, v in opts:
        if o == "a":
            all_ = True
        else:
            idx = _index(v, -1)
    if all_ and idx != -2:
        return _einval("Cannot combine --all with --idx\n")
    if not all_ and idx == -2:
        return _einval("Must specify --idx or --all\n")
    return C.UdspDel(idx=-1 if all_ else idx)


def _set(args: list[str]) -> Parsed:
    """``lnetctl set NAME VALUE`` (``jt_set`` -> ``jt_set_<name>``): the parser layer."""
    check_cmd("set", None, args, 2)
    name, rest = args[0], args[1:]
    known = name in TUNABLES or name in ENGINE_ONLY or name == "multi_rail"
    if not known:
        return (255, "", f"lnetctl: '{clip(name)}' is not a valid command. See 'lnetctl "
                         "--list-commands'.\n")
    if name in SUB["set"]:
        check_cmd("set", name, rest, 2)
    elif not rest:
        return exit_code(-E.EINVAL), f"set {name}: a testbed tunable; give a value\n", ""
    spec = TUNABLES.get(name)
    value = parse_long(rest[0])
    if value is None or (name in ("routing", "multi_rail") and value not in (0, 1)):
        text = spec.parse_text if spec else f"cannot parse {name} value"
        return 255, "", parser_error("parser", "set", text)
    return C.SetTunable(name=name, value=value)


PARSERS: dict[tuple[str, str], Callable[[list[str]], Parsed]] = {
    ("lnet", "configure"): _lnet_configure, ("lnet", "unconfigure"): _lnet_unconfigure,
    ("net", "add"): _net_add, ("net", "del"): _net_del,
    ("net", "set"): lambda a: _set_value("net", a),
    ("peer", "add"): lambda a: _peer_add_del("add", a),
    ("peer", "del"): lambda a: _peer_add_del("del", a),
    ("peer", "set"): lambda a: _set_value("peer", a),
    ("route", "add"): lambda a: _route("add", a), ("route", "del"): lambda a: _route("del", a),
    ("udsp", "add"): _udsp_add, ("udsp", "del"): _udsp_del,
}


def parse(group: str, sub: str | None, args: list[str]) -> Parsed | None:
    """Parse one configuration verb; None when ``group``/``sub`` is not one."""
    try:
        if group == "set":
            return _set([sub, *args] if sub is not None else args)
        fn = PARSERS.get((group, sub or ""))
        return None if fn is None else fn(args)
    except Stop as stop:
        return stop.result
