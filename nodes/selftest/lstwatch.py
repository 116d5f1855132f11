"""A progress display for a running lst batch (``testbed lst NODE --watch BATCH``).

Theory of operation: lst itself has no progress bar -- a user runs ``lst stat`` and ``lst
query`` by hand. ``watch`` does both every ``every`` seconds through the same console
ioctls: the batch's state (how many client nodes still run test units) and the counters of
every node in the batch (``lst stat``'s), from which it shows the batch's RPC rate (RPCs the
clients completed per second), the bytes per second the clients sent and received, and the
errors (brw, ping, RPC) so far. On a terminal the line is redrawn in place; otherwise one
line per sample. It ends when no client runs the batch any more and returns 0 if no error
was counted, 1 otherwise (-1: the console refused, the message printed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes.selftest.lstbase import LstIO, strerror

_MIB = 1024 * 1024


def _totals(ents: list[dict[str, Any]], clients: set[str]) -> dict[str, float]:
    out = {"ms": 0.0, "sent": 0.0, "recv": 0.0, "rpcs": 0.0, "errors": 0.0, "n": 0.0}
    for ent in ents:
        c = ent.get("payload") or {}
        if not c:
            continue
        if ent["peer"] in clients:
            out["sent"] += c["lnet_send_length"]
            out["recv"] += c["lnet_recv_length"]
            out["rpcs"] += c["rpc_rpcs_sent"]
            out["ms"] = max(out["ms"], c["fw_running_ms"])
            out["n"] += 1
        out["errors"] += c["fw_brw_errors"] + c["fw_ping_errors"] + c["rpc_errors"]
    return out


async def watch(io: LstIO, key: int, batch: str, every: float, out: Callable[[str], None],
                err: Callable[[str], None], tty: bool) -> int:
    """Show ``batch``'s progress until it stops; see the module docstring."""
    info = await io.ioctl("batch_info", key, {"name": batch})
    if info.get("rc"):
        err(f"watch: batch {batch}: {strerror(-int(info['rc']))}\n")
        return -1
    clients = {peer for peer, _state in info["nodes"]}
    srv = await io.ioctl("batch_info", key, {"name": batch, "server": True})
    nids = sorted({p.split("-", 1)[1] for p, _s in info["nodes"] + srv.get("nodes", [])})
    if not nids:
        err(f"watch: batch {batch} has no nodes\n")
        return -1
    prev: dict[str, float] | None = None
    first: dict[str, float] | None = None
    start, errors, line = io.time(), 0.0, ""
    while True:
        q = await io.ioctl("batch_query", key, {"name": batch, "timeout": 5})
        st = await io.ioctl("stat", key, {"nids": nids, "timeout": 5})
        rc = int(q.get("rc") or st.get("rc") or 0)
        if rc:
            err(f"watch: {strerror(-rc)}\n")
            return -1
        running = q["trans"]["fwk"][1]
        now = _totals(st.get("ents", []), clients)
        errors = now["errors"]
        if prev is not None and now["ms"] > prev["ms"]:
            dt = (now["ms"] - prev["ms"]) / 1000
            line = (f"[{io.time() - start:>4d} s] {batch}: running on {running}/{len(clients)}"
                    f" clients | {(now['rpcs'] - prev['rpcs']) / dt:,.0f} RPC/s | out "
                    f"{(now['sent'] - prev['sent']) / dt / _MIB:,.1f} MiB/s, in "
                    f"{(now['recv'] - prev['recv']) / dt / _MIB:,.1f} MiB/s | "
                    f"errors {errors:.0f}")
            out(("\r" + line.ljust(100)) if tty else line + "\n")
        prev, first = now, first or now
        if running == 0:
            if tty and line:
                out("\n")
            base, since = (first, "while watched") if first is not now else (
                dict.fromkeys(now, 0.0), "since the session began")
            out(f"{batch}: stopped after {io.time() - start} s; the clients completed "
                f"{now['rpcs'] - base['rpcs']:,.0f} RPCs, "
                f"{(now['sent'] - base['sent']) / _MIB:,.1f} MiB out, "
                f"{(now['recv'] - base['recv']) / _MIB:,.1f} MiB in {since}; "
                f"errors {errors:.0f}\n")
            return 0 if errors == 0 else 1
        await io.sleep(every)
