"""Installability (issue 18): optional parts missing give one-line errors naming them."""

from __future__ import annotations

import pytest


def test_packet_fault_without_the_faults_extra_is_one_line(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Issue 18: netfilterqueue is the optional ``faults`` extra; a packet fault asked for
    without it is a one-line FaultError naming the extra, not an ImportError later in the
    interposer process."""
    import importlib.util

    from faults.spec import FaultError
    from testbed.mininet import faultres

    faultres.require_nfqueue("loss")  # installed here (make venv installs the extra)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "netfilterqueue" else real(n, *a))
    with pytest.raises(FaultError, match=r"^loss: .*lnet-testbed\[faults\]") as info:
        faultres.require_nfqueue("loss")
    assert "\n" not in str(info.value)
