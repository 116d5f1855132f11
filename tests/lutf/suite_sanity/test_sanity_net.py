"""sanity-lnet.sh tests 107, 108, 110, 112, 199, 203, 213, 214, 217, 241, 245, 290, 301, 302, 525:
local NIs (``net add|del|set|show``, ``lctl which_nid``), at lustre-release c881f8ebcb.

``INTERFACES[0]`` is ``eth0`` (10.60.0.1) and the fake interface ``test1pg`` of
``setup_fakeif`` is ``eth1`` (10.61.0.1) of node ``s``."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import export, fails, reinit, run
from testbed.pytest.plugin import wait_for

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]
FAKE_IP = "10.61.0.1"


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


@pytest.fixture(scope="module")
def s(tb: Any) -> Any:
    return tb.node("s")


def _nids(s: Any) -> list[str]:
    return s.lctl("list_nids").out.split()


def _status(s: Any, nid: str) -> str:
    """``check_ni_status``: the status line after the NID in ``net show``."""
    for net in yaml.safe_load(s.lnetctl("net show").out)["net"]:
        for ni in net["local NI(s)"]:
            if ni["nid"] == nid:
                return str(ni["status"])
    raise AssertionError(f"{nid} not shown")


def test_sanity_107_deleting_extra_interface_does_not_crash(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp --if eth1")
    run(s, "net del --net tcp --if eth1")
    assert _nids(s) == ["10.60.0.1@tcp"]


def test_sanity_108_multi_rail_setup(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    expected = yaml.safe_load(s.lnetctl("net show").out)
    run(s, "net add --net tcp --if eth1")
    expected["net"][1]["local NI(s)"].append(
        {"nid": f"{FAKE_IP}@tcp", "status": "up", "interfaces": {0: "eth1"}})
    assert yaml.safe_load(s.lnetctl("net show").out) == expected


def test_sanity_110_configure_ni_using_net_add_nid(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    (nid,) = _nids(s)
    reinit(s)
    run(s, f"net add --nid {nid}")
    assert f"nid: {nid}" in s.lnetctl("net show --net tcp").out
    run(s, f"net del --nid {nid}")
    assert f"nid: {nid}" not in s.lnetctl("net show").out


def test_sanity_112_multiple_net_configurations(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp1 --if eth0")
    run(s, f"net add --nid {FAKE_IP}@tcp2")
    assert s.lnetctl("net show -v 3").out.count("lnd tunables:") == 2


def test_sanity_199_configure_interface_twice(s: Any) -> None:
    """``net add --ip2net "tcp IP"`` of an interface already configured fails."""
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    fails(s, "net add --ip2net 'tcp 10.60.0.1'")


def test_sanity_203_add_a_network_in_the_nodes_namespace(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp0 --if eth0")
    assert "nid: 10.60.0.1@tcp\n" in s.lnetctl("net show").out


def test_sanity_213_lnetdist_for_multiple_local_nids(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp --if eth1")
    nid1, nid2 = _nids(s)
    assert s.lctl(f"which_nid {nid1} {nid2}").out.strip() == nid1
    assert s.lctl(f"which_nid {nid2} {nid1}").out.strip() == nid2


def test_sanity_214_local_ni_status_when_link_is_downed(tb: Any, s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp --if eth1")
    nid1, nid2 = _nids(s)
    assert [_status(s, n) for n in ("0@lo", nid1, nid2)] == ["up", "up", "up"]
    run(s, f"ping --source {nid2} {nid1}")
    tb.link("s", "eth1", "down")
    try:  # the link watcher (a netdev notifier in real LNet) polls every 0.5 s on Mininet
        wait_for(lambda: [_status(s, n) for n in ("0@lo", nid1, nid2)], timeout=5,
                 expected=["up", "up", "down"])
    finally:
        tb.link("s", "eth1", "up")


def test_sanity_217_discover_peer_with_nnis_le_1(s: Any) -> None:
    reinit(s)
    assert s.lnetctl("net show").out.count("nid") == 1
    run(s, "discover 0@lo")


def test_sanity_241_lnd_timeout_value_in_tunables(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    assert "--lnd-timeout:" in s.lnetctl("net set -h").out

    def timeouts() -> list[int]:
        shown = yaml.safe_load(s.lnetctl("net show --net tcp -v").out)["net"][0]
        return [ni["lnd tunables"]["timeout"] for ni in shown["local NI(s)"]]

    (old,) = timeouts()
    run(s, f"net set --net tcp --lnd-timeout {old + 1}")
    assert timeouts() == [old + 1]  # check_parameter "timeout"
    run(s, "net set --net tcp --lnd-timeout 0")
    glob = yaml.safe_load(s.lnetctl("global show -v").out)["global"]["lnd_timeout"]
    assert timeouts() == [glob]
    run(s, f"net set --net tcp --lnd-timeout {old}")


def test_sanity_245_read_only_params_not_in_export_backup(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    shown = s.lnetctl("net show -v").out.splitlines()
    assert sum(1 for line in shown if line.lstrip().startswith("timeout:")) == 1
    exported = s.lnetctl("export -b").out.splitlines()
    assert sum(1 for line in exported if line.lstrip().startswith("timeout:")) == 0


#: lnet's ``accept_port`` module parameter at its default (``/sys/module/lnet/parameters``,
#: read by the real test, is not a file here; the daemon runs with the default)
ACCEPT_PORT = 988


@pytest.mark.mininet_only("reads the node's listening sockets (ss)")
def test_sanity_290_acceptor_uses_explicit_address_binding(s: Any) -> None:
    """``ss -ltnup``: a listener on exactly FAKE_IP:accept_port after ``net add --nid``."""
    reinit(s)
    run(s, f"net add --nid {FAKE_IP}@tcp")

    def bound() -> bool:
        res = s.exec(["ss", "-ltnup"])
        return any(line.split()[4] == f"{FAKE_IP}:{ACCEPT_PORT}"
                   for line in res.out.splitlines()[1:] if len(line.split()) > 4)

    wait_for(bound, timeout=5)


def test_sanity_301_dynamic_adds_of_same_interface(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    fails(s, "net add --net tcp --if eth0")
    run(s, "net del --net tcp --if eth0")


def test_sanity_302_peer_debug_info_can_be_dumped(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    (nid,) = _nids(s)
    run(s, f"ping {nid}")
    run(s, f"debug peer --nid {nid}")


def test_sanity_525_keep_reachable_peer_on_local_net_delete(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    run(s, "net add --net tcp2 --if eth0")
    nid1, nid2 = _nids(s)
    run(s, f"discover {nid1}")
    shown = s.lnetctl(f"peer show --nid {nid1}").out
    assert nid1 in shown and nid2 in shown
    run(s, "net del --net tcp")
    run(s, f"peer show --nid {nid2}")
    assert export(s)["net"][0]["net type"] == "tcp2"


def test_discover_lo_peer_not_shown_lnet_peer_ni_show_dump(s: Any) -> None:
    """api-ni.c ``lnet_peer_ni_show_dump`` skips a peer whose primary NID is ``0@lo``: with
    only the loopback NI, ``discover 0@lo`` (sanity-lnet 217) leaves the node's own peer
    with that primary (peer.c ``lnet_peer_data_present``: no other NID to take), which
    ``peer show`` and ``export`` do not list; ``peer list`` (the ioctl's peer table) does."""
    reinit(s)
    run(s, "discover 0@lo")
    assert "0@lo" in s.lnetctl("peer list").out  # the peer exists
    assert s.lnetctl("peer show").out.strip() == ""
    assert "0@lo" not in s.lnetctl("peer show -v 3").out
    assert "peer" not in export(s)
    assert "peer" not in yaml.safe_load(s.lnetctl("export").out)
