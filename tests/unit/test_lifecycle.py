"""Message lifecycle (spec §4.3-4.4, 003): tracking, deadlines, exactly one final MD event."""

from __future__ import annotations

import random

from enginekit import PORTAL, TCP, C, S, settle_discovery  # noqa: F401
from enginekit import make_node as _node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.lnet.actions import Transmit
from nodes.lnet.errors import EIO
from nodes.lnet.hstatus import HStatus
from nodes.lnet.nid import NID
from testbed.sim.fabric import Fabric


class Chaos:
    """A fabric whose transmissions randomly fail (any hstatus), vanish after a good tx
    completion (lost on the wire), or are delivered normally (``fab``: this object is its
    ``interpose`` hook; ``p_fail``/``p_lost`` may change as it runs)."""

    def __init__(self, seed: int, p_fail: float, p_lost: float) -> None:
        self.chaos = random.Random(seed)
        self.p_fail, self.p_lost = p_fail, p_lost
        self.fab = Fabric()
        self.fab.interpose = self

    def __call__(self, name: str, act: Transmit) -> Transmit | None:
        fab, r = self.fab, self.chaos.random()
        if r < self.p_fail:
            hs = self.chaos.choice([h for h in HStatus if h != HStatus.OK])
            fab.at(fab.now + 0.001, lambda: fab.complete(name, act.tx_id, -EIO, hs))
        elif r < self.p_fail + self.p_lost:
            fab.at(fab.now + 0.001, lambda: fab.complete(name, act.tx_id, 0, HStatus.OK))
        else:
            return act
        return None


def _mr2(fab: Fabric, *, settle: bool = True) -> Fabric:
    """c1/s1 static MR peers; with ``settle`` both are discovered first (spec §5.2), so the
    test sees only its own messages."""
    c, s = _node(11, C), _node(22, S)
    c.peer_add(S[0], [S[1]])
    s.peer_add(C[0], [C[1]])
    s.attach_me(PORTAL, 0, 2**64 - 1, data=bytes(64))
    fab.add("c1", c)
    fab.add("s1", s)
    return settle_discovery(fab) if settle else fab


OPS = st.lists(st.tuples(
    st.sampled_from(["put", "put_noack", "get", "ping", "advance", "unlink", "fatal",
                     "health", "tunable"]),
    st.integers(0, 3), st.sampled_from([None, 0.5, 3.0, 200.0])), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, seed=st.integers(0, 2**16), p_fail=st.floats(0, 0.6),
       p_lost=st.floats(0, 0.3), rt=st.integers(0, 3))
