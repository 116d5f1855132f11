"""LNet module parameters from a topology's ``global:`` block (spec §0; cfg-045).

Real LNet reads ``options lnet lnet_retry_count=1 ...`` when the module loads, before any
NI exists; ``lnetctl global show`` then shows the values and the send path uses them. The
Mininet backend hands them to each node daemon (``--lnet-param``), the sim backend applies
them at the same point (``SimTestbed._configure``): these tests pass on both backends
(``--lnet-backend=sim``). Module-scoped ``modparams.yaml``: s1 overrides two parameters.
"""

from __future__ import annotations

from typing import Any

import pytest

from lutf.lnet_views import C1_NIDS, S1_NIDS, delta, ok, reset_nodes, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("modparams.yaml")]

COMMON = {"numa_range": 3, "max_interfaces": 4096, "discovery": 0, "retry_count": 1,
          "transaction_timeout": 20, "recovery_limit": 30, "response_tracking": 2,
          "lnd_timeout": (20 - 1) // (1 + 1)}  # lnet_set_lnd_timeout, spec §0


@pytest.fixture(scope="module")
def tb(module_topology: Any) -> Any:
    return module_topology


@pytest.mark.parametrize(("node", "own"), [
    ("c1", {"health_sensitivity": 50, "max_recovery_ping_interval": 900}),
    ("s1", {"health_sensitivity": 200, "max_recovery_ping_interval": 64}),
])
@pytest.mark.requirement("cfg-045", "cfg-090", "hlth-cfg-retry", "hlth-cfg-sensitivity",
                         "hlth-cfg-transaction-timeout")
def test_module_params_show_in_global_show(tb: Any, node: str, own: dict[str, int]) -> None:
    """Each ``lnet_*`` parameter lands in the tunable ``global show`` prints
    (``lnet_peer_discovery_disabled: 1`` as ``discovery: 0``, ``lnet_interfaces_max`` below
    16 as the default 4096, as intf_max_set does); a node's own value wins."""
    g = tb.node(node).yaml("global show")["global"]
    assert {k: g[k] for k in (*COMMON, *own)} == {**COMMON, **own}


@pytest.mark.requirement("hlth-cfg-retry")
def test_module_retry_count_bounds_the_resends(tb: Any) -> None:
    """``lnet_retry_count=1``: a PUT whose every transmission fails with a resendable local
    error (an LNet drop rule with LOCAL_TIMEOUT on all PUTs, spec §8.2) is sent twice, then
    fails: one resend and one failed resend per PUT (spec §3.3, max 1 + retry_count)."""
    reset_nodes(tb)
    c1 = tb.node("c1")
    try:
        ok(c1, "lctl", "net_drop_add -s * -d * -r 1 -m put -e local_timeout")
        before = stats(c1)
        reply = c1.put(S1_NIDS[0], count=5, size=4096)
        assert reply["ok"] and reply["failed"] == 5, reply
        moved = delta(stats(c1), before)
        assert (moved["resend_count"], moved["failed_resends"]) == (5, 5), moved
        assert moved["local_timeout_count"] == 10, moved
    finally:
        reset_nodes(tb)
    assert c1.ping(S1_NIDS[1], source=C1_NIDS[1]).rc == 0  # and the rails work again
