"""lctl's network-config commands beyond ping and list_nids (lustre/utils/portals.c).

Theory of operation:

* ``show_route`` / ``route_list`` (``jt_ptl_print_routes``): one line per route,
  ``net %18s hops %d gw %32s %s pri %u``;
* ``which_nid NID...`` (``jt_ptl_which_nid``): the NID with the smallest ``LNetDist``
  (lib-move.c): a local NID is distance 0 order 1, a NID on a local net distance 1 with the
  order of the first NI on that net, a routed NID the shortest route's hops + 1; ties go to
  the NID given first; unreachable NIDs are skipped, none reachable is "No reachable NID";
* ``net up|configure`` / ``net down|unconfigure`` (``jt_ptl_network``): LNet on or off with
  portals.c's messages; ``up`` configures the module parameters' networks and routes
  (``networks=``/``ip2nets=``/``routes=``, nodes/dlc/modparams.py), a failure printed as
  ``LNET configure error ERRNO: MSG`` with LNet left down;
* ``dk`` / ``debug_kernel`` (``jt_dbg_debug_kernel``): the node's debug log
  (``nodes/dlc/debuglog.py``), then its summary line; ``lctl dk FILE`` is written by the
  ``lctl`` client;
* ``--net NET CMD``: ``jt_opt_net`` selects a net (``Can't parse net``). ``conn_list``
  (``jt_ptl_print_connections``), ``peer_list`` (``jt_ptl_print_peers``) and
  ``interface_list`` (``jt_ptl_print_interfaces``) ask the socklnd of the net's first NI for
  its connections, peers or interface one index at a time (IOC_LIBCFS_GET_CONN, GET_PEER,
  GET_INTERFACE; ``nodes/lnd/connlist.py``; a simulated node's from the fabric's connections,
  ``testbed/sim/socktables.py``) and print portals.c's lines: ``%-20s %s[%d]%s->%s:%d %d/%d
  %s`` (the peer's ``pid-NID``, type A/C/I/O, the scheduler's CPT, local and remote address,
  the peer's port, send/receive buffer sizes, ``nagle``/``nonagle``), ``%-20s [%d]%s->%s:%d
  #%d`` (share count, our address, the peer's, its port, connection count) and ``%s: (%s/%s)
  npeer %d nroute %d``. Addresses are numeric: ``ptl_ipaddr_2_str`` asks ``getnameinfo``, and
  the emulated nodes' addresses have no name, so it falls back to that form. None is
  ``<no connections>``, ``<no peers>``, ``<no interfaces>``; an LND the command does not
  know is ``Command CMD not compatible with LND NAL``.
* ``set_route NID up|down [TIME]`` (``jt_ptl_notify_router``, IOC_LIBCFS_NOTIFY_ROUTER):
  userspace's ``lnet_notify(NULL, nid, alive, reset=false, when)``: the peer NI is marked
  alive or dead as an LND notice would, the gateway's own ``lp_alive`` is left as it is (only
  a ``reset`` notice, a ping reply or a message from it moves that). ``TIME``, an absolute
  unix time in seconds, must not be in the future; ``lnet_parse_bool`` words.
"""

from __future__ import annotations

import errno as E
import os
import time
from typing import TYPE_CHECKING

from nodes.dlc import debuglog
from nodes.dlc.apply import configure
from nodes.dlc.output import Result, exit_code
from nodes.lnet.cpt import cpt_of_nid
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.events import PeerNotify
from nodes.lnet.nid import NID, parse_net

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

#: api-ni.c ``local_nid_dist_zero`` default: a local NID is at distance 0
LOCAL_NID_DIST_ZERO = True


def show_route(rt: NodeRuntime, args: list[str]) -> Result:
    if not rt.engine.configured:
        return 0, "", "Error getting routes: Network is down: check dmesg.\n"
    lines = []
    for r in rt.engine.router.route_show(None, None, None, None, 1)["route"]:
        lines.append(f"net {r['net']:>18} hops {r['hop']} gw {r['gateway']:>32} "
                     f"{r['state']} pri {r['priority']}\n")
    return 0, "".join(lines), ""


