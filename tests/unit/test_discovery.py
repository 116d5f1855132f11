"""Peer discovery on the in-memory fabric (spec §5, seed 000 dyn-005..065, bck-025/030).

Discovery is on by default in every engine, as in real LNet (``lnet_peer_discovery_disabled``
0); tests that need it off say so with ``set_tunable("discovery", 0)``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.lnet import discovery as dc
from nodes.lnet import lpstate
from nodes.lnet.engine import LNetEngine
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.hdr import LNET_PROTO_PING_MATCHBITS, LNET_RESERVED_PORTAL, MsgType
from nodes.lnet.nid import NID, Net
from nodes.lnet.ping import (
    LNET_PING_FEAT_DISCOVERY,
    LNET_PING_FEAT_MULTI_RAIL,
    LNET_PING_FEAT_NI_STATUS,
    PingInfo,
    ping_info_size,
)
from testbed.sim.fabric import Fabric

TCP = Net.parse("tcp")
C = [NID.parse("10.10.0.1@tcp"), NID.parse("10.11.0.1@tcp")]
S = [NID.parse("10.10.0.2@tcp"), NID.parse("10.11.0.2@tcp"), NID.parse("10.12.0.2@tcp")]
PORTAL = 52
UP, DOWN = 0x15AAC0DE, 0xDEADFACE


def _node(inc: int, nids: list[NID], *, mr: bool = True) -> LNetEngine:
    eng = LNetEngine(incarnation=inc)
    eng.multi_rail = mr
    eng.configure()
    for i, nid in enumerate(nids):
        eng.net_add(TCP, f"eth{i}", nid)
    eng.attach_me(PORTAL, 0, 2**64 - 1)
    return eng


def _fab(c_nids: list[NID] = C, s_nids: list[NID] = S[:2], *, s_mr: bool = True,
         c_mr: bool = True) -> Fabric:
    fab = Fabric()
    fab.add("c1", _node(11, c_nids, mr=c_mr))
    fab.add("s1", _node(22, s_nids, mr=s_mr))
    fab.run_until(1)  # deferred work of the configuration (no peers yet: nothing sent)
    return fab


def _put(fab: Fabric, dst: NID, node: str = "c1") -> int:
    eng = fab.engines[node]
    return fab.call(node, eng.put, fab.now, dst, payload=b"x" * 100,  # type: ignore[return-value]
                    portal=PORTAL)


def _types(fab: Fabric, node: str) -> list[str]:
    return [t.hdr.type.name + ("0" if t.hdr.ptl_index == 0 else "")
            for _, n, t in fab.transmits if n == node]


def _final(fab: Fabric, node: str, handle: int) -> tuple[str, int]:
    ev = [e for e in fab.events[node] if e.handle == handle and e.unlinked][-1]
    return ev.kind, ev.status


# ---------------------------------------------------------------------------- ping buffer
def test_ping_buffer_layout_status_and_seq() -> None:
    """spec §5.1, dyn-025/030: entry 0 is 0@lo with the seq, then NIs with UP/DOWN; MR and
    DISCOVERY bits; the buffer is rebuilt with seq+1 when an NI is added or removed."""
    eng = _node(1, C)
    info = eng.ping_info()
    raw = info.pack()
    assert len(raw) == 16 + 3 * 16 == ping_info_size(raw)
    back = PingInfo.unpack(raw)
    assert back.seq == info.seq and [n for n, _ in back.nis] == C
    assert back.features & LNET_PING_FEAT_MULTI_RAIL and back.features & LNET_PING_FEAT_DISCOVERY
    assert back.features & LNET_PING_FEAT_NI_STATUS
    seq = eng.ping_seq
    eng.net_del(TCP, "eth1")
    assert eng.ping_seq == seq + 1
    eng.ni_set_fatal(C[0], True, 0.0)
    # a carrier change rebuilds it on a non-router (socklnd.c
    # ksocknal_handle_link_state_change -> lnet_mark_ping_buffer_for_update)
    assert eng.ping_seq == seq + 2
    assert dict(eng.ping_info().nis)[C[0]] == DOWN
    eng.set_tunable("forwarding", 1, 0.0)  # a router now (its buffer rebuilt: RTE bit)
    seq = eng.ping_seq
    eng.ni_set_fatal(C[0], False, 0.0)
    assert eng.ping_seq == seq  # not on a router (lnet_mark_ping_buffer_for_update)
    eng.set_tunable("discovery", 0)
    assert not eng.ping_info().features & LNET_PING_FEAT_DISCOVERY


def test_downrev_node_has_no_mr_or_discovery_bits_and_one_ni_per_net() -> None:
    """bck-025 / seed 000 Backwards Compatibility: a non-MR node; real downrev LNet had one NI
    per net."""
    eng = _node(1, C[:1], mr=False)
    f = eng.ping_info().features
    assert not f & LNET_PING_FEAT_MULTI_RAIL and not f & LNET_PING_FEAT_DISCOVERY
    with pytest.raises(LNetConfigError) as e:
        eng.net_add(TCP, "eth1", C[1])
    assert e.value.errno == -17


# ---------------------------------------------------------------------------- gate + ping/push
def test_first_put_waits_for_ping_then_push_and_peer_fills() -> None:
    """dyn-020/035/040, spec §2.2 step 5, §5.2: the PUT waits on lp_dc_pendq for a ping (GET
    on portal 0) and a push (PUT on portal 0); then it goes; peer show has all NIDs."""
    fab = _fab()
    h = _put(fab, S[0])
    fab.run_until(2)
    types = _types(fab, "c1")
    assert types[:2] == ["GET0", "PUT0"] and types.index("PUT") > 1
    assert _final(fab, "c1", h) == ("ACK", 0)
    c1 = fab.engines["c1"]
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and [p.nid for p in peer.lpnis] == S[:2]
    assert peer.state == (lpstate.MULTI_RAIL | lpstate.DISCOVERED
                          | lpstate.NIDS_UPTODATE)  # 0x111 (§1.3)
    view = c1.view("peer", verbose=3)["peer"][0]
    assert view["peer state"] == 273 and view["Multi-Rail"] is True
    # the push made s1 know c1's two NIDs too, without s1 ever pinging (dyn-055)
    s_peer = fab.engines["s1"].peers.find_peer(C[0])
    assert s_peer is not None and [p.nid for p in s_peer.lpnis] == C
    assert "GET0" not in _types(fab, "s1")
    # up to date now: the next PUT goes at once
    n = len(fab.transmits)
    _put(fab, S[1])
    assert fab.transmits[n][2].hdr.type == MsgType.PUT and fab.transmits[n][2].hdr.ptl_index


def test_discovery_disabled_still_one_ping_round() -> None:
    """spec §5.3/§11.8: with discovery off, the first message still waits for one ping;
    the peer stays non-MR with one NID, and no push is sent."""
    fab = _fab()
    c1 = fab.engines["c1"]
    c1.set_tunable("discovery", 0)
    h = _put(fab, S[0])
    fab.run_until(2)
    assert _types(fab, "c1")[:2] == ["GET0", "PUT"]
    assert _final(fab, "c1", h) == ("ACK", 0)
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and not peer.multi_rail and peer.nnis == 1
    assert peer.state & lpstate.NO_DISCOVERY and peer.state & lpstate.DISCOVERED


def test_failed_discovery_fails_pending_messages() -> None:
    """spec §5.2 completion, §11.8: a ping that fails fails the queued messages with its error
    and marks the peer REDISCOVER."""
    fab = _fab()
    fab.set_link(S[0], False)
    fab.set_link(S[1], False)
    h = _put(fab, S[0])
    fab.run_until(400)
    kind, status = _final(fab, "c1", h)
    assert status < 0 and kind == "SEND"
    peer = fab.engines["c1"].peers.find_peer(S[0])
    assert peer is not None and peer.state & lpstate.REDISCOVER and peer.dc_error == status
    assert not peer.state & lpstate.DISCOVERING and not peer.dc_pendq


def test_consolidation_of_peers_learned_under_two_nids() -> None:
    """spec §5.4 lnet_peer_data_present: a traffic peer created by S[1] is merged into the
    peer of the primary S[0] once discovery of S[1] returns S[0] as primary."""
    fab = _fab()
    c1 = fab.engines["c1"]
    _put(fab, S[0])
    fab.run_until(2)
    # forget S[1] and let traffic create it as its own peer (as receiving from it would)
    peer = c1.peers.find_peer(S[0])
    assert peer is not None
    c1.peers.del_lpni(c1.peers.find_lpni(S[1]))  # type: ignore[arg-type]
    c1.peers.traffic_add(S[1], 8)
    assert len(c1.peers.peers) == 2
    h, acts = dc.discover(c1, S[1], fab.now)
    fab.apply("c1", acts)
    fab.run_until(fab.now + 2)
    assert _final(fab, "c1", h) == ("DISCOVERY", 0)
    assert len(c1.peers.peers) == 1
    only = c1.peers.peers[0]
    assert only.primary_nid == S[0] and {p.nid for p in only.lpnis} == set(S[:2])


def test_push_on_ni_add_updates_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    """dyn-045, spec §5.1: s1 adds an NI -> seq+1 -> push to its MR peer c1 -> c1's peer has
    the new NID; removing it pushes again and c1 drops it."""
    fab = _fab()
    _put(fab, S[0])
    _put(fab, C[0], node="s1")
    fab.run_until(2)
    s1, c1 = fab.engines["s1"], fab.engines["c1"]
    s1.net_add(TCP, "eth2", S[2])
    fab.refresh()
    fab.run_until(fab.now + 1)
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and S[2] in [p.nid for p in peer.lpnis]
    assert peer.peer_seqno == s1.ping_seq
    s1.net_del(TCP, "eth2")
    fab.refresh()
    fab.run_until(fab.now + 1)
    assert S[2] not in [p.nid for p in peer.lpnis]


def test_configured_peer_discovered_on_first_use_dlc_wins() -> None:
    """spec §5.3/§5.4, cfg-085: a statically configured peer is not NIDS_UPTODATE, so the
    first PUT waits for a ping and a push like any other; the merge keeps the configured
    NID missing from the buffer (-EPERM, marked down: DLC wins) and adds none."""
    ghost = NID.parse("10.13.0.2@tcp")
    fab = _fab()
    c1 = fab.engines["c1"]
    c1.peer_add(S[0], [ghost])
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and not dc.is_uptodate(c1.discovery, peer)
    h = _put(fab, S[0])
    assert _types(fab, "c1") == ["GET0"]  # the PUT waits on lp_dc_pendq (spec §2.2 step 5)
    fab.run_until(2)
    # (ACKs left out: s1, told about c1 by the push, pushes back, spec §5.2 rule 6)
    assert [t for t in _types(fab, "c1") if t != "ACK0"][:3] == ["GET0", "PUT0", "PUT"]
    assert _final(fab, "c1", h) == ("ACK", 0)
    assert [p.nid for p in peer.lpnis] == [S[0], ghost, S[1]]  # S[1] learnt, ghost kept
    assert c1.peers.find_lpni(ghost).ns_status == DOWN  # type: ignore[union-attr]
    want = lpstate.CONFIGURED | lpstate.MULTI_RAIL | lpstate.DISCOVERED | lpstate.NIDS_UPTODATE
    assert peer.state == want and dc.is_uptodate(c1.discovery, peer)
    n = len(_types(fab, "c1"))
    _put(fab, S[1])  # up to date now: at once
    assert _types(fab, "c1")[n:] == ["PUT"]


def test_configured_peer_with_discovery_off_waits_one_ping_round() -> None:
    """spec §5.3/§11.8: with ``set discovery 0`` a configured MR peer still gets one ping
    round before the first PUT; no push, no NID added, the peer stays MR (configured)."""
    fab = _fab()
    c1 = fab.engines["c1"]
    c1.set_tunable("discovery", 0)
    c1.peer_add(S[0], [])
    h = _put(fab, S[0])
    fab.run_until(2)
    assert _types(fab, "c1") == ["GET0", "PUT"]
    assert _final(fab, "c1", h) == ("ACK", 0)
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and [p.nid for p in peer.lpnis] == [S[0]] and peer.multi_rail
    assert peer.state & lpstate.NO_DISCOVERY and dc.is_uptodate(c1.discovery, peer)


def test_discovery_is_on_by_default_in_every_engine() -> None:
    """Real LNet loads with ``lnet_peer_discovery_disabled=0``: a bare engine gates its first
    PUT on discovery exactly as the node daemon and the sim do (no testbed-only switch)."""
    eng = LNetEngine()
    assert eng.tunables.discovery == 1 and not hasattr(eng, "dc_enabled")
    assert eng.ping_info().features & LNET_PING_FEAT_DISCOVERY


def test_synchronous_ping_failure_fails_the_waiting_message() -> None:
    """spec §5.2 completion: a ping that cannot even be sent (no route to the net) completes
    discovery with -EHOSTUNREACH and fails the message that triggered it."""
    fab = _fab()
    h = _put(fab, NID.parse("10.0.0.9@tcp9"))
    fab.run_until(1)
    assert _final(fab, "c1", h) == ("SEND", -113)
    assert not fab.engines["c1"].dc.request and not fab.engines["c1"].dc.working


def test_ni_add_pushes_to_configured_mr_peer_never_discovered() -> None:
    """dyn-045, ``lnet_push_update_to_peers``: after a local NI is added every MR peer whose
    ``lp_node_seqno`` is behind is queued, configured or not: c1 pings and pushes s1 (a
    static peer nobody sent to), and s1's peer for c1 shows the new NID without traffic."""
    c_nids = [*C, NID.parse("10.12.0.1@tcp")]
    fab = _fab(c_nids=C[:1])
    c1, s1 = fab.engines["c1"], fab.engines["s1"]
    c1.peer_add(S[0], [S[1]])
    fab.run_until(fab.now + 1)
    assert fab.transmits == []  # configuration alone sends nothing
    c1.net_add(TCP, "eth1", c_nids[1])
    fab.refresh()
    fab.run_until(fab.now + 1)
    assert [t for t in _types(fab, "c1") if t != "ACK0"] == ["GET0", "PUT0"]
    s_peer = s1.peers.find_peer(C[0])
    assert s_peer is not None and [p.nid for p in s_peer.lpnis] == C
    assert c1.peers.find_peer(S[0]).node_seqno == c1.ping_seq  # type: ignore[union-attr]


