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


@pytest.mark.slow
def test_a_wheel_builds_from_a_read_only_checkout(tmp_path: object) -> None:
    """Issue 27 item 11: ``pip install`` from a read-only checkout failed creating
    ``lnet_testbed.egg-info`` (then ``build/lib``) in the tree. The checkout is copied and
    bind-mounted read-only in a private mount namespace (``unshare -m``: nobody else sees
    it); ``pip wheel`` must build from it and leave it as it was."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a read-only bind mount")
    root = Path(__file__).resolve().parents[2]
    src, ro, out = (Path(str(tmp_path)) / d for d in ("src", "ro", "wheels"))
    shutil.copytree(root, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", "reports",
        "_native", "*.so"))
    ro.mkdir()
    before = sorted(p.name for p in src.iterdir())
    script = (f"mount --bind {src} {ro} && mount -o remount,ro,bind {ro} && "
              f"{{ touch {ro}/probe 2>/dev/null && exit 99; "
              f"{sys.executable} -m pip wheel -q --no-deps --no-build-isolation -w {out} {ro}; }}")
    env = {**os.environ, "LNET_TESTBED_PURE_PYTHON": "1", "PIP_NO_INPUT": "1"}
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                         text=True, env=env, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    assert [p.name for p in out.glob("lnet_testbed-*.whl")], list(out.iterdir())
    assert sorted(p.name for p in src.iterdir()) == before  # nothing written in the tree
