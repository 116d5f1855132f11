"""Shared header of the Mininet integration tests: marks, the fixture, default-topology NIDs.

``from itkit import pytestmark`` gives a module the ``mininet`` and ``slow`` marks and a skip
with the reason when Mininet or root is missing. The ``testbed_factory`` fixture comes from
the package's pytest11 entry point (``pip install -e .`` in ``make test``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.pytest_plugin import mininet_unavailable

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
