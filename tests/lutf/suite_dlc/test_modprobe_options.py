"""``options lnet networks=... ip2nets=... routes=... forwarding=...`` in a topology (issue 26
item 9): applied by ``lnetctl lnet configure --all`` as real LNet does at module load.

api-ni.c ``LNetNIInit`` (not ``ln_nis_from_mod_params`` unless ``--all``) parses ``networks``
or ``ip2nets`` into NIs and ``routes`` into routes; a local gateway makes the node a router
unless ``forwarding=`` says otherwise (router.c ``lnet_rtrpools_alloc``). Bring-up sends such a
node ``lnet configure --all`` and no ``net add`` (``testbed/plan/verbs.local_steps``); the
strings stay readable in ``/sys/module/lnet/parameters``. Module-scoped
``modprobe-routed.yaml``; runs on Mininet and with ``--lnet-backend=sim``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lutf.lnet_views import advance_until, local_nis, ok
from testbed.plan import TopologyError, load_topology

pytestmark = [pytest.mark.mininet, pytest.mark.topology("modprobe-routed.yaml")]

C1, R1_TCP, R1_TCP1, S1 = "10.30.0.1@tcp", "10.30.0.2@tcp", "10.31.0.1@tcp1", "10.31.0.2@tcp1"


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


def cat(node: Any, name: str) -> str:
    res = node.exec(["sh", "-c", f"cat /sys/module/lnet/parameters/{name}"])
    assert res.rc == 0, res
    return str(res.out)


@pytest.mark.requirement("cfg-045")
def test_networks_and_ip2nets_make_the_nis(tb: Any) -> None:
    """``networks="tcp(eth0),tcp1(eth1)"`` gives r1 one NI per net on the named interfaces;
    ``ip2nets="tcp1 10.31.0.*"`` gives s1 the net whose pattern matches its address; the
    files read the strings as loaded."""
    assert set(local_nis(tb.node("c1"))) == {C1}
    assert {n: ni["interfaces"][0] for n, ni in local_nis(tb.node("r1")).items()} == {
        R1_TCP: "eth0", R1_TCP1: "eth1"}
    assert set(local_nis(tb.node("s1"))) == {S1}
    assert cat(tb.node("r1"), "networks") == "tcp(eth0),tcp1(eth1)\n"
    assert cat(tb.node("s1"), "ip2nets") == "tcp1 10.31.0.*\n"
    assert cat(tb.node("c1"), "routes") == "tcp1 10.30.0.2@tcp\n"


def test_routes_and_forwarding_route_across_the_router(tb: Any) -> None:
    """``routes=`` on c1 and s1 and ``forwarding=enabled`` on r1: c1 reaches s1's tcp1 NID
    through r1 once the route is up, and r1 forwards (``routing show``)."""
    c1 = tb.node("c1")
    routes = c1.yaml("route show -v")["route"]
    assert [(r["net"], r["gateway"]) for r in routes] == [("tcp1", R1_TCP)]
    advance_until(tb, lambda: c1.lnetctl(f"ping {S1}").rc == 0, 30.0, "c1 to ping s1")
    assert tb.node("r1").yaml("routing show")["routing"][-1]["enable"] == 1
    assert cat(tb.node("r1"), "forwarding") == "enabled\n"


def test_configure_all_again_loads_the_module_parameters(tb: Any) -> None:
    """``lnet unconfigure`` then ``lnet configure --all`` on c1 (sanity-lnet's reload): its NI
    and route come back from the module parameters, not from any ``net add``; a bare ``lnet
    configure`` makes none."""
    c1 = tb.node("c1")
    ok(c1, "lnetctl", "lnet unconfigure")
    ok(c1, "lnetctl", "lnet configure")
    assert local_nis(c1) == {}
    ok(c1, "lnetctl", "lnet unconfigure")
    ok(c1, "lnetctl", "lnet configure --all")
    assert set(local_nis(c1)) == {C1}
    assert [r["gateway"] for r in c1.yaml("route show")["route"]] == [R1_TCP]
    advance_until(tb, lambda: c1.lnetctl(f"ping {S1}").rc == 0, 30.0, "c1 to ping s1 again")


@pytest.mark.parametrize(("value", "why"), [
    ('"tcp(eth0"', "Error parsing 'networks="),
    ("3", "expected a string"),
])
def test_bad_networks_is_one_line_naming_the_key(tmp_path: Path, value: str, why: str) -> None:
    """A ``networks`` the kernel's parser refuses fails validation in one line naming the
    file, line and key (nothing is started)."""
    topo = tmp_path / "bad.yaml"
    topo.write_text("networks:\n  lan0: {lnet: tcp, subnet: 10.30.0.0/24}\nnodes:\n"
                    f"  c1:\n    interfaces: [lan0]\n    global: {{networks: {value}}}\n")
    with pytest.raises(TopologyError) as err:
        load_topology(topo)
    text = str(err.value)
    assert why in text and "nodes.c1.global.networks" in text and "\n" not in text.strip()