def test_clash_with_configured_peer_is_flagged() -> None:
    """dyn-060: a discovered NID configured as another peer's NID is not moved; the peer gets
    BAD_CONFIG (0x200000) and an error is logged."""
    fab = _fab()
    c1 = fab.engines["c1"]
    c1.peer_add(S[1], [])
    _put(fab, S[0])
    fab.run_until(2)
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and peer.state & lpstate.BAD_CONFIG and peer.clash_nids == [S[1]]
    assert c1.peers.find_peer(S[1]) is not peer
    assert any("dyn-060" in text for _, n, text in fab.log if n == "c1")


def test_lock_primary_is_kept() -> None:
    """spec §1.3: with LOCK_PRIMARY discovery never changes the primary NID."""
    fab = _fab()
    c1 = fab.engines["c1"]
    c1.peer_add(S[1], [], lock_prim=True)
    h, acts = dc.discover(c1, S[1], fab.now, force=True)
    fab.apply("c1", acts)
    fab.run_until(2)
    assert _final(fab, "c1", h) == ("DISCOVERY", 0)
    peer = c1.peers.find_peer(S[1])
    assert peer is not None and peer.primary_nid == S[1]
    assert {p.nid for p in peer.lpnis} == set(S[:2])


def test_disabling_discovery_force_pushes_and_peer_marks_us() -> None:
    """spec §5.4 last bullet: `set discovery 0` pushes to MR peers; they set NO_DISCOVERY on
    us (and delete the discovered peer, recreated non-MR by traffic)."""
    fab = _fab()
    _put(fab, S[0])
    fab.run_until(2)
    c1, s1 = fab.engines["c1"], fab.engines["s1"]
    old = s1.peers.find_peer(C[0])
    assert old is not None and old.multi_rail and old.nnis == 2
    n = len([1 for _, nd, t in fab.transmits if nd == "c1" and t.hdr.ptl_index == 0])
    c1.set_tunable("discovery", 0)
    fab.run_until(fab.now + 1)
    pushes = [t for _, nd, t in fab.transmits if nd == "c1" and t.hdr.ptl_index == 0
              and t.hdr.type == MsgType.PUT]
    assert len([1 for _, nd, t in fab.transmits if nd == "c1" and t.hdr.ptl_index == 0]) > n
    assert not PingInfo.unpack(pushes[-1].payload).features & LNET_PING_FEAT_DISCOVERY
    # MARK_DELETION -> deleted; the push's ACK recreates it as a plain traffic peer (the push
    # left from any NI: lnet_peer_send_push resets lp_disc_src_nid after each push)
    again = s1.peers.find_peer(pushes[-1].hdr.src_nid)
    assert again is not None and again is not old and again.state == 0 and again.nnis == 1
    # enabling again does not push
    n = len(fab.transmits)
    c1.set_tunable("discovery", 1)
    fab.run_until(fab.now + 1)
    assert len(fab.transmits) == n


