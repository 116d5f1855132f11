"""``lctl --net tcp conn_list|peer_list|interface_list`` and ``lctl dk`` after a ping, the same
on Mininet (the socklnd's sockets) and the simulator (``testbed/sim/socktables.py``), issue 26
item 11.

What real ksocklnd shows (lnet/klnds/socklnd/socklnd.c ``ksocknal_ctl``, lustre/utils/portals.c
``jt_ptl_print_connections``, ``jt_ptl_print_peers``, ``jt_ptl_print_interfaces``): the node
that sends first has a ``conn_cb`` (``ksocknal_launch_packet`` -> ``ksocknal_add_peer``) and
makes every connection, CONTROL then BULK_IN then BULK_OUT to port 988 from source ports
1023 down; the other side only accepts (``ksocknal_find_connectable_conn_cb_locked`` finds no
``conn_cb``) and replies on those, so it lists the same three inverted, the peer's source
ports as remote ports, and a peer without ``conn_cb`` (zeros). The debug log has one
"connection up" line per socket on each side."""

from __future__ import annotations

import re
from typing import Any

import pytest

from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("lctlpair.yaml")]

_CONN = re.compile(r"^(\d+-\S+) +([ACIO])\[(\d+)\](\S+)->(\S+):(\d+) (\d+)/(\d+) (nagle|nonagle)$")


def _conns(node: Any) -> list[tuple[str, str, str, str, str, int]]:
    """conn_list's lines as (pid-NID, type, CPT, local address, peer address, peer port), the
    buffer sizes checked to be numbers (they are the host kernel's on Mininet)."""
    res = node.lctl("--net", "tcp", "conn_list")
    assert res.rc == 0 and res.err == "", res
    out = []
    for line in res.out.splitlines():
        m = _CONN.match(line)
        assert m is not None and m.group(9) == "nonagle", line
        out.append((m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), int(m.group(6))))
    return out


def test_lctl_lists_the_socklnd_tables_after_a_ping(topology: Any) -> None:
    h, rn = topology.node("h"), topology.node("rn")
    hip, rip = "10.64.0.1", "10.64.0.2"
    for n in (h, rn):
        n.lctl("dk")  # start from an empty debug log
        assert n.lctl("--net", "tcp", "conn_list").out == "<no connections>\n"
        assert n.lctl("--net", "tcp", "peer_list").out == "<no peers>\n"
    assert h.lctl("ping", f"{rip}@tcp").rc == 0
    wait_for(lambda: len(_conns(rn)), timeout=10, expected=3, message="rn's 3 connections")
    wait_for(lambda: len(_conns(h)), timeout=10, expected=3, message="h's 3 connections")
    assert rn.lctl("ping", f"{hip}@tcp").rc == 0  # rides h's connections: makes none
    rpeer, hpeer = f"12345-{rip}@tcp", f"12345-{hip}@tcp"
    # ksocknal_get_conn_by_idx: newest first; h made C, I, O
    assert _conns(h) == [(rpeer, t, "0", hip, rip, 988) for t in "OIC"]
    assert _conns(rn) == [(hpeer, "I", "0", rip, hip, 1021), (hpeer, "O", "0", rip, hip, 1022),
                          (hpeer, "C", "0", rip, hip, 1023)]
    assert h.lctl("--net", "tcp", "peer_list").out == f"{rpeer:<20} [1]{hip}->{rip}:988 #3\n"
    assert rn.lctl("--net", "tcp", "peer_list").out == f"{hpeer:<20} [0]0.0.0.0->0.0.0.0:0 #0\n"
    assert h.lctl("--net", "tcp", "interface_list").out == (
        f"{hip}: ({hip}/255.255.255.0) npeer 0 nroute 1\n")
    assert rn.lctl("--net", "tcp", "interface_list").out == (
        f"{rip}: ({rip}/255.255.255.0) npeer 0 nroute 0\n")
    for node, here, there, side, kinds in ((h, hip, rip, "active", ("control", "bulk_in",
                                                                   "bulk_out")),
                                           (rn, rip, hip, "passive", ("control", "bulk_out",
                                                                      "bulk_in"))):
        dk = node.lctl("dk").out.splitlines()
        ups = [x.split(") ", 1)[1] for x in dk if "connection up" in x]
        assert ups == [f"connection up: {here}@tcp -> {there}@tcp {side} {k}" for k in kinds], dk
        assert all(x.startswith("00000400:00000200:0.0:") for x in dk if "connection up" in x)
        assert dk[-1] == f"Debug log: {len(dk) - 1} lines, {len(dk) - 1} kept, 0 dropped, 0 bad."


def test_lctl_lnd_lists_refuse_what_portals_refuses(topology: Any) -> None:
    """portals.c ``g_net_is_set``/``g_net_is_compatible`` and ``LNetCtl``'s -EINVAL for a net
    without an NI: one line each, never a traceback."""
    h = topology.node("h")
    res = h.lctl("peer_list")
    assert (res.rc, res.err) == (255, "You must run 'peer_list <network>' command before "
                                      "'--net'\n")
    res = h.lctl("--net", "o2ib", "interface_list")
    assert res.rc == 255 and res.err == "Command interface_list not compatible with o2ib NAL\n"
    res = h.lctl("--net", "tcp9", "peer_list")
    assert res.rc == 0 and res.err == "Error getting peer list: Invalid argument: check dmesg.\n"
    res = h.lctl("--net", "tcp$", "conn_list")
    assert res.rc == 255 and res.err == "Can't parse net tcp$\n"