#: portals.c ``lnet_parse_bool``
_BOOL = {**dict.fromkeys(("no", "n", "off", "down", "disable"), False),
         **dict.fromkeys(("yes", "y", "on", "up", "enable"), True)}


def set_route(rt: NodeRuntime, args: list[str]) -> Result:
    """``jt_ptl_notify_router``: ``set_route NID up|down [TIME]`` -> ``lnet_notify(NULL, ...)``."""
    if len(args) < 2:
        return 0, "", "usage: set_route targetNID <up/down> [<time>]\n"
    try:
        nid = NID.parse(args[0])
    except LNetConfigError:
        return 1, "", f"Can't parse target NID \"{args[0]}\"\n"
    alive = _BOOL.get(args[1].lower())
    if alive is None:
        return 1, "", f"Can't parse boolean {args[1]}\n"
    now = rt.now()
    when = now
    if len(args) > 2:
        wall = time.time()
        if not args[2].isdigit():
            return 1, "", (f"Can't parse time {args[2]}\n Please specify either "
                           "'YYYY-MM-DD-HH:MM:SS'\n or an absolute unix time in seconds\n")
        if int(args[2]) > wall:
            return 1, "", f"{args[2]} specifies a time in the future\n"
        when = now - (wall - int(args[2]))  # real time -> the engine's clock, as api-ni.c
    if not rt.engine.configured:
        return 1, "", f"IOC_LIBCFS_NOTIFY_ROUTER ({nid}) failed: Network is down\n"
    rt.execute(rt.engine.handle(PeerNotify(ni=None, nid=nid, alive=alive, when=when), now))
    return 0, "", ""


def lnet_dist(rt: NodeRuntime, nid: NID) -> tuple[int, int] | None:
    """``LNetDist``: (distance, order) to ``nid``, or None when unreachable."""
    eng = rt.engine
    order = 2
    same_net: int | None = None
    for ni in eng.local_nis(include_lo=True):
        if ni.nid == nid:
            return (0 if LOCAL_NID_DIST_ZERO else 1), (0 if ni.is_lo else 1)
        if same_net is None and ni.nid.net == nid.net:
            same_net = order
        order += 1
    if same_net is not None:
        return 1, same_net
    routes = eng.router.route_show(str(nid.net), None, None, None, 1)["route"] \
        if eng.configured else []
    if not routes:
        return None
    hops = min(1 if r["hop"] in (-1, None) else r["hop"] for r in routes)
    return hops + 1, order


def which_nid(rt: NodeRuntime, args: list[str]) -> Result:
    if not args:
        return 0, "", "usage: which_nid NID [NID...]\n"
    best: tuple[int, int, str] | None = None
    for text in args:
        try:
            nid = NID.parse(text)
        except LNetConfigError:
            return exit_code(-1), "", f"Can't parse NID {text}\n"
        dist = lnet_dist(rt, nid)
        if dist is None:
            continue
        if best is None or dist < best[:2]:
            best = (*dist, str(nid))
    if best is None:
        return exit_code(-1), "", "No reachable NID\n"
    return 0, best[2] + "\n", ""


async def network(rt: NodeRuntime, args: list[str]) -> Result:
    if not args or len(args) > 2:
        return 0, "", "usage: net {configure|up|unconfigure|down|NET}\n"
    word = args[0]
    if word in ("unconfigure", "down"):
        if not rt.engine.configured:
            return 0, "LNET is currently not loaded.", ""
        await rt.unconfigure()
        return 0, "LNET ready to unload\n", ""
    if word in ("configure", "up"):
        replace = len(args) == 2 and args[1] == "-l"
        try:  # no NLM_F_EXCL: the module parameters' networks and routes (LNetNIInit)
            await configure(rt, from_params=True)
        except LNetConfigError as e:
            return exit_code(e.errno), "", f"LNET configure error {-e.errno}: {e.descr}\n"
        return 0, ("LNET configured: Overridden existing one\n" if replace else
                   "LNET configured: New Created\n"), ""
    return exit_code(-1), "", f"Can't parse net {word}\n"


