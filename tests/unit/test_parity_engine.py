"""Engine behaviours sanity-lnet checks (issue 14, docs/sanity-lnet.md E-items): own NIDs as
peers through the LND, fail_loc, NID metadata, peer state, NI tunables, the console warning."""

from __future__ import annotations

import pytest
from enginekit import PORTAL, TCP, C, S, make_node, mr2_fabric

from nodes.lnet.errors import LNetConfigError
from nodes.lnet.failloc import (
    CFS_FAIL_ONCE,
    CFS_FAIL_RTR_HEALTH_INC,
    CFS_FAIL_SOME,
    CFS_FAIL_TEST_PING_MD,
    FailLoc,
)
from nodes.lnet.hdr import MsgType
from nodes.lnet.ni import LNET_NI_STATUS_DOWN
from nodes.lnet.nid import LO_NID
from nodes.lnet.ping import LNET_PING_FEAT_METADATA, POISON_MD, PingInfo
from testbed.sim.fabric import Fabric


def _solo() -> Fabric:
    fab = Fabric()
    fab.add("c1", make_node(11, C))
    return fab


def test_ping_to_own_nid_goes_through_the_lnd_and_makes_a_peer() -> None:
    """E1 (lib-move.c ``lnet_select_pathway``: only 0@lo is short-cut): a ping to one of our
    own NIDs is a Transmit the fabric delivers back to us; the NID becomes a peer NI with
    statistics and get_rtt samples (sanity-lnet 475), and 0@lo stays short-cut."""
    fab = _solo()
    c = fab.engines["c1"]
    h = fab.call("c1", c.ping, fab.now, C[0])
    fab.run_until(fab.now + 1)
    assert [e.kind for e in fab.events["c1"] if e.handle == h][-1] == "REPLY"
    sent = [(t.ni, t.lpni, t.hdr.type) for _, n, t in fab.transmits if n == "c1"]
    assert (sent[0][1], sent[0][2]) == (C[0], MsgType.GET)
    lpni = c.peers.find_lpni(C[0])
    assert lpni is not None and lpni.stats.get_rtt.samples == 1
    assert lpni.stats.sent.get == 1 and lpni.stats.received.reply == 1
    n = len(fab.transmits)
    fab.call("c1", c.ping, fab.now, LO_NID)
    fab.run_until(fab.now + 1)
    assert len(fab.transmits) == n and c.peers.find_lpni(LO_NID) is None


def test_own_nids_may_be_peers_and_lo_health_is_zero() -> None:
    """E2 (peer.c ``lnet_add_peer_ni``) and E17 (api-ni.c ``lnet_startup_lndni`` returns for
    the LOLND before setting the health)."""
    c = make_node(1, C)
    c.peer_add(C[1], [C[0]], lock_prim=True)
    peer = c.peers.find_peer(C[0])
    assert peer is not None and peer.primary_nid == C[1] and peer.state == 0x100009
    lo = c.view("net", verbose=2)["net"][0]["local NI(s)"][0]
    assert lo["nid"] == "0@lo" and lo["health stats"]["health value"] == 0


def test_peer_set_state_stores_the_bits() -> None:
    """E7: IOC_LIBCFS_SET_PEER / ``lnet_genl_parse_peer`` set ``lp_state`` as given."""
    c = make_node(1, C)
    c.peer_add(C[1], [], lock_prim=True)
    c.peer_set_state(C[1], 1048577)
    assert c.view("peer", nid=str(C[1]), verbose=4)["peer"][0]["peer state"] == 1048577
    with pytest.raises(LNetConfigError) as e:
        c.peer_set_state(S[0], 1)
    assert e.value.errno == -2


def test_net_add_tunables_defaults_tos_and_the_warning() -> None:
    """E8: peer_timeout -1 is DEFAULT_PEER_TIMEOUT (``lnet_set_tune_defaults``); E6: the NI's
    ToS shows in ``lnd tunables``; E18: a second NI with other tunables keeps the net's and
    warns "All tunables of NIs of a net should be the same" (``lnet_add_net_common``)."""
    c = make_node(1, [])
    c.net_add(TCP, "eth0", C[0], peer_timeout=-1, tos=104, conns_per_peer=4)
    ni = c.view("net", verbose=1)["net"][1]["local NI(s)"][0]
    assert ni["tunables"]["peer_timeout"] == 180
    assert ni["lnd tunables"]["tos"] == 104 and ni["lnd tunables"]["conns_per_peer"] == 4
    assert not [a for a in c.handle_timer(0.0) if "tunables" in getattr(a, "text", "")]
    c.net_add(TCP, "eth1", C[1], peer_timeout=181)
    warned = [a.text for a in c.handle_timer(0.0) if "tunables" in getattr(a, "text", "")]
    assert warned == ["All tunables of NIs of a net should be the same"]
    assert {n["tunables"]["peer_timeout"] for n in
            c.view("net", verbose=1)["net"][1]["local NI(s)"]} == {180}
    with pytest.raises(LNetConfigError):
        c.net_add(TCP, "eth2", S[0], tos=300)


