"""The sim fabric's path verdicts and their timing (testbed/sim/paths.py): what a socklnd on a
Linux host meets when a peer's interface is down, measured with real sockets in namespaces
(ARP gives up after 3 s with EHOSTUNREACH; a write on an established connection lands in the
socket buffer; no way back for the SYN-ACK hangs the connect until the socklnd's deadline)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

import testbed
from nodes.daemon.runtime import SRPC_RDMA_PORTAL
from nodes.lnet.nid import NID
from testbed.sim.paths import ARP_FAIL, EHOSTUNREACH, NO_WAY_BACK, RETRIES

A, B = "10.30.0.1@tcp", "10.30.0.2@tcp"
PAIR_TOPOLOGY = """\
name: peerdown
global: {{retry_count: 0, transaction_timeout: {tt}, discovery: 0}}
networks:
  lan0: {{lnet: tcp, subnet: 10.30.0.0/24}}
nodes:
  a: {{interfaces: [lan0], peers: [b]}}
  b: {{interfaces: [lan0], peers: [a]}}
"""


def _pair(tmp_path: Path, tt: int) -> Any:
    """Two single-NI nodes on one segment; lnd_timeout = max((tt - 1) / 1, 1)."""
    path = tmp_path / "peerdown.yaml"
    path.write_text(PAIR_TOPOLOGY.format(tt=tt))
    return testbed.up(path, backend="sim", seed=7)


def _put(tb: Any, node: str, dst: str) -> float:
    """One PUT from ``node`` to ``dst`` started now (engine level); returns the time."""
    rt = tb.runtimes[node]
    with tb.lock:
        _h, actions = rt.engine.put(tb.now, NID.parse(dst), payload=b"",
                                    portal=SRPC_RDMA_PORTAL)
        rt.execute(actions)
    return float(tb.now)


def _since(tb: Any, mark: int, kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in tb.events()[mark:] if e["kind"] == kind
            and all(e.get(k) == v for k, v in match.items())]


def _put_done(tb: Any, mark: int, t0: float) -> list[tuple[float, int, str]]:
    """(time since ``t0``, rc, hstatus) of each tx a started at ``t0`` (the PUT, or the
    discovery ping it waits for; recovery pings later left out)."""
    txs = {e["tx"] for e in _since(tb, mark, "send", node="a") if e["t"] == round(t0, 9)}
    return [(round(e["t"] - t0, 6), e["rc"], e["hstatus"])
            for e in _since(tb, mark, "tx_done", node="a") if e["tx"] in txs]


def test_verdicts_follow_the_linux_host() -> None:
    """Default topology (c1, s1 on lan0 and lan1): own link down -ENETDOWN; no route on the
    sending host -ENETUNREACH; the peer's interface down -EHOSTUNREACH (ARP unanswered);
    the peer's host without an interface back on the sender's segment: NO_WAY_BACK."""
    tb = testbed.up(backend="sim", seed=1)
    c1a, c1b, s1a, s1b = (NID.parse(n) for n in ("10.10.0.1@tcp", "10.11.0.1@tcp",
                                                   "10.10.0.2@tcp", "10.11.0.2@tcp"))
    fab = tb.fabric
    assert {fab.path_error(x, y) for x in (c1a, c1b) for y in (s1a, s1b)} == {0}
    tb.link("s1", "eth0", "down")
    assert fab.path_error(c1a, s1a) == EHOSTUNREACH == -errno.EHOSTUNREACH
    assert fab.path_error(c1b, s1a) == EHOSTUNREACH  # routed out of c1's lan0: no ARP answer
    assert fab.path_error(c1a, s1b) == NO_WAY_BACK  # s1's SYN-ACK to lan0 has no route
    assert fab.path_error(c1b, s1b) == 0
    tb.link("s1", "eth0", "up")
    tb.link("c1", "eth0", "down")
    assert fab.path_error(c1a, s1a) == fab.path_error(c1a, s1b) == -errno.ENETDOWN
    assert fab.path_error(c1b, s1a) == -errno.ENETUNREACH  # c1's lan0 route is gone
    tb.down()


def test_established_write_is_lost_then_the_conn_closes_then_arp_fails(
        tmp_path: Path) -> None:
    """b's interface goes down under a connection (lnd_timeout 15 s): a's next PUT completes
    OK after the latency but never arrives; the connection closes one LND timeout later
    (lnet_notify dead); the PUT after that connects afresh and fails when ARP gives up,
    ARP_FAIL (3 s) later: -EHOSTUNREACH, REMOTE_DROPPED."""
    tb = _pair(tmp_path, tt=16)
    assert tb.node("a").ping(B).rc == 0
    tb.link("b", "eth0", "down")
    mark = len(tb.events())
    t0 = _put(tb, "a", B)
    tb.run(20)
    assert _put_done(tb, mark, t0) == [(0.001, 0, "OK")]
    assert not _since(tb, mark, "recv", node="b")
    closed = _since(tb, mark, "peer_notify", node="a", alive=False)
    assert [round(e["t"] - t0, 6) for e in closed] == [0.001 + 15.0]
    mark = len(tb.events())
    t1 = _put(tb, "a", B)
    tb.run(5)
    assert _put_done(tb, mark, t1) == [
        (0.001 + ARP_FAIL, -errno.EHOSTUNREACH, "REMOTE_DROPPED")]
    tb.down()


@pytest.mark.parametrize("tt, want", [(4, (3.0, -errno.ETIMEDOUT, "LOCAL_TIMEOUT")),
                                      (3, (2.0, -errno.ETIMEDOUT, "LOCAL_TIMEOUT")),
                                      (5, (ARP_FAIL, -errno.EHOSTUNREACH, "REMOTE_DROPPED"))])
def test_connect_to_a_downed_peer_ends_at_arp_or_the_deadline(tmp_path: Path, tt: int,
                                                               want: tuple) -> None:
    """No connection yet (b went down before a's first send): the connect's deadline (the
    NI's lnd_timeout, tt - 1 s here) ends it first when it is not later than ARP_FAIL: a tie
    goes to the deadline, as on Linux (ARP failed at 3.06 s, the deadline at 3.00 s)."""
    tb = _pair(tmp_path, tt=tt)
    tb.link("b", "eth0", "down")
    mark = len(tb.events())
    t0 = _put(tb, "a", B)
    tb.run(10)
    delay, rc, hs = want
    assert _put_done(tb, mark, t0) == [(0.001 + delay, rc, hs)]
    tb.down()


def test_connect_gets_through_at_the_next_retry_once_the_peer_is_back(
        tmp_path: Path) -> None:
    """The peer's link back up 1.5 s into the window: the ARP probe (or SYN) sent again at
    2 s (RETRIES) gets through and the connect completes then, not at its deadline."""
    tb = _pair(tmp_path, tt=16)
    tb.link("b", "eth0", "down")
    mark = len(tb.events())
    t0 = _put(tb, "a", B)
    tb.run(1.5)
    tb.link("b", "eth0", "up")
    tb.run(5)
    assert RETRIES[:2] == (1.0, 2.0)
    got = _since(tb, mark, "recv", node="b")  # the discovery ping, then the PUT
    assert [(e["type"], round(e["t"] - t0, 6)) for e in got] == [
        ("GET", 0.001 + 2.0), ("PUT", 0.003 + 2.0)]
    assert _put_done(tb, mark, t0) == [(0.001 + 2.0, 0, "OK")]
    tb.down()


def test_connect_retry_meets_a_refusal_once_the_host_is_back(tmp_path: Path) -> None:
    """b's daemon is dead and its link down: the retry after the link is back meets the
    host's RST (-ECONNREFUSED, REMOTE_DROPPED) then, not the connect deadline."""
    tb = _pair(tmp_path, tt=16)
    tb.link("b", "eth0", "down")
    tb.kill("b", "test")
    mark = len(tb.events())
    t0 = _put(tb, "a", B)
    tb.run(0.5)
    tb.link("b", "eth0", "up")
    tb.run(5)
    assert _put_done(tb, mark, t0) == [(0.001 + 1.0, -errno.ECONNREFUSED, "REMOTE_DROPPED")]
    tb.down()


HELD_TOPOLOGY = """\
name: heldwrites
global: {retry_count: 0, transaction_timeout: 21, discovery: 0}
networks:
  lan0: {lnet: tcp, subnet: 10.31.0.0/24}
  lan1: {lnet: tcp, subnet: 10.32.0.0/24}
nodes:
  a: {interfaces: [lan0, lan1], peers: [b]}
  b: {interfaces: [lan0, lan1], peers: [a]}
"""
A1, B0 = "10.32.0.1@tcp", "10.31.0.2@tcp"


def _held_pair(tmp_path: Path) -> Any:
    """a's lan0 NI deleted (``lnetctl net del --if eth0``: the interface stays up, no NI on
    it, so no link watcher closes anything when it goes down), a's lan1 NI connected to b's
    lan0 NID (routed out of a's lan0 interface), then a's lan0 interface down: a's host has
    no route to b's lan0 NID (lnd_timeout 20 s) under an established connection."""
    path = tmp_path / "heldwrites.yaml"
    path.write_text(HELD_TOPOLOGY)
    tb = testbed.up(path, backend="sim", seed=7)
    assert tb.node("a").lnetctl("net del --net tcp --if eth0").rc == 0
    mark = len(tb.events())
    _put_from(tb, A1, B0)
    tb.run(1)
    assert len(_since(tb, mark, "recv", node="b", type="PUT")) == 1  # the connection is up
    tb.link("a", "eth0", "down")
    assert tb.fabric.path_error(NID.parse(A1), NID.parse(B0)) == -errno.ENETUNREACH
    return tb


def _put_from(tb: Any, src: str, dst: str) -> float:
    rt = tb.runtimes["a"]
    with tb.lock:
        _h, actions = rt.engine.put(tb.now, NID.parse(dst), payload=b"",
                                    portal=SRPC_RDMA_PORTAL, src=NID.parse(src))
        rt.execute(actions)
    return float(tb.now)


def test_a_write_without_a_route_on_an_established_connection_is_held_and_retransmitted(
        tmp_path: Path) -> None:
    """Linux, measured (paths.py): the sending host's route to the peer gone under an
    established connection, a write succeeds and stays queued; once the route is back TCP
    retransmits it (here at 6.2 s, the first retransmission after the link came back at
    5 s), not -ENETUNREACH as a fresh connect gets (the resend-extra planted bug was found
    on the sim by that -ENETUNREACH and never on Mininet)."""
    tb = _held_pair(tmp_path)
    mark = len(tb.events())
    t0 = _put_from(tb, A1, B0)
    tb.run(5)
    done = [e for e in _since(tb, mark, "tx_done", node="a")]
    assert [(e["rc"], e["hstatus"]) for e in done] == [(0, "OK")]  # written to the socket
    assert not _since(tb, mark, "recv", node="b")
    tb.link("a", "eth0", "up")
    tb.run(3)
    got = _since(tb, mark, "recv", node="b", type="PUT")
    assert [round(e["t"] - t0, 3) for e in got] == [round(done[0]["t"] - t0 + 6.2, 3)]
    assert not _since(tb, mark, "peer_notify", node="a", alive=False)
    tb.down()


def test_held_writes_are_lost_when_the_connection_times_out_first(tmp_path: Path) -> None:
    """The route stays gone: the socklnd closes the connection when its queue made no
    progress for the LND timeout (20 s: lnet_notify dead) and the held bytes go with it,
    never delivered once the route is back."""
    tb = _held_pair(tmp_path)
    mark = len(tb.events())
    t0 = _put_from(tb, A1, B0)
    tb.run(25)
    closed = _since(tb, mark, "peer_notify", node="a", alive=False)
    assert [round(e["t"] - t0, 3) for e in closed][:1] == [round(0.001 + 20.0, 3)]
    tb.link("a", "eth0", "up")
    tb.run(10)
    assert not _since(tb, mark, "recv", node="b", type="PUT")
    tb.down()
