"""``lst stat`` and ``lst show_error`` (lnet/utils/lst.c ``jt_lst_stat``, ``lst_print_stat``,
``lst_cal_lnet_stat``, ``lst_print_lnet_stat``, ``jt_lst_show_error``).

Theory of operation: ``stat`` asks every node of each group (or NID list) for its counters
every ``--delay`` seconds and prints, from the second sample on, the ``[LNet Rates of G]``
and ``[LNet Bandwidth of G]`` blocks: per node, the LNet messages and bytes received ([R])
and sent ([W]) since the previous sample over the time the node itself says passed (its
session's ``running_ms``), then the average, minimum and maximum over the group's nodes.
The arithmetic is lst's, in C ``float`` (``f32``), so the figures print as lst prints them;
a node whose stat RPC failed is counted in "Failed to stat on N nodes". ``--count N`` stops
after N blocks (N+1 samples); without it lst runs until interrupted.
"""

from __future__ import annotations

import struct
from typing import Any

from nodes.selftest.getopt import Opt, atoi
from nodes.selftest.lstbase import CMD_HELP, LstBase, strerror

_F32 = struct.Struct("f")
_U32 = 0xFFFF_FFFF


def f32(x: float) -> float:
    """``x`` rounded to a C float."""
    try:
        return float(_F32.unpack(_F32.pack(x))[0])
    except OverflowError:
        return x


class _Result:
    """``lst_lnet_stat_result_t``: sum, min, max, average per (kind, direction)."""

    def __init__(self) -> None:
        self.count = 0
        self.v: dict[tuple[str, str], list[float]] = {
            (k, d): [0.0, 0.0, 0.0, 0.0] for k in ("rate", "perf") for d in ("snd", "rcv")}

    def add(self, key: tuple[str, str], x: float) -> None:
        avg_min_max_tot = self.v[key]
        avg_min_max_tot[3] = f32(avg_min_max_tot[3] + x)
        if avg_min_max_tot[1] > x or avg_min_max_tot[1] == 0:
            avg_min_max_tot[1] = x
        if avg_min_max_tot[2] < x:
            avg_min_max_tot[2] = x


def _cal(res: _Result, delta: float, new: dict[str, int], old: dict[str, int],
         mbs: bool) -> None:
    """``lst_cal_lnet_stat``: one node's rates and bandwidth since its previous sample."""
    unit = float(1000 * 1000 if mbs else 1024 * 1024)
    for d, key in (("snd", "send"), ("rcv", "recv")):
        nob = (new[f"lnet_{key}_length"] - old[f"lnet_{key}_length"]) % 2**64
        res.add(("perf", d), f32(f32(f32(float(nob)) / unit) / delta) if delta else
                float("inf"))
        msgs = (new[f"lnet_{key}_count"] - old[f"lnet_{key}_count"]) & _U32
        res.add(("rate", d), f32(f32(float(msgs)) / delta) if delta else float("inf"))
    res.count += 1
    for v in res.v.values():
        v[0] = f32(v[3] / res.count)