def test_fail_loc_once_some_and_location_match() -> None:
    """lnet/libcfs/fail.c ``__cfs_fail_check_set``: ONCE fails once; SOME fails fail_val
    times (the last check then quiet); another location never matches."""
    import random

    f = FailLoc(random.Random(0))
    assert not f.check(CFS_FAIL_RTR_HEALTH_INC)
    f.set(CFS_FAIL_ONCE | CFS_FAIL_RTR_HEALTH_INC)
    assert [f.check(CFS_FAIL_RTR_HEALTH_INC) for _ in range(3)] == [True, False, False]
    f.set(CFS_FAIL_RTR_HEALTH_INC)
    assert not f.check(CFS_FAIL_TEST_PING_MD) and f.check(CFS_FAIL_RTR_HEALTH_INC)
    f.set(CFS_FAIL_SOME | CFS_FAIL_TEST_PING_MD, 3)
    assert [f.check(CFS_FAIL_TEST_PING_MD) for _ in range(5)] == [True, True, False, False,
                                                                  False]


def test_rtr_health_inc_keeps_router_peer_nis_from_full_health() -> None:
    """fail_loc 0xe004 (lib-msg.c ``lnet_health_check``): on a router, a received message
    no longer sets its peer NI to full health; it only adds the sensitivity."""
    fab = mr2_fabric()
    s = fab.engines["s1"]
    s.set_tunable("forwarding", 1, fab.now)
    s.peer_set_health(C[0], 0, fab.now)
    s.set_fail_loc(CFS_FAIL_RTR_HEALTH_INC)
    fab.call("c1", fab.engines["c1"].put, fab.now, S[0], payload=b"x", portal=PORTAL,
             src=C[0])
    fab.run_until(fab.now + 0.5)
    assert s.peers.find_lpni(C[0]).healthv == 100
    s.set_fail_loc(0)
    fab.call("c1", fab.engines["c1"].put, fab.now, S[0], payload=b"x", portal=PORTAL,
             src=C[0])
    fab.run_until(fab.now + 0.5)
    assert s.peers.find_lpni(C[0]).healthv == 1000


def test_ping_metadata_under_test_ping_md() -> None:
    """E12 (api-ni.c ``lnet_discover_nid_metadata``, ``lnet_dump_nid_metadata``): with
    fail_loc 0x1000e003 fail_val=100 (sanity-lnet 270) the ping buffer carries
    LNET_PING_FEAT_METADATA and poisoned entries, and ``lnetctl ping`` logs "found metadata
    reply NI[nid]" on the console."""
    fab = _solo()
    c = fab.engines["c1"]
    c.set_fail_loc(CFS_FAIL_SOME | CFS_FAIL_TEST_PING_MD, 100)
    info = PingInfo.unpack(c.ping_info().pack())
    assert info.features & LNET_PING_FEAT_METADATA
    assert info.metadata == ((C[0], POISON_MD), (C[1], POISON_MD))
    fab.call("c1", c.ping, fab.now, C[0])
    fab.run_until(fab.now + 1)
    lines = [text for _, node, text in fab.log if node == "c1" and "metadata" in text]
    assert lines == [f"found metadata reply NI[{C[0]}]", f"found metadata reply NI[{C[1]}]"]
    c.set_fail_loc(0)
    assert not PingInfo.unpack(c.ping_info().pack()).metadata


def test_peer_add_of_a_route_gateway_is_refused() -> None:
    """E19 (peer.c ``lnet_peer_add`` -> ``lnet_peer_del`` -> ``lnet_peer_ni_del_locked``):
    an unconfigured peer that is a gateway cannot be re-created as configured: -EBUSY;
    a traffic-created peer that is not a gateway becomes configured."""
    from nodes.lnet.nid import Net

    c = make_node(1, C)
    c.router.add(Net.parse("tcp9"), S[0], 1, 0, 0.0)
    with pytest.raises(LNetConfigError) as e:
        c.peer_add(S[0], [])
    assert e.value.errno == -16
    c.peer_add(S[1], [])
    assert c.peers.find_peer(S[1]) is not None


