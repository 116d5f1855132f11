"""What the single-node sanity-lnet ports share: the node ``s`` of the module's topology
(sanity-lnet runs most of its tests on the one node it is started on)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def s(module_topology: Any) -> Any:
    """The node ``s`` of the topology the test module names (``pytest.mark.topology``),
    asked each test: a test may reload its modules (a new daemon, a new handle)."""
    return module_topology.node("s")