# ---------------------------------------------------------------------------- non-MR peers
def test_non_mr_peer_used_only_on_its_nid_and_never_pushed() -> None:
    """bck-025, dyn-010: an MR node pings a downrev peer (no MR bit), keeps it non-MR with the
    one NID it knows, never pushes; the downrev node never initiates discovery."""
    fab = _fab(s_nids=S[:1], s_mr=False)
    c1 = fab.engines["c1"]
    for _ in range(4):
        _put(fab, S[0])
    fab.run_until(2)
    peer = c1.peers.find_peer(S[0])
    assert peer is not None and not peer.multi_rail and peer.nnis == 1
    assert "PUT0" not in _types(fab, "c1")
    assert {t.lpni for _, n, t in fab.transmits if n == "c1"} == {S[0]}
    # the downrev node sends its PUT at once, no discovery ping
    _put(fab, C[0], node="s1")
    assert _types(fab, "s1")[-1] == "PUT"
    assert "GET0" not in _types(fab, "s1")


def test_push_to_downrev_node_is_dropped_without_ack() -> None:
    """dyn-010: a push to a non-MR node is dropped and no ACK is sent."""
    fab = _fab(s_nids=S[:1], s_mr=False)
    c1, s1 = fab.engines["c1"], fab.engines["s1"]
    h = fab.call("c1", c1.put, fab.now, S[0], payload=c1.ping_info().pack(),
                 portal=LNET_RESERVED_PORTAL, match_bits=LNET_PROTO_PING_MATCHBITS)
    fab.run_until(fab.now + 1)
    assert "ACK" not in _types(fab, "s1")
    assert s1.counters.values["drop_count"] == 1
    assert not [e for e in fab.events["c1"] if e.handle == h and e.kind == "ACK"]


