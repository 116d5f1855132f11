"""Health checks of forwarded messages (issue 26 item 6): lib-msg.c ``lnet_health_check``
runs once per message and prefers ``msg_txni``/``msg_txpeer`` when the message was committed
for both directions, as a forwarded one is: its receipt changes no health, its send's
completion takes the received-message branch for the next hop."""

from __future__ import annotations

from nodes.lnet.events import TxCompleted
from nodes.lnet.hstatus import HStatus
from tests.unit.test_router import C1, S1, _router_alone, _rx


def test_forwarded_message_health_checked_on_send_side_only() -> None:
    """A router (health_sensitivity 100) forwards c1's PUTs to s1. With both peer NIs at
    500: receiving a forwarded PUT leaves c1's at 500 (no rx-side check); the forwarded
    send's success sets s1's to 1000 (on a router, ``lnet_set_lpni_healthv_locked`` to the
    maximum) and raises the sending NI."""
    r = _router_alone()
    (first,) = _rx(r, 0, 1)  # c1's peer NI exists from here on
    r.handle(TxCompleted(tx_id=first.tx_id, rc=0, hstatus=HStatus.OK), 0.0)
    r.peer_set_health(C1, 500, 0.0)
    r.peer_set_health(S1, 500, 0.0)
    r.net_set_health(first.ni, 800, 0.0)
    (fwd,) = _rx(r, 0, 2)
    c1, s1 = r.peers.find_lpni(C1), r.peers.find_lpni(S1)
    assert c1 is not None and s1 is not None
    assert (c1.healthv, s1.healthv) == (500, 500)
    r.handle(TxCompleted(tx_id=fwd.tx_id, rc=0, hstatus=HStatus.OK), 0.0)
    assert (c1.healthv, s1.healthv) == (500, 1000)
    ni = r.local.ni_by_nid(fwd.ni)
    assert ni is not None and ni.healthv == 900