class StatCmds(LstBase):
    """``stat`` and ``show_error``."""

    async def _targets(self, name: str) -> tuple[int, list[str]] | None:
        """``lst_stat_req_param_alloc``: a group, else a NID list."""
        got = await self.node_count("group", name)
        if got is None and self.errno == 2:
            got = await self.node_count("nodes", name)
        if got is None:
            self.err(f"Failed to get count of nodes from {name}: {strerror(self.errno)}\n")
        return got

    async def stat(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("stat", argv, "t:d:lcbarwgnxm", [
            Opt("timeout", True, "t"), Opt("delay", True, "d"), Opt("count", True, "o"),
            Opt("lnet", False, "l"), Opt("rpc", False, "c"), Opt("bw", False, "b"),
            Opt("rate", False, "a"), Opt("read", False, "r"), Opt("write", False, "w"),
            Opt("avg", False, "g"), Opt("min", False, "n"), Opt("max", False, "x"),
            Opt("mbs", False, "m")])
        if p.error:
            return CMD_HELP
        timeout, delay, count, lnet, bwrt, rdwr, stype, mbs = 5, 5, -1, True, 0, 0, -1, False
        for val, arg in p.opts:
            if val in "tdo":
                n = atoi(arg or "")
                timeout, delay, count = (n if val == "t" else timeout,
                                         n if val == "d" else delay, n if val == "o" else count)
            elif val in "lc":
                lnet = val == "l"
            elif val in "ba":
                bwrt |= 1 if val == "b" else 2
            elif val in "rw":
                rdwr |= 1 if val == "r" else 2
            elif val in "gnx":
                bit = {"g": 1, "n": 2, "x": 4}[val]
                stype = bit if stype == -1 else stype | bit
            else:
                mbs = True
        if not p.operands:
            return CMD_HELP
        if timeout <= 0 or delay <= 0:
            self.err("Invalid timeout or delay value\n")
            return -1
        if count < -1:
            self.err("Invalid count value\n")
            return -1
        if count == -1 and not self.endless_ok:
            self.err("lst stat: give --count N here: this lst returns its output when done "
                     "(the lst command streams it until interrupted)\n")
            return -1
        if count != -1:
            count += 1  # one more sample: the first has nothing to compare with
        targets: list[tuple[str, int, list[str], list[list[dict[str, Any]]]]] = []
        for name in p.operands:
            got = await self._targets(name)
            if got is None:
                return -1
            targets.append((name, got[0], got[1], [[], []]))
        idx, last, rc = 0, 0, 0
        while True:
            now = self.io.time()
            if now - last < delay:
                await self.io.sleep(delay - now + last)
                now = self.io.time()
            last = now
            for name, n, nids, results in targets:
                rc = await self.ioctl("stat", name=None if nids else name, nids=nids or None,
                                      timeout=timeout)
                if rc == -1:
                    self.print_error("stat", "Failed to stat %s: %s\n", name,
                                     strerror(self.errno))
                    return rc
                results[idx] = list(self.reply.get("ents", []))[:n]
                self._print(name, results, idx, lnet, bwrt, rdwr, stype, mbs)
                results[1 - idx] = []
            idx = 1 - idx
            if count > 0:
                count -= 1
            if count == 0:
                return rc

    def _print(self, name: str, results: list[list[dict[str, Any]]], idx: int, lnet: bool,
               bwrt: int, rdwr: int, stype: int, mbs: bool) -> None:
        """``lst_print_stat`` then ``lst_print_lnet_stat``."""
        res, errcount = _Result(), 0
        new_l, old_l = results[idx], results[1 - idx]
        for i, new in enumerate(new_l):
            if i >= len(old_l):
                if old_l:
                    self.err("Group is changed, re-run stat\n")
                break
            old = old_l[i]
            if new["peer"] != old["peer"]:
                break
            if new["rpc_errno"] or new["fwk_errno"] or old["rpc_errno"] or old["fwk_errno"]:
                errcount += 1
                continue
            a, b = new.get("payload") or {}, old.get("payload") or {}
            if not a or not b:
                errcount += 1
                continue
            delta = f32(f32(float((a["fw_running_ms"] - b["fw_running_ms"]) & _U32)) / 1000)
            if lnet:
                _cal(res, delta, a, b, mbs)
        if errcount:
            self.out(f"Failed to stat on {errcount} nodes\n")
        if not lnet or res.count == 0:
            return
        units = "MB/s  " if mbs else "MiB/s "
        kinds = [k for i, k in enumerate(("rate", "perf")) if not (bwrt == 1 and i == 0)
                 and not (bwrt == 2 and i == 1)]
        dirs = [d for j, d in enumerate(("rcv", "snd")) if not (rdwr == 1 and j == 1)
                and not (rdwr == 2 and j == 0)]
        for kind in kinds:
            self.out(f"[LNet {'Rates' if kind == 'rate' else 'Bandwidth'} of {name}]\n")
            for d in dirs:
                avg, mn, mx, _tot = res.v[kind, d]
                line = f"[{'R' if d == 'rcv' else 'W'}] "
                if kind == "rate":
                    line += (f"Avg: {avg:<8.0f} RPC/s " if stype & 1 else "") + (
                        f"Min: {mn:<8.0f} RPC/s " if stype & 2 else "") + (
                        f"Max: {mx:<8.0f} RPC/s" if stype & 4 else "")
                else:
                    line += (f"Avg: {avg:<8.2f} {units}" if stype & 1 else "") + (
                        f"Min: {mn:<8.2f} {units}" if stype & 2 else "") + (
                        f"Max: {mx:<8.2f} {units}" if stype & 4 else "")
                self.out(line + "\n")

    async def show_error(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("show_error", argv, "s", [Opt("session", False, "s")])
        if p.error or not p.operands:
            return CMD_HELP
        show_rpc = not p.opts
        targets = []
        for name in p.operands:
            got = await self._targets(name)
            if got is None:
                return -1
            targets.append((name, got[0], got[1]))
        for name, n, nids in targets:
            rc = await self.ioctl("stat", name=None if nids else name, nids=nids or None,
                                  timeout=10)
            if rc == -1:
                self.print_error(name, "Failed to show errors of %s: %s\n", name,
                                 strerror(self.errno))
                return rc
            self.out(f"{name}:\n")
            ecount = 0
            for ent in list(self.reply.get("ents", []))[:n]:
                if ent["rpc_errno"]:
                    ecount += 1
                    self.err(f"RPC failure, can't show error on {ent['peer']}\n")
                    continue
                if ent["fwk_errno"]:
                    ecount += 1
                    self.err(f"Framework failure, can't show error on {ent['peer']}\n")
                    continue
                c = ent.get("payload") or {}
                brw, png, errs = c.get("fw_brw_errors", 0), c.get("fw_ping_errors", 0), \
                    c.get("rpc_errors", 0)
                if errs == 0 and brw == 0 and png == 0:
                    continue
                if not show_rpc and brw == 0 and png == 0:
                    continue
                ecount += 1
                self.err(f"{ent['peer']}: [Session {brw} brw errors, {png} ping errors]"
                         + (" " if show_rpc else "\n"))
                if show_rpc:
                    self.err(f"[RPC: {errs} errors, {c.get('rpc_rpcs_dropped', 0)} dropped, "
                             f"{c.get('rpc_rpcs_expired', 0)} expired]\n")
            self.out(f"Total {ecount} error nodes in {name}\n")
        return 0