def test_router_discovery_entry_point() -> None:
    """Interface for router.py: ``start(..., rtr_net=)`` pings the peer's NID on that net,
    sets RTR_DISCOVERY while running and RTR_DISCOVERED after."""
    fab = _fab()
    c1 = fab.engines["c1"]
    lpni = c1.peers.traffic_add(S[0], 8)
    acts = c1.discovery.start(lpni.peer, fab.now, force_ping=True, force_push=True, rtr_net=TCP)
    assert lpni.peer.state & lpstate.RTR_DISCOVERY
    fab.apply("c1", acts)
    fab.run_until(fab.now + 1)
    assert lpni.peer.state & lpstate.RTR_DISCOVERED and not lpni.peer.state & lpstate.RTR_DISCOVERY


# ---------------------------------------------------------------------------- the table
@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=(1 << 22) - 1), st.sampled_from(list(dc.Input)))
def test_every_state_input_pair_has_a_defined_outcome(state: int, inp: dc.Input) -> None:
    """STYLE rule 2: any (lp_state, input) either follows the table or ends in the defined
    error outcome; never an exception, and the phase afterwards is consistent."""
    eng = _node(1, C)
    lpni = eng.peers.traffic_add(S[0], 8)
    peer = lpni.peer
    peer.state = state & ~(lpstate.MARK_DELETED)
    kw: dict[str, object] = {}
    if inp is dc.Input.PUSH_RX:
        kw["info"] = PingInfo(LNET_PING_FEAT_NI_STATUS | LNET_PING_FEAT_MULTI_RAIL, 12345, 5,
                              ((S[0], UP),))
    if inp is dc.Input.REPLY:
        kw["payload"] = b"junk"
    key = (dc.phase(peer), inp)
    rc, actions = eng.discovery.step(peer, inp, 0.0, **kw)
    if key not in dc.TRANSITIONS:
        assert rc < 0
    else:
        assert isinstance(actions, list)
    both = lpstate.PING_SENT | lpstate.PUSH_SENT
    assert peer.state & both != both or state & both == both  # never both from one step
    eng.dc.running = False
    eng.discovery.run_queue(0.0)  # whatever the state, the thread's loop terminates


def test_table_covers_the_thread_rules_and_events() -> None:
    """Every rule of spec §5.2 has an entry for a queued peer, every MD event for its phase."""
    for rule in (dc.Input.R_DELETE, dc.Input.R_DATA, dc.Input.R_PING_FAILED,
                 dc.Input.R_PUSH_FAILED, dc.Input.R_PING, dc.Input.R_PUSH, dc.Input.R_DONE):
        assert (dc.Phase.QUEUED, rule) in dc.TRANSITIONS
    assert dc.TRANSITIONS[(dc.Phase.PING_WAIT, dc.Input.REPLY)] == ("ping_reply",
                                                                     dc.Phase.QUEUED)
    assert dc.TRANSITIONS[(dc.Phase.PUSH_WAIT, dc.Input.ACK)] == ("push_acked",
                                                                   dc.Phase.QUEUED)
    assert (dc.Phase.IDLE, dc.Input.R_PING) not in dc.TRANSITIONS