def debug_kernel(rt: NodeRuntime, args: list[str]) -> Result:
    if len(args) > 2:
        return 0, "", "usage: dk [file] [raw]\n"
    text = debuglog.dump_and_clear(rt)
    kept = text.count("\n")
    return 0, text + f"Debug log: {kept} lines, {kept} kept, 0 dropped, 0 bad.\n", ""


#: socklnd.h connection types as ``jt_ptl_print_connections`` letters them
_CONN_LETTERS = {0: "A", 1: "C", 2: "I", 3: "O"}
_LNET_PID_USERFLAG = 0x80000000
#: portals.c: the LNDs each command accepts (``g_net_is_compatible``), its error noun and
#: what it prints when the LND has none (ENOENT at index 0)
_LISTS = {
    "conn_list": (("tcp", "o2ib", "gni"), "connection list", "<no connections>"),
    "peer_list": (("tcp", "o2ib", "gni", "ptl4"), "peer list", "<no peers>"),
    "interface_list": (("tcp",), "interfaces", "<no interfaces>"),
}


def _id_str(pid: int, nid: NID) -> str:
    """``libcfs_id2str``: ``PID-NID``, a user-space pid as ``U<pid>``."""
    return (f"U{pid & ~_LNET_PID_USERFLAG}" if pid & _LNET_PID_USERFLAG else str(pid)) + \
        f"-{nid}"


def lnd_list(rt: NodeRuntime, cmd: str, net_text: str | None) -> Result:
    """``lctl --net NET conn_list|peer_list|interface_list`` (``jt_ptl_print_connections``,
    ``jt_ptl_print_peers``, ``jt_ptl_print_interfaces``): the ioctl asked index by index of
    the first NI of the net (``LNetCtl`` -> ``lnet_net2ni_addref``), one line each."""
    if net_text is None:  # g_net_is_set's message, words in portals.c's order
        return exit_code(-1), "", f"You must run '{cmd} <network>' command before '--net'\n"
    net = parse_net(net_text)
    if net is None:
        return exit_code(-1), "", f"Can't parse net {net_text}\n"
    lnds, noun, none = _LISTS[cmd]
    if net.lnd_name not in lnds:
        return exit_code(-1), "", f"Command {cmd} not compatible with {net.lnd_name} NAL\n"
    if not rt.engine.configured:
        return 0, "", f"Error getting {noun}: {os.strerror(E.ENETDOWN)}: check dmesg.\n"
    first = next((ni for ni in rt.engine.local_nis() if ni.nid.net == net), None)
    tables = rt.socklnd_tables()  # the socklnd, or the simulator's account of it
    if first is None or tables is None:  # no NI on the net: -EINVAL
        return 0, "", f"Error getting {noun}: {os.strerror(E.EINVAL)}: check dmesg.\n"
    if cmd == "conn_list":  # the scheduler's CPT: ksocknal_create_conn's lnet_cpt_of_nid
        lines = [f"{_id_str(c.peer_pid, c.peer_nid):<20} {_CONN_LETTERS.get(c.ctype, '?')}"
                 f"[{cpt_of_nid(c.peer_nid, first.cpts)}]{c.local_ip}->{c.peer_ip}:"
                 f"{c.peer_port} {c.txmem}/{c.rxmem} "
                 f"{'nagle' if c.nagle else 'nonagle'}\n" for c in tables.connections(first.nid)]
    elif cmd == "peer_list":
        lines = [f"{_id_str(p.peer_pid, p.peer_nid):<20} [{p.share_count}]{p.my_ip}->"
                 f"{p.peer_ip}:{p.port} #{p.conn_count}\n" for p in tables.peers(first.nid)]
    else:  # the numeric form of the address first: the nodes' addresses have no name
        iface = tables.interface(first.nid)
        lines = [] if iface is None else [
            f"{iface.ip}: ({iface.ip}/{iface.netmask}) npeer {iface.npeers} "
            f"nroute {iface.nroutes}\n"]
    return 0, "".join(lines) or none + "\n", ""
