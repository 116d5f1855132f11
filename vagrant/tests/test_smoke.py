"""The Vagrant smoke suite (issue 15 item 5): a client and a server with two rails each on
Vagrant guests: bring-up, ``lnetctl ping``, a loss and a delay fault inside the client's guest
(issue 32 item 3), a rail down with traffic surviving on the other,
the control plane refusing a stranger, teardown with nothing left on the host (guests,
networks, volumes, bridges, iptables rules, daemons, ip_forward). LXC always; libvirt (QEMU
TCG on this machine) marked ``libvirt``."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import zmq
from vgkit import loss_and_delay, multirail_then_rail_cut

import testbed
from nodes.daemon.client import CurveKeys, DaemonRefused, request
from testbed import runstate
from testbed.clean import clean_testbed, leftovers
from testbed.vagrant import clean as vclean
from testbed.vagrant.boxes import unavailable

SMOKE = Path(__file__).resolve().parent / "smoke.yaml"
#: PUTs per burst: 64 KiB each on LXC; fewer, smaller ones on emulated VMs
BURST = {"lxc": (200, 65536), "libvirt": (100, 16384)}
#: PUTs under the loss fault (issue 32 item 3)
LOSSY = {"lxc": (300, 16384), "libvirt": (60, 16384)}


def host_snapshot() -> dict[str, str]:
    """What a testbed must leave exactly as it found it on the host."""
    rules = {}
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            rules[f"{tool}/{table}"] = subprocess.run(
                [tool, "-w", "5", "-t", table, "-S"], capture_output=True, text=True,
                check=False).stdout
    rules["ip_forward"] = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    rules["kvm"] = oct(os.stat("/dev/kvm").st_mode) if Path("/dev/kvm").exists() else ""
    return rules


def smoke(provider: str, name: str) -> None:
    before = host_snapshot()
    started = time.monotonic()
    tb = testbed.up(SMOKE, backend="vagrant", provider=provider, name=name)
    try:
        print(f"\n{provider}: bring-up {time.monotonic() - started:.1f}s")
        c1, s1 = tb.node("c1"), tb.node("s1")
        for nid in s1.nids:
            res = c1.ping(nid)
            assert res.rc == 0, (res.out, res.err)
        started = time.monotonic()
        loss_and_delay(tb, "c1", "s1", *LOSSY[provider])
        print(f"{provider}: loss and delay faults {time.monotonic() - started:.1f}s")
        multirail_then_rail_cut(tb, "c1", "s1", *BURST[provider])
        # the same lnetctl inside the guest's node namespace sees the NI down
        inside = c1.exec(["lnetctl", "net", "show"])
        assert inside.rc == 0 and "status: down" in inside.out, inside
        # control plane: a stranger's key is refused; the port is on the management net only
        pub, sec = zmq.curve_keypair()
        with pytest.raises(DaemonRefused):
            request(c1.endpoint, {"cmd": "hello"}, timeout=10,
                    curve=CurveKeys(pub, sec, tb.keys.client("c1").server))
        mgmt_ip, port = c1.endpoint[len("tcp://"):].rsplit(":", 1)
        probe = c1.exec(["python3", "-c", "import socket,sys; s=socket.socket(); "
                         "s.settimeout(3); sys.exit(s.connect_ex((sys.argv[1], "
                         "int(sys.argv[2]))) == 0)", mgmt_ip, port])
        assert probe.rc == 0, "the control port is reachable from the node's LNet network"
    finally:
        started = time.monotonic()
        removed = tb.down()
        print(f"{provider}: teardown {time.monotonic() - started:.1f}s")
    assert leftovers(name) == [], removed
    assert vclean.host_daemons_left() == []
    assert host_snapshot() == before


@pytest.mark.skipif(unavailable("lxc") is not None, reason=str(unavailable("lxc")))
def test_smoke_lxc(tb_name: str) -> None:
    smoke("lxc", tb_name)


@pytest.mark.skipif(unavailable("lxc") is not None, reason=str(unavailable("lxc")))
def test_supervisor_killed_then_clean_removes_everything(tb_name: str) -> None:
    """The crash path: SIGKILL the testbed's supervisor, then clean it by name (what
    ``testbed clean`` does for each testbed): guests, bridges, reservations all go."""
    tb = testbed.up(SMOKE, backend="vagrant", provider="lxc", name=tb_name)
    pid = runstate.read_state(tb.rundir)["supervisor_pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while runstate.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(item.startswith("container") for item in leftovers(tb_name))
    removed = clean_testbed(tb_name)
    assert any("vagrant guests" in r or "container" in r for r in removed), removed
    assert leftovers(tb_name) == [], removed


@pytest.mark.libvirt
@pytest.mark.slow
@pytest.mark.skipif(unavailable("libvirt") is not None, reason=str(unavailable("libvirt")))
def test_smoke_libvirt(tb_name: str) -> None:
    smoke("libvirt", tb_name)
