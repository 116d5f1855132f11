"""The socket side's module parameters (nodes/lnd/modparams.py) and ``lctl conn_list``.

* ``accept_port_bulk`` (lnet/lnet/acceptor.c): the acceptor also listens on the bulk port and
  every connection but CONTROL is made to it (socklnd_cb.c ``ksocknal_connect``); the
  connection listing (``IOC_LIBCFS_GET_CONN``) shows which port each went to, newest first.
* ``ksocklnd.sock_timeout``: ``ksocknal_timeout()`` = ``sock_timeout ?: lnd_timeout``, on the
  simulator as on the daemon (the driver's), through the topology's ``global:`` block.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_socklnd import IP_A, IP_B, NID_A, NID_B, free_port, make_node, put, run
from test_socklnd import wait_for as await_for

from nodes.lnd.conntable import BULK_IN, BULK_OUT, CONTROL
from nodes.lnd.modparams import LndParams, set_lnd_param
from nodes.lnet.errors import LNetConfigError
from testbed.plan import TopologyError, parse_topology


def test_bulk_port_listener_and_connection_listing() -> None:
    async def main() -> None:
        port, bulk = free_port(), free_port()
        a, b = make_node(port, inc=1, typed=True), make_node(port, inc=2, typed=True)
        for node in (a, b):
            node.lnd.set_bulk_port(bulk)
        await a.lnd.startup_ni(NID_A, IP_A)
        await b.lnd.startup_ni(NID_B, IP_B)
        payload = b"x" * 4096
        a.lnd.send(1, NID_A, NID_B, put(NID_A, NID_B, payload), payload)
        await await_for(lambda: len(b.rx) == 1 and len(a.lnd.connections(NID_A)) == 3)
        conns = a.lnd.connections(NID_A)
        assert [c.ctype for c in conns] == [BULK_OUT, BULK_IN, CONTROL]  # newest first
        assert {c.ctype: c.peer_port for c in conns} == {CONTROL: port, BULK_IN: bulk,
                                                         BULK_OUT: bulk}
        assert all((c.peer_nid, c.local_ip, c.peer_ip, c.nagle) == (NID_B, IP_A, IP_B, False)
                   and c.txmem > 0 and c.rxmem > 0 for c in conns)
        passive = b.lnd.connections(NID_B)
        assert sorted(c.ctype for c in passive) == sorted([CONTROL, BULK_IN, BULK_OUT])
        assert all(c.peer_port not in (port, bulk) for c in passive)
        assert b.lnd.connections(NID_A) == []  # not an NI of b's
        await a.lnd.close()
        await b.lnd.close()
    run(main)


def test_lnd_param_values_are_checked() -> None:
    p = LndParams()
    assert set_lnd_param(p, "ksocklnd.sock_timeout", "65") == 65 and p.sock_timeout == 65
    assert set_lnd_param(p, "accept_port_bulk", 989) == 989 and p.accept_port_bulk == 989
    for name, bad, why in (("ksocklnd.sock_timeout", "-1", "not in 0.."),
                           ("accept_port_bulk", "70000", "not in 1..65535"),
                           ("accept_port_bulk", "foo", "not an integer")):
        with pytest.raises(LNetConfigError) as e:
            set_lnd_param(p, name, bad)
        assert why in e.value.descr and name in e.value.descr


NET = """\
networks:
  lan0: {lnet: tcp, subnet: 10.10.0.0/24}
nodes:
  s: {interfaces: [lan0]}
"""


def test_topology_carries_lnd_params_and_refuses_bad_ones() -> None:
    plan = parse_topology("global: {ksocklnd.sock_timeout: 65, accept_port_bulk: 989}\n" + NET)
    assert dict(plan.node("s").module_params) == {"ksocklnd.sock_timeout": "65",
                                                  "accept_port_bulk": "989"}
    with pytest.raises(TopologyError) as e:
        parse_topology("global: {ksocklnd.sock_timeout: -5}\n" + NET)
    assert "global['ksocklnd.sock_timeout']" in str(e.value) and "not in 0.." in str(e.value)


def _ni_timeout(s: Any) -> int:
    shown = yaml.safe_load(s.lnetctl("net show --net tcp -v").out)
    return int(shown["net"][0]["local NI(s)"][0]["lnd tunables"]["timeout"])


def test_sock_timeout_module_param_is_every_nis_lnd_timeout(tmp_path: Path) -> None:
    """``sock_timeout=65``: the NI's LND timeout is 65 whatever LNet's lnd_timeout becomes;
    ``net set --lnd-timeout 0`` goes back to it, not to LNet's."""
    from testbed.sim import SimTestbed

    topo = tmp_path / "to.yaml"
    topo.write_text(textwrap.dedent("global: {ksocklnd.sock_timeout: 65}\n" + NET))
    tb = SimTestbed.up(str(topo), name="lndmodp")
    try:
        s = tb.node("s")
        assert _ni_timeout(s) == 65
        assert s.lnetctl("set transaction_timeout 20").rc == 0
        assert _ni_timeout(s) == 65  # LNet's lnd_timeout moved to 9: not followed
        assert s.lnetctl("net set --net tcp --lnd-timeout 30").rc == 0
        assert _ni_timeout(s) == 30
        assert s.lnetctl("net set --net tcp --lnd-timeout 0").rc == 0
        assert _ni_timeout(s) == 65
        assert s.lnetctl("net add --net tcp1 --if eth0").rc == 0
        tcp1 = yaml.safe_load(s.lnetctl("net show --net tcp1 -v").out)
        assert tcp1["net"][0]["local NI(s)"][0]["lnd tunables"]["timeout"] == 65
    finally:
        tb.down()


def test_sim_server_keeps_the_debug_log_it_writes_to_its_file(tmp_path: Path) -> None:
    """The long-lived sim server moves the fabric's log to ``lnet.log`` (``flush``): the
    lines stay for the node's next ``lctl dk`` (issue 26 item 11: dk was empty there), once."""
    from testbed.sim import SimTestbed
    from testbed.sim.server import LNET_LOG, SimServer

    topo = tmp_path / "n.yaml"
    topo.write_text(NET)
    tb = SimTestbed.up(str(topo), name="lnddkflush")
    try:
        s = tb.node("s")
        assert s.lctl("ping", "10.10.0.1@tcp").rc == 0  # to itself: through the "socklnd"
        SimServer(tb, tmp_path, 0).flush()
        assert not tb.fabric.log and "connection up" in (tmp_path / LNET_LOG).read_text()
        dk = s.lctl("dk").out
        assert "(lnet) connection up: 10.10.0.1@tcp -> 10.10.0.1@tcp passive control\n" in dk
        assert "connection up" not in s.lctl("dk").out  # dumped and cleared
    finally:
        tb.down()