def test_every_send_ends_in_exactly_one_final_event(ops: list[tuple[str, int, float | None]],
                                                    seed: int, p_fail: float, p_lost: float,
                                                    rt: int) -> None:
    """spec §4.4 invariant: whatever fails, times out, is resent or unlinked, every MD an
    initiator binds gets exactly one final (``unlinked``) event, and none after it; with
    response_tracking 3 without any help from the upper layer; credits all come back."""
    fab = _mr2(Chaos(seed, p_fail, p_lost).fab, settle=False)  # discovery under chaos too
    c = fab.engines["c1"]
    c.set_tunable("response_tracking", rt)
    dsts = [S[0], S[1], NID.parse("10.0.0.9@tcp9"), C[0]]
    handles: list[int] = []
    for op, i, timeout in ops:
        dst = dsts[i]
        if op in ("put", "put_noack"):
            handles.append(fab.call("c1", c.put, fab.now, dst, payload=bytes(i * 10),  # type: ignore[arg-type]
                                    portal=PORTAL, ack=op == "put", timeout=timeout))
        elif op == "get":
            handles.append(fab.call("c1", c.get, fab.now, dst, length=32,  # type: ignore[arg-type]
                                    portal=PORTAL, timeout=timeout))
        elif op == "ping":
            handles.append(fab.call("c1", c.ping, fab.now, dst, timeout=timeout))  # type: ignore[arg-type]
        elif op == "advance":
            fab.run_until(fab.now + (timeout or 0.01))
        elif op == "unlink" and handles:
            fab.call("c1", c.unlink, fab.now, handles[i % len(handles)])
        elif op == "fatal":
            fab.call("c1", c.ni_set_fatal, C[i % 2], bool(i // 2), fab.now)
        elif op == "health":
            c.net_set_health(C[i % 2], i * 300, fab.now)
        elif op == "tunable":
            c.set_tunable("retry_count", i)
    fab.run_until(fab.now + 1000)
    if rt == 3:  # everything tracked: all MDs are final by now, with no help
        unfinished = [h for h in handles
                      if not any(e.handle == h and e.unlinked for e in fab.events["c1"])]
        assert not unfinished
    for h in handles:  # untracked MDs wait for their owner (as in LNet): the ULP gives up
        fab.call("c1", c.unlink, fab.now, h)
    for h in handles:
        evs = [e for e in fab.events["c1"] if e.handle == h]
        finals = [e for e in evs if e.unlinked]
        assert len(finals) == 1, (h, evs)
        assert evs[-1] is finals[0]
        assert finals[0].status == 0 or finals[0].status < 0
    assert all(ni.tx_credits == ni.max_tx_credits for ni in c.local_nis())
    assert all(lp.tx_credits == lp.max_tx_credits for lp in c.peers.by_nid.values())
    assert c.counters.values["msgs_alloc"] == 0


def test_response_tracking_levels() -> None:
    """spec §4.3: 0 tracks nothing, 1 GETs, 2 PUTs with ACK, 3 both; rst_alloc is live."""
    for rt, want in [(0, (0, 0)), (1, (0, 1)), (2, (1, 0)), (3, (1, 1))]:
        fab = _mr2(Fabric())
        fab.hold = True
        c = fab.engines["c1"]
        c.set_tunable("response_tracking", rt)
        hp = fab.call("c1", c.put, 0.0, S[0], payload=b"x", portal=PORTAL)
        hg = fab.call("c1", c.get, 0.0, S[0], length=8, portal=PORTAL)
        got = tuple(int(c.md_by_handle(h).rsp_deadline is not None) for h in (hp, hg))
        assert got == want and c.counters.values["rst_alloc"] == sum(want)


def test_response_timeout_penalises_next_hop() -> None:
    """spec §3.4/§11.6: a lost ACK -> UNLINK -ETIMEDOUT at transaction_timeout,
    response_timeout_count++, the next-hop peer NI decremented and queued."""
    chaos = Chaos(1, 0.0, 0.0)
    fab = _mr2(chaos.fab)
    chaos.p_lost = 1.0  # now every message vanishes after a good tx
    c = fab.engines["c1"]
    c.set_tunable("transaction_timeout", 20)
    h = fab.call("c1", c.put, 0.0, S[0], payload=b"x", portal=PORTAL)
    fab.run_until(19.9)
    assert [(e.kind, e.unlinked) for e in fab.events["c1"] if e.handle == h] == [
        ("SEND", False)]
    fab.run_until(20.1)
    evs = [e for e in fab.events["c1"] if e.handle == h]
    assert (evs[-1].kind, evs[-1].status, evs[-1].unlinked) == ("UNLINK", -110, True)
    assert c.counters.values["response_timeout_count"] == 1
    hops = [lp for lp in c.peers.by_nid.values() if lp.healthv < 1000]
    assert len(hops) == 1 and hops[0].hstats.timeout == 0


def test_response_timeout_blames_the_peer_ni_the_table_has_now() -> None:
    """lib-move.c ``lnet_finalize_expired_responses`` keeps the next hop's NID
    (``rspt_next_hop_nid``) and looks its peer NI up when the response is late: when
    discovery replaced that peer NI meanwhile (peer.c ``lnet_peer_add_nid`` allocates a new
    one when a primary NID moves to another peer), the new one is blamed, not the one the
    message was sent to (explore seed 544: the replaced one's health moved, out of sight of
    ``peer show``, and its notices contradicted the new one's)."""
    chaos = Chaos(1, 0.0, 0.0)
    fab = _mr2(chaos.fab)
    chaos.p_lost = 1.0
    c = fab.engines["c1"]
    c.set_tunable("transaction_timeout", 20)
    h = fab.call("c1", c.put, 0.0, S[0], payload=b"x", portal=PORTAL)
    fab.run_until(1.0)
    old = c.md_by_handle(h).rsp_next_hop
    assert old is not None and c.peers.find_lpni(old.nid) is old
    c.peers.del_lpni(old)
    new = c.peers.add_nid(old.peer, old.nid, old.max_tx_credits)
    new.last_alive = fab.now
    fab.run_until(20.1)
    assert c.counters.values["response_timeout_count"] == 1
    assert (old.healthv, new.healthv) == (1000, 900) and new in c.lpni_recoveryq


def test_caller_timeout_unlinks_without_health_change() -> None:
    """003 caller timeout: the MD ends with UNLINK -ETIMEDOUT at the caller's deadline."""
    fab = _mr2(Fabric())
    fab.hold = True
    c = fab.engines["c1"]
    h = fab.call("c1", c.get, 0.0, S[0], length=8, portal=PORTAL, timeout=2.0)
    fab.run_until(2.5)
    assert [(e.kind, e.status) for e in fab.events["c1"] if e.handle == h] == [
        ("UNLINK", -110)]
    assert all(lp.healthv == 1000 for lp in c.peers.by_nid.values())


def test_put_get_events_and_counters() -> None:
    """spec §4.4-4.5: PUT -> SEND, ACK; GET -> SEND, REPLY(data); counters on both ends."""
    fab = _mr2(Fabric())
    c, s = fab.engines["c1"], fab.engines["s1"]
    hp = fab.call("c1", c.put, 0.0, S[0], payload=bytes(100), portal=PORTAL)
    hg = fab.call("c1", c.get, 0.0, S[0], length=16, portal=PORTAL)
    fab.run_until(1)
    kinds = {h: [e.kind for e in fab.events["c1"] if e.handle == h] for h in (hp, hg)}
    assert kinds == {hp: ["SEND", "ACK"], hg: ["SEND", "REPLY"]}
    reply = next(e for e in fab.events["c1"] if e.kind == "REPLY")
    assert reply.payload == bytes(16)
    cv, sv = c.counters.values, s.counters.values
    assert (cv["send_count"], cv["send_length"], cv["recv_count"], cv["recv_length"]) == (
        2, 100, 2, 16)
    assert (sv["send_count"], sv["send_length"], sv["recv_count"], sv["recv_length"]) == (
        2, 16, 2, 100)
    assert cv["msgs_alloc"] == 0 and cv["msgs_max"] == 2 and cv["rst_alloc"] == 0