def test_router_ni_silent_exactly_at_its_deadline() -> None:
    """The checker's deadline for a silent router NI is ``last + limit``; at that time the NI
    must go DOWN even where the float ``now - last`` is below ``limit`` (else the timer
    fires at that time forever: sanity-lnet 222 hung the sim)."""
    c = make_node(1, C)
    c.set_tunable("forwarding", 1, 0.0)
    chk = c.router.checker
    limit = chk.ni_timeout()
    last = 495.43508709194094  # (last + 110) - last < 110 in binary floating point
    assert limit == 110 and (last + limit) - last < limit
    ni = c.ni_by_nid(C[0])
    chk.ni_last_alive[ni] = last
    chk.ni_last_alive[c.ni_by_nid(C[1])] = last + 50
    assert chk.update_ni_status(last + limit)
    assert ni.status == LNET_NI_STATUS_DOWN


def test_success_at_full_health_leaves_a_silent_router_ni_down() -> None:
    """lib-lnet.h ``lnet_inc_ni_healthv`` sets the status UP only when the health moved to
    1000; a message sent fine on a router NI the checker marked DOWN (no ping heard,
    router.c ``lnet_update_ni_status_locked``) leaves it DOWN; only an incoming ping brings it
    back (lib-move.c ``lnet_parse``). Before, every ACK of the router's own push set it UP,
    and the push that went with each flip made a storm."""
    c = make_node(1, C)
    c.set_tunable("forwarding", 1, 0.0)
    ni = c.ni_by_nid(C[0])
    assert ni is not None and ni.healthv == 1000
    c.router.checker.ni_last_alive[ni] = 0.0
    assert c.router.checker.update_ni_status(c.router.checker.ni_timeout())
    c.health.inc_ni(ni)
    assert ni.status == LNET_NI_STATUS_DOWN
    c.net_set_health(ni.nid, 1000, 200.0)  # api-ni.c lnet_ni_set_healthv always sets it
    assert ni.status != LNET_NI_STATUS_DOWN


def test_a_ping_on_one_router_ni_keeps_its_whole_net_alive() -> None:
    """lib-move.c ``lnet_parse`` refreshes ``net_last_alive``, the net's: with two NIs on tcp,
    pings heard on one keep the other from being marked down (router.c
    ``lnet_update_ni_status_locked`` looks at the net)."""
    from nodes.lnet.events import MessageReceived
    from nodes.lnet.hdr import (
        LNET_PID_LUSTRE,
        LNET_PROTO_PING_MATCHBITS,
        LNET_RESERVED_PORTAL,
        LNetHdr,
        WireHandle,
    )

    c = make_node(1, C)
    c.set_tunable("forwarding", 1, 0.0)
    chk = c.router.checker
    limit = chk.ni_timeout()
    for ni in c.local_nis():
        chk.ni_last_alive[ni] = 0.0
    ping = LNetHdr(dest_nid=C[0], src_nid=S[0], dest_pid=LNET_PID_LUSTRE,
                   src_pid=LNET_PID_LUSTRE, type=MsgType.GET, payload_length=0,
                   wmd=WireHandle(1, 9), match_bits=LNET_PROTO_PING_MATCHBITS,
                   ptl_index=LNET_RESERVED_PORTAL, sink_length=272)
    c.handle(MessageReceived(ni=C[0], peer_nid=S[0], hdr=ping, payload=b""), limit - 1)
    assert not chk.update_ni_status(limit + 1)
    assert all(ni.status != LNET_NI_STATUS_DOWN for ni in c.local_nis())
    assert chk.update_ni_status(2 * limit)
    assert all(ni.status == LNET_NI_STATUS_DOWN for ni in c.local_nis())


def test_a_message_received_on_a_sick_ni_logs_its_rise_after_ok() -> None:
    """dbg-110 and lib-msg.c ``lnet_health_check``: a message received fine on a local NI
    raises its health (``lnet_inc_ni_healthv``, "whether we successfully received or sent a
    message on it"); the status line of a rise to 1000 names the health status (OK) as the
    line of the fall names LOCAL_ERROR. Before, it said "after a health change", which the
    LUTF test of dbg-110 did not accept when a peer's message beat the recovery ping."""
    fab = mr2_fabric()
    c, s = fab.engines["c1"], fab.engines["s1"]
    c.set_tunable("health_sensitivity", 1000)
    for nid in C:  # whichever NI s1 picks for its GET is sick
        ni = c.ni_by_nid(nid)
        assert ni is not None
        c.health.set_ni(ni, 0, "error", "LOCAL_ERROR")
        assert ni.status == LNET_NI_STATUS_DOWN
    c.attach_me(PORTAL, 0, 2**64 - 1)
    fab.call("s1", s.put, fab.now, C[0], payload=b"x", portal=PORTAL, ack=False)
    fab.run_until(fab.now + 0.5)
    up = [text for _t, name, text in fab.log if name == "c1" and "status up: health" in text]
    assert len(up) == 1 and up[0].endswith("status up: health 1000 after OK"), up
