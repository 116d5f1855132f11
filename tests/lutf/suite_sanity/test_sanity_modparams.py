"""sanity-lnet.sh tests 200, 201, 202, 208, 255: LNet configured from the module parameters
``networks=``, ``ip2nets=``, ``routes=`` (lustre-release c881f8ebcb).

``cleanup_lnet`` + ``load_lnet "OPTS"`` is ``tb.reload_modules(node, {"lnet": OPTS})``: ``lnet
unconfigure``, the node's daemon restarted with ``--lnet-param`` and LNet left unconfigured
(testbed/modload.py). ``lnetctl lnet configure --all`` and ``lctl net up`` then configure the
NIs and routes of those parameters (nodes/dlc/modparams.py, api-ni.c ``LNetNIInit``).

200-202 run "in a non-default namespace": sanity-lnet creates ``test_ns`` holding only the fake
interface and runs ``lnetctl`` there; every node of the testbed is its own network namespace,
so the node ``s`` is that namespace and its daemon the LNet seen from it. Its first interface is
eth0 (10.60.0.1, where the test namespace's first and only one is test1pg), its second, eth1
(10.61.0.1), stands for test1pg. ``cleanup_fakeif`` in 208 is eth1 set down: the kernel's
``lnet_inet_enumerate`` sees only UP interfaces, so for LNet a down interface is a missing one.
sanity-lnet skips 202, 208 and 255 on clients from 2.17.53 ("kernel ip2nets deprecated");
the kernel code (config.c) is still there before 2.19.53, and that is what these follow.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import export, gateways, import_text, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]
IF0, FAKE_IF = "eth0", "eth1"
IF0_IP, FAKE_IP = "10.60.0.1", "10.61.0.1"
FAKE_NID = f"{FAKE_IP}@tcp"


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


@pytest.fixture
def s(tb: Any) -> Any:
    """The node, its modules reloaded with the topology's parameters afterwards and its
    interfaces up (``cleanup_netns``/``cleanup_lnet``)."""
    yield tb.node("s")
    tb.link("s", FAKE_IF, "up")
    tb.reload_modules("s", {"lnet": {}})


def _load_lnet(tb: Any, **params: str) -> Any:
    """``cleanup_lnet`` + ``load_lnet "K=V ..."``."""
    tb.reload_modules("s", {"lnet": params})
    return tb.node("s")


def _tcp_nids(node: Any) -> list[str]:
    shown = yaml.safe_load(run(node, "net show --net tcp").out) or {}
    return [ni["nid"] for net in shown.get("net", []) for ni in net["local NI(s)"]]


def test_sanity_200_configure_all_without_module_options(tb: Any, s: Any) -> None:
    """``load_lnet networks=""``; ``lnet configure --all`` in the namespace: the default
    ``tcp`` on its first interface (``lnet_get_networks``, ``lnet_inet_select``)."""
    s = _load_lnet(tb, networks="")
    run(s, "lnet configure --all")
    assert _tcp_nids(s) == [f"{IF0_IP}@tcp"]


def test_sanity_201_networks_module_option(tb: Any, s: Any) -> None:
    """``load_lnet networks=tcp(test1pg)``; ``lnet configure --all``: FAKE_NID configured."""
    s = _load_lnet(tb, networks=f"tcp({FAKE_IF})")
    run(s, "lnet configure --all")
    assert _tcp_nids(s) == [FAKE_NID]


def test_sanity_202_ip2nets_module_option(tb: Any, s: Any) -> None:
    """``load_lnet networks="" ip2nets="tcp0(test1pg) FAKE_IP"``; ``lnet configure --all``."""
    s = _load_lnet(tb, networks="", ip2nets=f"tcp0({FAKE_IF}) {FAKE_IP}")
    run(s, "lnet configure --all")
    assert FAKE_NID in _tcp_nids(s)


def _net_up_nids(tb: Any, ip2nets: str) -> list[str]:
    """``test_208_load_and_check_lnet``: load with ip2nets, ``lctl net up``, the NIDs
    ``lctl list_nids`` prints in order; then ``lctl net down``."""
    s = _load_lnet(tb, networks="", ip2nets=ip2nets)
    res = s.lctl("net up")
    assert res.rc == 0, f'Failed to load LNet with ip2nets "{ip2nets}": {res.out}{res.err}'
    nids = s.lctl("list_nids").out.split()
    s.lctl("net down")
    return nids


def test_sanity_208_kernel_ip2nets_configurations(tb: Any, s: Any) -> None:
    """Single NID; two NIDs on two nets; two NIDs on one net (two rules, then the alt syntax
    with an address range matching both): the first NID is always INTERFACES[0]'s. With the
    fake interface gone, the alt syntax still matches IF0's address but its interface list
    names a missing one: ``lctl net up`` fails."""
    rule0 = f"tcp({IF0}) {IF0_IP}"
    assert _net_up_nids(tb, rule0) == [f"{IF0_IP}@tcp"]
    assert _net_up_nids(tb, f"{rule0}; tcp1({FAKE_IF}) {FAKE_IP}") == [
        f"{IF0_IP}@tcp", f"{FAKE_IP}@tcp1"]
    assert _net_up_nids(tb, f"{rule0}; tcp({FAKE_IF}) {FAKE_IP}") == [
        f"{IF0_IP}@tcp", f"{FAKE_IP}@tcp"]
    addr1, addr2 = IF0_IP.split("."), FAKE_IP.split(".")
    rng = ".".join(f"[{a},{b}]" for a, b in zip(addr1, addr2, strict=True))
    alt = f"tcp({IF0},{FAKE_IF}) {rng}"
    assert _net_up_nids(tb, alt) == [f"{IF0_IP}@tcp", f"{FAKE_IP}@tcp"]
    tb.link("s", FAKE_IF, "down")  # cleanup_fakeif
    s = _load_lnet(tb, networks="", ip2nets=alt)
    res = s.lctl("net up")
    assert res.rc != 0, f"LNet bring up should have failed: {res.out}"
    assert f"failed to find UP interface {FAKE_IF}" in res.err and "Traceback" not in res.err
    assert s.lctl("list_nids").rc != 0  # and LNet stayed down


def test_sanity_255_routes_param_with_pdsh_syntax(tb: Any, s: Any) -> None:
    """``load_lnet networks="tcp(IF0)" routes="o2ib IF0_NET.[GW-GW+4]"``, ``lctl net up``:
    the export has the five gateways (``validate_gateway_nids``), each a route to o2ib with
    hop -1 and priority 0 and a peer; reinit and the export imported back gives the routes
    again. sanity-lnet also requires the import's status to be 0; the kernel as read refuses
    the peer entries of gateways (docs/sanity-lnet.md row 255), so that one check differs."""
    base = reinit(s)
    if0_net, host = IF0_IP.rsplit(".", 1)
    gw_host = int(host) + 1
    gws = [f"{if0_net}.{i}@tcp" for i in range(gw_host, gw_host + 5)]
    s = _load_lnet(tb, networks=f"tcp({IF0})",
                   routes=f"o2ib {if0_net}.[{gw_host}-{gw_host + 4}]@tcp")
    res = s.lctl("net up")
    assert res.rc == 0, f"Failed to load LNet with routes: {res.out}{res.err}"
    actual = export(s)
    assert sorted((r["net"], r["gateway"], r["hop"], r["priority"]) for r in actual["route"]) \
        == [("o2ib", gw, -1, 0) for gw in gws]  # in the order lnet_add_route_to_rnet picks
    assert sorted(gateways(s)) == gws
    assert {p["primary nid"] for p in actual["peer"]} >= set(gws)
    assert [ni["interfaces"] for ni in actual["net"][0]["local NI(s)"]] == [{0: IF0}]
    assert actual["global"] == base["global"]
    reinit(s)
    res = import_text(s, yaml.safe_dump(actual, sort_keys=False))
    assert "Traceback" not in res.err
    assert sorted(gateways(s)) == gws  # the routes came back
    # the peer entries follow the routes (export order, imported in document order):
    # lnet_peer_add deletes an unconfigured peer to recreate it configured, and
    # lnet_peer_ni_del_locked refuses a gateway with -EBUSY (peer.c), so each is refused
    refused = [ln for ln in res.err.splitlines() if "descr:" in ln]
    assert res.rc != 0 and refused == [
        f'          descr: "Peer NI {gw} is a gateway. Can not delete it"'
        for gw in [p["primary nid"] for p in actual["peer"]]], res.err
