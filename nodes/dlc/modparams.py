"""LNet's string module parameters ``networks=``, ``ip2nets=``, ``routes=`` (issue 14, E14).

Theory of operation: a node daemon started with ``--lnet-param networks=...`` (the site's
``options lnet networks=...``) keeps the strings as given (``LNetEngine.module_strings``);
nothing is parsed at "module load", as in the kernel, so a bad string never stops the node.
They are read
when LNet is configured *from module parameters*: ``lnetctl lnet configure --all`` and
``lctl net up`` (``jt_config_lnet`` leaves out ``NLM_F_EXCL`` only with ``--all``; lctl's
``jt_ptl_network`` never sets it; api-ni.c ``LNetNIInit`` then parses networks and routes unless
``ln_nis_from_mod_params``). ``load`` is that part of ``LNetNIInit``:

* ``lnet_get_networks``: ``networks`` and ``ip2nets`` together are refused; ``ip2nets`` is
  matched (``lnet_parse_ip2nets`` -> ``lnet_match_networks``: each rule whose IP patterns match
  an address of an UP interface adds its net spec, rules in order, a rule's nets split at the
  commas outside parentheses, a net twice in one rule refused); else ``networks``; else
  ``"tcp"``;
* ``parse_networks`` (config.c ``lnet_parse_networks``): ``net[(if[,if...])][[cpts]]`` comma
  separated; a net named twice gets its interfaces appended (``lnet_net_alloc``); ``lo`` is
  skipped; a net with no interface list is one NI on the first UP interface
  (``lnet_inet_select``); an interface that is not UP fails the NI ("failed to find UP
  interface");
* ``parse_routes`` (config.c ``lnet_parse_routes``/``lnet_parse_route``): entries separated by
  ``;`` or newlines, ``#`` comments; ``NET [HOPS] GW[:PRIORITY] ...``, every token expanded by
  ``lnet_str2tbs_expand`` (pdsh ``[a-b/s,c,word]``, leftmost first, nested); a gateway that is
  a local NID makes the node a router (``im_a_router``: forwarding on unless the ``forwarding``
  parameter says otherwise); -EEXIST/-EHOSTUNREACH of one route are ignored.

Every syntax error is the kernel's ``lnet_syntax`` in one line: ``Error parsing
'NAME="STRING"' here: 'REST'`` (the two console lines of the kernel, joined). A failure leaves
LNet unconfigured, as ``LNetNIInit``'s error path does. IPv4 only, like ``lnet_parse_ip2nets``
(the ``li_ipaddr`` of each interface).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from nodes.dlc import glue
from nodes.dlc.ip2nets import ip_matches, parse_pattern
from nodes.dlc.nidlist import parse_expr_list
from nodes.echo import clip
from nodes.lnet.errors import EEXIST, EHOSTUNREACH, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.nid import NID, Net, parse_net, parse_nid

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

#: config.c ``LNET_SINGLE_TEXTBUF_NOB``: longest string the parsers take
MAX_NOB = 4 << 10
SPACE = " \t\v\r\n"


def syntax(name: str, text: str, offset: int) -> LNetConfigError:
    """``lnet_syntax``: what failed to parse and where, in one line."""
    return LNetConfigError(-EINVAL, f"Error parsing '{name}=\"{clip(text)}\"' here: "
                                    f"'{clip(text[offset:])}'")


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in SPACE:
        i += 1
    return i


def _span(text: str, i: int, stop: str) -> int:
    while i < len(text) and text[i] not in stop:
        i += 1
    return i


def _cpts(text: str, i: int, whole: str) -> int:
    """A ``[cpt list]`` at ``i``: the index after ``]`` (``cfs_expr_list_parse``)."""
    end = text.find("]", i)
    if end < 0:
        raise syntax("networks", whole, i)
    try:
        parse_expr_list(text[i:end + 1], 0, 255)
    except LNetConfigError:
        raise syntax("networks", whole, i) from None
    return end + 1


def _interfaces(body: str, base: int, whole: str) -> list[str]:
    """The ``(if[cpts],...)`` list of one net (``lnet_parse_networks``' inner loop)."""
    out, i = [], 0
    while True:
        i = _skip(body, i)
        start = i
        i = _span(body, i, SPACE + "[],")
        name = body[start:i]
        i = _skip(body, i)
        if i < len(body) and body[i] == "[":
            i = _skip(body, _cpts(body, i, whole))
        if i < len(body) and body[i] == ",":
            i = _skip(body, i + 1)
            if i >= len(body):
                raise syntax("networks", whole, base + i)
        elif i < len(body):
            raise syntax("networks", whole, base + i)
        if not name:
            raise syntax("networks", whole, base + start)
        out.append(name)
        if i >= len(body):
            return out


def parse_networks(text: str) -> list[tuple[Net, list[str]]]:
    """``lnet_parse_networks``: (net, interfaces) in order; [] interfaces: the default one.

    Raises:
        LNetConfigError: -EINVAL, the kernel's syntax error in one line.
    """
    if len(text) > MAX_NOB:
        raise LNetConfigError(-EINVAL, "Can't parse networks: string too long")
    nets: dict[Net, list[str]] = {}
    i = 0
    while True:
        i = _skip(text, i)
        if i >= len(text):
            break
        start = i
        i = _span(text, i, SPACE + ":()[],")
        name = text[start:i]
        i = _skip(text, i)
        ifaces: list[str] | None = None
        if i < len(text) and text[i] == "(":
            end = text.find(")", i + 1)
            if end < 0:
                raise syntax("networks", text, i + 1)
            ifaces = _interfaces(text[i + 1:end], i + 1, text)
            i = _skip(text, end + 1)
        if i < len(text) and text[i] == "[":
            i = _skip(text, _cpts(text, i, text))
        if i < len(text) and text[i] in ":()[]":
            raise syntax("networks", text, i)
        comma = text.find(",", i)
        i = len(text) if comma < 0 else comma + 1
        net = parse_net(name)
        if net is None:
            raise LNetConfigError(-EINVAL, "Unrecognised network type: "
                                  + str(syntax("networks", text, start).descr))
        if str(net) == "lo":
            continue  # loopback is implicit, and there can be only one
        nets.setdefault(net, []).extend(ifaces or [])
        if ifaces is None and not nets[net]:
            nets[net] = []
    return list(nets.items())


def _entries(text: str) -> list[str]:
    """``lnet_str2tbs_sep``: entries split at ``;``/newlines, ``#`` to the separator dropped."""
    out = []
    for raw in re.split(r"[;\n\r]", text):
        entry = raw.split("#", 1)[0].strip()
        if entry:
            out.append(re.sub(r"\s", " ", entry))
    return out


def _split_nets(source: str, spec: str) -> list[str]:
    """``lnet_splitnets``: one rule's net specs, split at the commas outside parentheses."""
    out: list[str] = []
    for part in re.findall(r"[^,(]*(?:\([^)]*\))?[^,]*", spec):
        if not part:
            continue
        net = parse_net(part.split("(", 1)[0].strip())
        if net is None or ("(" in part and not part.rstrip().endswith(")")):
            raise syntax("ip2nets", source, max(source.find(part), 0))
        if any(parse_net(o.split("(", 1)[0].strip()) == net for o in out):
            raise syntax("ip2nets", source, max(source.find(part), 0))
        out.append(part.strip())
    return out


def match_ip2nets(text: str, addresses: list[str]) -> str:
    """``lnet_match_networks``: the ``networks`` string the rules give for ``addresses``.

    Raises:
        LNetConfigError: a bad pattern or net (-EINVAL), or no rule matched (-ENOENT).
    """
    if not addresses:
        raise LNetConfigError(-ENOENT, "No local IP interfaces for ip2nets to match")
    nets: list[str] = []
    for entry in _entries(text):
        spec, *patterns = entry.split()
        for pat in patterns:
            try:
                if parse_pattern(pat) is None:
                    continue  # an IPv6 pattern matches no IPv4 address
            except LNetConfigError:
                raise syntax("ip2nets", entry, entry.find(pat)) from None
        if any(ip_matches(ip, (pat,)) for pat in patterns for ip in addresses):
            nets += _split_nets(entry, spec)
    if not nets:
        raise LNetConfigError(-ENOENT, "ip2nets does not match any local IP interfaces")
    return ",".join(nets)


def expand(token: str) -> Iterator[str]:
    """``lnet_str2tbs_expand``, recursively: the first ``[...]`` of ``token`` expanded.

    Raises:
        ValueError: an empty item, a bad range or trailing junk.
    """
    lo_i = token.find("[")
    if lo_i < 0:
        yield token
        return
    hi_i = token.find("]", lo_i)
    if hi_i < 0:
        raise ValueError(token)
    head, tail = token[:lo_i], token[hi_i + 1:]
    for item in token[lo_i + 1:hi_i].split(","):
        if not item:
            raise ValueError(token)
        m = re.fullmatch(r"(-?\d+)-(-?\d+)(?:/(-?\d+))?", item)
        if m is None:
            if re.match(r"-?\d+-", item):  # a range with trailing junk
                raise ValueError(token)
            yield from expand(head + item + tail)
            continue
        lo, hi, stride = int(m[1]), int(m[2]), int(m[3] or 1)
        if lo < 0 or hi < lo or stride <= 0 or (hi - lo) % stride:
            raise ValueError(token)
        for n in range(lo, hi + 1, stride):
            yield from expand(f"{head}{n}{tail}")


def parse_routes(text: str) -> list[tuple[Net, int, NID, int]]:
    """``lnet_parse_routes``: (net, hops or -1, gateway, priority) in the order given.

    Raises:
        LNetConfigError: -EINVAL, the kernel's syntax error naming the bad token.
    """
    out = []
    for entry in _entries(text):
        tokens = entry.split()
        hops = -1
        if len(tokens) > 1 and re.fullmatch(r"\+?\d+", tokens[1]) and 0 < int(tokens[1]) < 256:
            hops = int(tokens.pop(1))
        if len(tokens) < 2:
            raise syntax("routes", entry, entry.find(tokens[-1]))
        nets, gws = [], []
        for k, tok in enumerate(tokens):
            try:
                items = list(expand(tok))
            except ValueError:
                raise syntax("routes", entry, entry.find(tok)) from None
            for item in items:
                if k == 0:
                    net = parse_net(item)
                    if net is None or str(net) == "lo":
                        raise syntax("routes", entry, entry.find(tok))
                    nets.append(net)
                    continue
                nid_text, _, prio = item.partition(":")
                if _ and not prio.isdigit():
                    raise syntax("routes", entry, entry.find(tok) + tok.find(":") + 1)
                nid = parse_nid(nid_text)
                if nid is None or str(nid) == "0@lo":
                    raise syntax("routes", entry, entry.find(tok))
                gws.append((nid, int(prio or 0)))
        out += [(net, hops, gw, prio) for net in nets for gw, prio in gws]
    return out


def _networks(rt: NodeRuntime, up: list[tuple[str, str]]) -> str:
    """``lnet_get_networks``."""
    t = rt.engine.module_strings
    if t.networks and t.ip2nets:
        raise LNetConfigError(-EINVAL, "Please specify EITHER 'networks' or 'ip2nets' but not "
                                       "both at once")
    if t.ip2nets:
        return match_ip2nets(t.ip2nets, [ip for _name, ip in up])
    return t.networks or "tcp"


async def load(rt: NodeRuntime) -> None:
    """``LNetNIInit``'s module-parameter part on a just configured LNet: NIs, then routes.

    Raises:
        LNetConfigError: the first failure; the caller unconfigures LNet.
    """
    up = glue.up_interfaces(rt)
    for net, ifaces in parse_networks(_networks(rt, up)):
        for iface in ifaces or [up[0][0] if up else ""]:
            if iface not in [name for name, _ip in up]:
                raise LNetConfigError(-EINVAL, "ksocklnd: failed to find UP interface "
                                               f"{clip(iface) or '(none)'}")
            await rt.net_add(net, iface)
    router = False
    for net, hops, gw, prio in parse_routes(rt.engine.module_strings.routes):
        if rt.engine.ni_by_nid(gw) is not None:
            router = True  # im_a_router
            continue
        try:
            rt.execute(rt.engine.router.add(net, gw, None if hops == -1 else hops, prio,
                                            rt.now()))
        except LNetConfigError as e:
            if e.errno not in (-EEXIST, -EHOSTUNREACH):
                raise LNetConfigError(e.errno, f"Can't create route to {net} via {gw}: "
                                               f"{e.descr}") from None
    if router and not rt.engine.module_strings.forwarding_given:
        rt.execute(rt.engine.set_tunable("routing", 1, rt.now()))
