"""Installability (issue 18): optional parts missing give one-line errors naming them."""

from __future__ import annotations

import os

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


def test_missing_system_parts_are_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 18: what lies outside pip (root, Mininet, iptables, tshark) is named, with how
    to get it, in one line; present, the checks say nothing."""
    import importlib.util
    import os
    import shutil

    from testbed import needs

    assert needs.program("sh", "x") is None
    assert needs.program("no-such-program-xyz", "x") == (
        "x needs no-such-program-xyz, which is not installed (not on PATH): "
        "apt install no-such-program-xyz")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert needs.program("tshark", "decoding a capture").endswith("apt install tshark")
    assert needs.program("iptables", "the loss fault").startswith(
        "the loss fault needs iptables")
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    assert needs.mininet_backend() == ("the mininet backend needs root (uid 65534): run it "
                                       "as root, or use the sim backend")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "mininet" else real(n, *a))
    problem = needs.mininet_backend()
    assert problem is not None and problem.startswith("the mininet backend needs Mininet")
    assert "apt install mininet" in problem and "\n" not in problem


def test_capture_and_tshark_without_tshark(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: object) -> None:
    """``capture`` without dumpcap/tshark: CaptureFailed naming the Debian package, before
    nsenter would fail with "No such file" from inside a namespace."""
    import shutil
    from pathlib import Path

    from testbed.observe import capture

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(capture.CaptureFailed, match=r"^capture needs dumpcap.*apt install "
                       r"tshark$"):
        capture.start(os.getpid(), "lo", Path(str(tmp_path)) / "x.pcap")
    with pytest.raises(capture.CaptureFailed, match=r"^decoding a capture needs tshark"):
        capture.tshark_check(Path(str(tmp_path)) / "x.pcap")


def test_cli_missing_module_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """An optional Python part missing when a command imports it: one line, no traceback."""
    from testbed import cli
    from testbed.commands import lifecycle

    def boom(_args: object) -> int:
        raise ModuleNotFoundError("No module named 'mininet'", name="mininet")

    monkeypatch.setattr(lifecycle, "cmd_clean", boom)
    assert cli.main(["clean"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("testbed: error: Python module mininet is not installed here")
    assert "apt install mininet" in err and err.count("\n") == 1
