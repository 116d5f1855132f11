"""testbed/vagrant/rtbudget.py: each LXC guest's real-time budget (a timed fault's
interposer runs SCHED_FIFO in it; without one, EPERM under CONFIG_RT_GROUP_SCHED), never
more than the host's cpu cgroup root has free, and the Vagrantfile line that asks for it."""

from __future__ import annotations

from pathlib import Path

from testbed.vagrant import rtbudget
from testbed.vagrant import vagrantfile as vf


def _group(d: Path, runtime: int, period: int = 1_000_000) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.rt_runtime_us").write_text(f"{runtime}\n")
    (d / "cpu.rt_period_us").write_text(f"{period}\n")
    return d


def test_each_guest_gets_at_most_its_share_of_what_is_free(tmp_path: Path) -> None:
    root = _group(tmp_path, 950_000)
    _group(tmp_path / "machine", 0)
    assert rtbudget.guest_rt_us(2, root) == rtbudget.GUEST_US
    _group(tmp_path / "lxc.payload.a", 300_000)
    _group(tmp_path / "lxc.payload.b", 150_000, period=500_000)  # a ratio: 300,000 of 1 s
    # 950,000 - 600,000 used - 100,000 reserve = 250,000 free: 83,000 each for 3
    assert rtbudget.guest_rt_us(3, root) == 83_000
    assert rtbudget.guest_rt_us(20, root) == 0  # under MIN_US each: none


def test_no_rt_group_scheduling_no_budget(tmp_path: Path) -> None:
    assert rtbudget.guest_rt_us(2, tmp_path) == 0  # no cpu.rt_* files (cgroup v2, no RT groups)
    assert rtbudget.guest_rt_us(2, _group(tmp_path / "unlimited", -1)) == rtbudget.GUEST_US


def test_the_lxc_guest_asks_for_its_budget() -> None:
    g = vf.Guest("c1", "lntb-x-c1", "10.213.0.10", (), "02:aa:bb:cc:00:ff")
    line = 'lxc.customize "cgroup.cpu.rt_runtime_us", "100000"'
    assert line in vf.render(vf.Layout("t", "lxc", "box/x", lxc_rt_us=100_000), [g])
    assert "rt_runtime_us" not in vf.render(vf.Layout("t", "lxc", "box/x"), [g])
