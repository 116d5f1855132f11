"""Client RPC expiry (rpcclient.py, lnet/selftest/rpc.c ``srpc_client_rpc_expired``): one
timer key stands for every RPC's deadline. An RPC expires at its own deadline, in deadline
order across timeouts, whatever finished before it; a client with no RPC left arms nothing
(the simulator must not wake for a finished RPC's deadline)."""

from __future__ import annotations

from enginekit import make_node

from nodes.lnet.actions import MDEvent
from nodes.lnet.nid import NID
from nodes.selftest.rpc import Srpc
from nodes.selftest.rpcclient import RPC_TIMER, ClientRpc, SrpcClient
from nodes.selftest.timers import TimerHeap
from nodes.selftest.wire import Service

PEER = NID.parse("10.9.9.2@tcp")


def _client() -> tuple[SrpcClient, list[ClientRpc]]:
    srpc = Srpc(make_node(7, [NID.parse("10.9.9.1@tcp")]), TimerHeap(), 1 << 48)
    return SrpcClient(srpc), []


def _post(client: SrpcClient, done: list[ClientRpc], timeout: float) -> ClientRpc:
    rpc = ClientRpc(PEER, Service.PING, {"magic": 1}, done.append, timeout=timeout)
    client.post(rpc)
    return rpc


def _run_until(client: SrpcClient, at: float) -> None:
    """The node's timer loop: fire every due key until ``at``."""
    s = client.srpc
    while (nxt := s.timers.next_deadline()) is not None and nxt <= at:
        s.now = nxt
        for key in s.timers.due(nxt):
            assert key == RPC_TIMER
            client.expire()
        while s.out:  # the aborts' unlinks: their final events back in, as a node does
            acts, s.out = s.out, []
            for act in acts:
                if isinstance(act, MDEvent) and act.handle in s.handles:
                    s.on_md_event(act)
    s.now = at


def test_rpcs_expire_at_their_own_deadlines_in_deadline_order() -> None:
    client, done = _client()
    s = client.srpc
    first = _post(client, done, 10)
    s.now = 1.0
    short = _post(client, done, 5)  # due at 6, before first's 10
    s.now = 2.0
    late = _post(client, done, 10)  # due at 12
    _run_until(client, 5.9)
    assert not done
    _run_until(client, 6.0)
    assert done == [short] and short.status < 0
    client._done(first, 0)  # first finished: its deadline (10) must not expire anything
    done.clear()
    _run_until(client, 11.9)
    assert done == []
    _run_until(client, 12.0)
    assert done == [late] and s.counters.rpcs_expired == 2


def test_a_client_with_no_rpc_left_arms_no_timer() -> None:
    client, done = _client()
    rpc = _post(client, done, 64)
    assert client.srpc.timers.armed(RPC_TIMER)
    client._done(rpc, 0)
    assert done == [rpc] and not client.srpc.timers.armed(RPC_TIMER)
    assert client.srpc.timers.next_deadline() is None
