"""sanity-lnet.sh tests 230, 291, 310: the socklnd's connections and module parameters
(lustre-release c881f8ebcb).

``lctl --net tcp conn_list`` is what sanity-lnet's ``printf 'network tcp\\nconn_list\\n' |
lctl`` runs (``jt_ptl_print_connections``); pinging one's own NID goes through the socklnd, so
it holds both ends of every connection: 2 CONTROL plus ``conns_per_peer`` BULK_IN and BULK_OUT
(the BULK_IN one side makes is the other side's BULK_OUT). ``load_lnet OPTS`` / ``static_config``
are a node daemon started with those module parameters (the topology's ``global:``), and
``lctl net up`` / ``lnet configure --all`` with the default ``networks=tcp`` its bring-up on
the first interface. Counting sockets needs sockets: 230 and 291 run on Mininet only."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import fails, import_text, reinit, run
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet]


def _conn_lines(node: Any, pattern: str) -> int:
    """``printf 'network tcp\\nconn_list\\n' | lctl | grep -c PATTERN``."""
    res = node.lctl("--net", "tcp", "conn_list")
    assert res.rc == 0 and "Traceback" not in res.err, res
    return sum(1 for line in res.out.splitlines() if pattern in line)


def _no_tcp_ni(node: Any) -> bool:
    """``! lnetctl net show --net tcp | grep -qE "nid: .*@tcp$"``."""
    out = node.lnetctl("net show --net tcp").out
    return not any(line.strip().startswith("nid:") and line.rstrip().endswith("@tcp")
                   for line in out.splitlines())


def _add_net(node: Any, *opts: str) -> Any:
    """``add_net "tcp" "${INTERFACES[0]}"`` [with options]."""
    return node.lnetctl("net", "add", "--net", "tcp", "--if", "eth0", *opts)


@pytest.mark.topology("single.yaml")
def test_sanity_230_setting_conns_per_peer(topology: Any) -> None:
    s = topology.node("s")
    for i in range(4, 16):  # "Check valid values; Should succeed"
        reinit(s)
        if i % 2 == 0:
            assert _add_net(s).rc == 0
            run(s, f"net set --all --conns-per-peer {i}")
        else:
            assert _add_net(s, "--conns-per-peer", str(i)).rc == 0
        assert f"conns_per_peer: {i}" in run(s, "net show -v 1").out
        lnid = s.lctl("list_nids").out.split()[0]
        run(s, f"ping {lnid}")
        # 2 CONTROL connections plus 2 * conns_per_peer bulk ones; wait_update ... 10
        wait_for(lambda n=lnid: _conn_lines(s, n), timeout=10, interval=1, expected=2 + 2 * i,
                 message=f"tcp connections with conns_per_peer {i}")
    reinit(s)  # "Set > 127; Should fail"
    assert _add_net(s).rc == 0
    fails(s, "net set --all --conns-per-peer 128")
    reinit(s)  # "Set < 0; Should be ignored"
    assert _add_net(s).rc == 0
    shown = run(s, "net show -v 1").out
    default = next(line.split()[-1] for line in shown.splitlines() if "conns_per_peer" in line)
    run(s, "net set --all --conns-per-peer -1")
    assert f"conns_per_peer: {default}" in run(s, "net show -v 1").out
    # "Add > 127", "Add overflow value", "Add non-numeric value": fail, configure no NI
    for bad in ("128", "1000000000000000000000000", "foo"):
        reinit(s)
        assert _add_net(s, "--conns-per-peer", bad).rc != 0, bad
        assert _no_tcp_ni(s), bad
    reinit(s)  # "Import > 127 conns-per-peer; Should fail and not configure NI"
    assert _add_net(s, "--conns-per-peer", "8").rc == 0
    exported = run(s, "export --backup").out
    reinit(s)
    corrupt = exported.replace("conns_per_peer: 8", "conns_per_peer: 200")
    assert corrupt != exported
    assert import_text(s, corrupt).rc != 0
    assert _no_tcp_ni(s)


@pytest.mark.topology("lnd-bulkport.yaml")
def test_sanity_291_custom_accept_port_for_bulk_tcp_connections(topology: Any) -> None:
    """``accept_port_bulk=989``: of the connections of a ping to oneself, exactly one (our
    BULK_IN, made to the bulk port) shows the remote port 989."""
    s = topology.node("s")
    assert "conns_per_peer: 1" in run(s, "net show -v 1").out
    lnid = s.lctl("list_nids").out.split()[0]
    run(s, f"ping {lnid}")
    wait_for(lambda: _conn_lines(s, ":989"), timeout=10, interval=1, expected=1,
             message="tcp connections on port 989")


@pytest.mark.topology("lnd-timeout.yaml")
def test_sanity_310_set_timeout_and_verify(topology: Any) -> None:
    """``static_config ksocklnd sock_timeout=65``, then ``check_parameter timeout 65``: every
    NI of ``net show --net tcp -v`` shows ``timeout: 65``."""
    out = run(topology.node("s"), "net show --net tcp -v").out
    expect = sum(1 for line in out.splitlines() if "nid:" in line)
    assert expect > 0
    assert sum(1 for line in out.splitlines()
               if line.startswith(" ") and line.strip() == "timeout: 65") == expect
    assert yaml.safe_load(out)["net"][0]["local NI(s)"][0]["lnd tunables"]["timeout"] == 65
