"""Shared header of the Mininet integration tests: marks, the fixture, default-topology NIDs.

``from itkit import pytestmark`` gives a module the ``mininet`` and ``slow`` marks and a skip
with the reason when Mininet or root is missing. The ``testbed_factory`` fixture comes from
the package's pytest11 entry point (``pip install -e .`` in ``make test``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.pytest.plugin import mininet_unavailable

# (the plugin, an installed pytest11 entry point, provides the testbed_factory fixture)

_REASON = mininet_unavailable()
pytestmark = [
    pytest.mark.mininet,
    pytest.mark.slow,
    pytest.mark.skipif(_REASON is not None, reason=_REASON or ""),
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = PROJECT_ROOT / "topologies"
#: NIDs of the default topology (topologies/default.yaml).
C1_NIDS = ["10.10.0.1@tcp", "10.11.0.1@tcp"]
S1_NIDS = ["10.10.0.2@tcp", "10.11.0.2@tcp"]


def settle_peers(tb: Any, nodes: tuple[str, ...] = ("c1", "s1")) -> None:
    """Bring every peer of ``nodes`` up to date the real way (``lnetctl discover``), then
    ``lnetctl stats reset``: discovery is on (spec §5.3), so the first message to a peer that
    is not up to date, a static one too, waits for a ping and push round. Tests that count
    messages or look at per-rail health call this first so they see only their own traffic."""
    import yaml

    for name in nodes:
        node = tb.node(name)
        res = node.lnetctl("peer", "show")
        assert res.rc == 0, res.err
        for peer in (yaml.safe_load(res.out) or {}).get("peer") or []:
            done = node.lnetctl("discover", peer["primary nid"])
            assert done.rc == 0, done.err
    for name in nodes:  # after every discovery: a discover's REPLY/ACK counts on the peer
        assert tb.node(name).lnetctl("stats", "reset").rc == 0
