"""Shared by the Vagrant suites (``make smoke-vagrant``; run serially, after ``make test``)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def tb_name() -> str:
    """A testbed name nobody else uses (these suites never run `testbed clean`)."""
    return f"vg{uuid.uuid4().hex[:8]}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "libvirt: boots emulated VMs (QEMU TCG here): minutes "
                            "and ~1.5 GiB per VM; `make smoke-vagrant-libvirt`")
