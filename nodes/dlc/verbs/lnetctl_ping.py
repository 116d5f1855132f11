"""``lnetctl ping`` and ``lnetctl discover`` (spec §3.4, §5.3, §9.3; lnetctl.c ``jt_ping``,
``jt_discover``).

Theory of operation: options as ``jt_ping`` reads them (``-s/--source``, ``-t/--timeout``,
``-h``), operands expanded as NID lists with ranges (``yaml_lnet_ping`` runs
``lustre_lnet_parse_nid_range`` on each). The timeout follows the source exactly: lnetctl sends
``1000 * atol(T)`` ms and leaves out the default 1000; the kernel keeps only 0 < ms < 180000
and otherwise waits DEFAULT_PEER_TIMEOUT, 180 s (api-ni.c ``lnet_genl_ping_prerun``: "If timeout
is negative then set default of 3 minutes"), so ``--timeout -5`` is a 180 s ping.

Output: the replies as a ``ping:``/``discover:`` sequence on stdout; failures in one
``manage:`` error block on stderr (cYAML_build_error appends), ``descr`` double-quoted as
liblnetconfig writes it ("failed to ping NID: <strerror>"), ``errno`` the failure's status.
"""

from __future__ import annotations

import errno as E
import os
import re
from typing import TYPE_CHECKING, Any

from nodes.dlc.cmdline import NO, REQ, LongOpt, Stop, options
from nodes.dlc.help import DISCOVER_HELP, PING_HELP
from nodes.dlc.nidlist import NidListError, expand_nids, nid_or_host
from nodes.dlc.output import Errors, Result, exit_code
from nodes.dlc.tunables import c_int
from nodes.lnet import discovery
from nodes.lnet.nid import NID
from nodes.lnet.ping import PingInfo
from nodes.tools.yamlfmt import dump

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

#: lib-lnet.h DEFAULT_PEER_TIMEOUT: the kernel's ping timeout when none (or a bad one) is given
PING_DEFAULT_TIMEOUT = 180
_ATOL = re.compile(r"\s*([+-]?\d+)")


def ping_timeout(arg: str | None) -> float:
    """Seconds the ping waits for ``--timeout arg`` (see the module docstring)."""
    if arg is None:
        return float(PING_DEFAULT_TIMEOUT)
    m = _ATOL.match(arg)
    ms = c_int(1000 * int(m.group(1))) if m else 0  # atol, then the C int multiplication
    if ms == 1000 or not 0 < ms < PING_DEFAULT_TIMEOUT * 1000:
        return float(PING_DEFAULT_TIMEOUT)  # 1000 ms is lnetctl's default: not sent
    return ms / 1000


def _targets(rt: NodeRuntime, verb: str, operands: list[str], errors: Errors) -> list[NID]:
    out: list[NID] = []
    for arg in operands:
        try:
            out += expand_nids(arg, resolve=rt.host.resolve_host)
        except NidListError as e:
            errors.add("manage", verb, e.errno, e.descr)
    return out


def _parse(verb: str, args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    if verb == "ping":
        longs = (LongOpt("help", NO, "h"), LongOpt("timeout", REQ, "t"),
                 LongOpt("source", REQ, "s"),
                 LongOpt("numa", REQ, "U"))  # testbed extension: NUMA node of the memory
        opts, operands = options("ping", args, "hs:t:", longs, fail=(0, "", ""))
    else:
        longs = (LongOpt("force", NO, "f"), LongOpt("help", NO, "h"))
        opts, operands = options("discover", args, "fh", longs, fail=(0, "", ""))
    got: dict[str, str | None] = {}
    for o, v in opts:
        if o == "h":
            raise Stop((0, PING_HELP if verb == "ping" else DISCOVER_HELP, ""))
        got[o] = v
    return got, operands


async def ping(rt: NodeRuntime, args: list[str]) -> Result:
    try:
        opts, operands = _parse("ping", args)
    except Stop as stop:
        return stop.result
    errors = Errors()
    src = None
    if opts.get("s") is not None:
        src = nid_or_host(opts["s"] or "")  # libcfs_strnid: a host name resolves
        if src is None:
            return errors.add("manage", "ping", -E.EINVAL,
                              f"cannot parse source NID '{opts['s']}'").result()
    timeout = ping_timeout(opts.get("t"))
    numa = None
    if opts.get("U") is not None:
        numa = int(opts["U"] or "x") if (opts["U"] or "").isdigit() else -1
        if numa < 0:
            return 255, "", f"ping: --numa wants a NUMA node number >= 0, not '{opts['U']}'\n"
    targets = _targets(rt, "ping", operands, errors)
    if not targets and not errors:
        return 255, "", "lnetctl ping: no NID given\n"
    ok: list[dict[str, Any]] = []
    for nid in targets:
        target = str(nid)
        events = await rt.wait_final(lambda n=nid: rt.engine.ping(
            rt.now(), n, timeout=timeout, src=src, numa=numa))
        final = events[-1]
        if final.kind == "REPLY" and final.status == 0:
            try:
                info = PingInfo.unpack(final.payload)
            except Exception as e:  # a malformed reply from the peer
                errors.add("manage", "ping", -E.EPROTO, f"failed to ping {target}: {e}")
                continue
            nids = [str(n) for n, _st in info.nis]
            ok.append({"primary nid": nids[0] if nids else target,
                       "Multi-Rail": bool(info.features & 0x8),
                       "peer_ni": [{"nid": n} for n in nids]})
        else:
            status = final.status or -E.EIO
            errors.add("manage", "ping", status,
                       f"failed to ping {target}: {os.strerror(-status)}")
    out = dump({"ping": ok}) if ok else ""
    return (exit_code(errors.rc) if errors else 0), out, errors.text()


async def discover(rt: NodeRuntime, args: list[str]) -> Result:
    """``lnetctl discover [--force] NID[,NID]``: blocking discovery, then the peer's NIDs
    under ``discover:`` (errors under ``manage: - discover:``)."""
    try:
        opts, operands = _parse("discover", args)
    except Stop as stop:
        return stop.result
    if not operands:
        return exit_code(-1), "Missing nid argument\n", ""
    errors = Errors()
    ok: list[dict[str, Any]] = []
    for nid in _targets(rt, "discover", operands, errors):
        target = str(nid)
        final = (await rt.wait_final(lambda n=nid: discovery.discover(
            rt.engine, n, rt.now(), force="f" in opts)))[-1]
        peer = rt.engine.peers.find_peer(nid)
        if final.status or peer is None:
            status = final.status or -E.ENOENT
            errors.add("manage", "discover", status,
                       f"failed to discover {target}: {os.strerror(-status)}")
            continue
        ok.append({"primary nid": str(peer.primary_nid), "Multi-Rail": peer.multi_rail,
                   "peer_ni": [{"nid": str(lpni.nid)} for lpni in peer.lpnis]})
    out = dump({"discover": ok}) if ok else ""
    return (exit_code(errors.rc) if errors else 0), out, errors.text()
