"""``testbed capture``: a packet capture inside a node's network namespace, and Wireshark's
own view of it (issue 16 item 3).

Theory of operation: ``dumpcap`` (Debian's wireshark-common, pulled in by tshark; pcapng
natively, stops cleanly on SIGINT or after ``-a duration:S``) runs under ``nsenter`` in the
node's namespace (the Mininet host's pid), so it sees exactly the node's interfaces; ``any``
captures them all (Linux cooked headers). ``tshark_check`` asks tshark's LNet dissector
(epan/dissectors/packet-lnet.c) how many frames it decoded as LNet and which it flagged
malformed. That dissector hands a PUT's payload to the subdissector registered for its portal
(``lnet.ptl_index``: only Lustre's ptlrpc portals have one) and, when there is none, leaves the
payload unconsumed and flags the frame "Malformed" (expert info ``Capture:N offset:96``): so
every lnet_selftest bulk PUT (portal 52, SRPC_RDMA_PORTAL) and every discovery push (portal 0),
ours and real LNet's alike, is "Malformed" in a stock tshark. ``DATA_PORTALS_LUA`` registers
Wireshark's ``data`` dissector for those portals (what they carry: opaque bulk data, a ping
buffer), after which what remains flagged is really malformed. docs/events.md §4 lists the
dissector's other limits.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed import needs, sh
from testbed.observe.o2ibcap import O2IB_LUA

DUMPCAP = "dumpcap"
TSHARK = "tshark"
#: portals whose PUT payloads no Wireshark dissector claims: LNet's own reserved portal 0
#: (LNET_RESERVED_PORTAL: discovery pushes carry the ping buffer) and lnet_selftest's
#: (lnet/selftest/rpc.h: SRPC_REQUEST_PORTAL 50, SRPC_FRAMEWORK_REQUEST_PORTAL 51,
#: SRPC_RDMA_PORTAL 52, the bulk data)
DATA_PORTALS = (0, 50, 51, 52)
DATA_PORTALS_LUA = "".join(
    f'DissectorTable.get("lnet.ptl_index"):add({p}, Dissector.get("data"))\n'
    for p in DATA_PORTALS)
TSHARK_TIMEOUT = 300.0


class CaptureFailed(Exception):
    """dumpcap or tshark failed; one line for the user."""


def dumpcap_argv(iface: str, out: Path, seconds: float | None, bpf: str | None) -> list[str]:
    argv = [DUMPCAP, "-q", "-i", iface, "-w", str(out)]
    if seconds is not None:
        argv += ["-a", f"duration:{max(1, round(seconds))}"]
    if bpf:
        argv += ["-f", bpf]
    return argv


def start(ns_pid: int, iface: str, out: Path, seconds: float | None = None,
          bpf: str | None = None) -> subprocess.Popen[bytes]:
    """Start dumpcap in the namespace of ``ns_pid`` writing ``out`` (caller waits/stops)."""
    problem = needs.program(DUMPCAP, "capture")
    if problem is not None:  # else nsenter's "No such file" arrives later (issue 18)
        raise CaptureFailed(problem)
    argv = sh.ns_argv(dumpcap_argv(iface, out, seconds, bpf), ns_pid)
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        raise CaptureFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> str:
    """Stop a capture (SIGINT: dumpcap finishes the file) and return its stderr."""
    if proc.poll() is None:
        proc.send_signal(2)
    try:
        _out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
    return err.decode(errors="replace")


def wait_ready(out: Path, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Wait until dumpcap has opened its file (its capture is running) or failed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise CaptureFailed(f"dumpcap exited with rc {proc.returncode}: "
                                f"{' '.join(err.split())[:300]}")
        if out.exists() and out.stat().st_size > 0:
            return
        time.sleep(0.05)
    raise CaptureFailed(f"dumpcap did not start capturing within {timeout:g} s")


@dataclass
class TsharkView:
    """What tshark's LNet dissector made of a capture."""

    lnet_frames: int = 0
    malformed: list[dict[str, str]] = field(default_factory=list)


def _tshark(argv: Sequence[str]) -> str:
    problem = needs.program(TSHARK, "decoding a capture")
    if problem is not None:
        raise CaptureFailed(problem)
    try:
        res = subprocess.run(list(argv), capture_output=True, timeout=TSHARK_TIMEOUT,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CaptureFailed(f"tshark: {exc}") from None
    if res.returncode != 0:
        raise CaptureFailed(f"tshark exited with rc {res.returncode}: "
                            f"{' '.join(res.stderr.decode(errors='replace').split())[:300]}")
    return res.stdout.decode(errors="replace")


def tshark_check(path: Path, *, data_portals: bool = True) -> TsharkView:
    """Count LNet frames and list the malformed ones (frame, LNet types, portals, message).

    ``data_portals`` maps ``DATA_PORTALS`` to Wireshark's ``data`` dissector first (see the
    module docstring); False shows stock tshark's view."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="lnet-selftest-") as lua:
        lua.write(DATA_PORTALS_LUA + O2IB_LUA)  # + the emulated o2ib framing (o2ibcap.py)
        lua.flush()
        extra = ["-X", f"lua_script:{lua.name}"] if data_portals else []
        base = [TSHARK, "-n", "-r", str(path), *extra]
        frames = _tshark([*base, "-Y", "lnet", "-T", "fields", "-e", "frame.number"])
        bad = _tshark([*base, "-Y", '_ws.malformed || _ws.expert.group == "Malformed"',
                       "-T", "fields", "-E", "separator=|", "-e", "frame.number",
                       "-e", "lnet.msg_type", "-e", "lnet.ptl_index",
                       "-e", "_ws.expert.message"])
    view = TsharkView(lnet_frames=len(frames.split()))
    for line in bad.splitlines():
        parts = ([*line.split("|"), "", "", "", ""])[:4]
        view.malformed.append({"frame": parts[0], "msg_type": parts[1], "portal": parts[2],
                               "message": parts[3]})
    return view
