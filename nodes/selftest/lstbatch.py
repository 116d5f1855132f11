"""lst's batch and test commands (lnet/utils/lst.c ``jt_lst_add_batch``, ``jt_lst_start_batch``,
``jt_lst_stop_batch``, ``jt_lst_list_batch``, ``jt_lst_query_batch``, ``jt_lst_add_test``),
with lst's parsing and output word for word (see ``lstgroup`` for the conventions).
"""

from __future__ import annotations

from nodes.lnet.hdr import LNET_MTU
from nodes.selftest import bulk
from nodes.selftest.getopt import Opt, atoi, strtol
from nodes.selftest.lstbase import CMD_HELP, LST_NODES_TITLE, LstBase, state2str, strerror
from nodes.selftest.wire import LST_MAX_CONCUR, LST_NAME_SIZE

LST_DEFAULT_BATCH = "batch"
_TEST_NAMES = {1: "brw", 2: "ping"}


class BatchCmds(LstBase):
    """Batch and test commands."""

    async def add_batch(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        if len(argv) != 1:
            return CMD_HELP
        name = argv[0]
        if len(name.encode()) >= LST_NAME_SIZE:
            self.err(f"Name length is limited to {LST_NAME_SIZE - 1}\n")
            return -1
        if await self.ioctl("batch_add", name=name) == 0:
            return 0
        self.print_error("batch", "Failed to create batch: %s\n", strerror(self.errno))
        return -1

    async def _batch_count(self, batch: str) -> bool:
        if await self.node_count("batch", batch) is None:
            self.err(f"Failed to get count of nodes from {batch}: {strerror(self.errno)}\n")
            return False
        return True

    async def run(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("run", argv, "t:", [Opt("timeout", True, "t")])
        if p.error or len(p.operands) > 1:
            return CMD_HELP
        timeout = atoi(p.opts[-1][1] or "") if p.opts else 0
        batch = p.operands[0] if p.operands else LST_DEFAULT_BATCH
        if not await self._batch_count(batch):
            return -1
        rc = await self.ioctl("batch_start", name=batch, timeout=timeout)
        if rc == 0:
            self.out(f"{batch} is running now\n")
        elif rc == -1:
            self.print_error("batch", "Failed to start batch: %s\n", strerror(self.errno))
        else:
            self.print_transerr(self.reply.get("ents", []), "Run batch")
        return rc

    async def stop(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("stop", argv, "f", [Opt("force", False, "f")])
        if p.error or len(p.operands) > 1:
            return CMD_HELP
        batch = p.operands[0] if p.operands else LST_DEFAULT_BATCH
        if not await self._batch_count(batch):
            return -1
        rc = await self.ioctl("batch_stop", name=batch, force=bool(p.opts))
        while rc == 0:
            rc = await self.ioctl("batch_query", name=batch, testidx=0, client=True,
                                  timeout=30)
            if rc != 0:
                break
            if self.trans["fwk"][1] == 0 and self.trans["fwk"][2] == 0:
                self.out("Batch is stopped\n")
                return 0
            self.out(f"{self.trans['fwk'][1]} batch in stopping\n")
            await self.io.sleep(1)
        if rc == -1:
            self.print_error("batch", "Failed to stop batch: %s\n", strerror(self.errno))
            return -1
        self.print_transerr(self.reply.get("ents", []), "stop batch")
        return rc

    async def list_batch(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("list_batch", argv, "ailst:", [
            Opt("test", True, "t"), Opt("invalid", False, "i"), Opt("active", False, "a"),
            Opt("all", False, "l"), Opt("server", False, "s")])
        if p.error:
            return CMD_HELP
        verbose = active = invalid = server = False
        test, ntest = 0, 0
        for val, arg in p.opts:
            if val in "al":
                verbose = active = True
            if val in "il":
                verbose = invalid = True
            if val == "s":
                server = True
            elif val == "t":
                test, ntest = atoi(arg or ""), 1
        if not p.operands:
            return await self._list_names("batch_list", "batch", "batches")
        if ntest == 1 and test <= 0:
            self.err("Invalid test id, test id starts from 1\n")
            return -1
        if len(p.operands) != 1:
            return CMD_HELP
        batch = p.operands[0]
        while True:
            if await self.ioctl("batch_info", name=batch, testidx=test, server=server) != 0:
                what = "test" if test > 0 else "batch"
                self.print_error(what, f"Failed to query {what}: %s\n", strerror(self.errno))
                return -1
            r = self.reply
            if verbose:  # lst_list_tsb_nodes
                shown = 0
                for peer, state in r["nodes"]:
                    if (not active and state == 1) or (not invalid and state in (2, 4, 8)):
                        continue
                    self.out(f"\t{peer}: {state2str(state)}\n")
                    shown += 1
                if r["srv" if server else "cli"]["nnode"]:
                    self.out(f"Total {shown} nodes\n")
                return 0
            if test == 0:
                self.out(f"Batch: {batch} Tests: {r['ntest']} State: {r['state']}\n")
                ntest, test = r["ntest"], 1
            else:
                self.out(f"\tTest {test}({_TEST_NAMES.get(r['type'], 'unknown')}) "
                         f"(loop: {r['loop']}, concurrency: {r['concur']})\n")
                ntest, test = ntest - 1, test + 1
            c, s = r["cli"], r["srv"]
            self.out(LST_NODES_TITLE)
            self.out(f"client\t{c['nactive']}\t{c['nbusy']}\t{c['ndown']}\t{c['nunknown']}\t"
                     f"{c['nnode']}\nserver\t{s['nactive']}\t{s['nbusy']}\t{s['ndown']}\t"
                     f"{s['nunknown']}\t{s['nnode']}\n")
            if ntest == 0:
                return 0

    async def query(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        p = self.getopt("query", argv, "o:d:c:t:saiel", [
            Opt("timeout", True, "o"), Opt("delay", True, "d"), Opt("loop", True, "c"),
            Opt("test", True, "t"), Opt("server", False, "s"), Opt("active", False, "a"),
            Opt("idle", False, "i"), Opt("error", False, "e"), Opt("all", False, "l")])
        if p.error:
            return CMD_HELP
        num = {"o": 5, "d": 5, "c": 1, "t": 0}
        flags: set[str] = set()
        for val, arg in p.opts:
            if val in num:
                num[val] = atoi(arg or "")
            else:
                flags.add(val)
        verbose = bool(flags & set("aiel"))
        server = "s" in flags
        if num["t"] < 0 or num["o"] <= 0 or num["d"] <= 0 or num["c"] <= 0 \
                or len(p.operands) > 1:
            return CMD_HELP
        batch = p.operands[0] if p.operands else LST_DEFAULT_BATCH
        if verbose:
            if await self.ioctl("batch_info", name=batch, testidx=num["t"],
                                server=server) != 0:
                self.err(f"Failed to query {batch} [{num['t']}]: {strerror(self.errno)}\n")
                return -1
            if self.reply["srv" if server else "cli"]["nnode"] == 0:
                self.out("Batch or test is empty\n")
                return 0
        rc, last = 0, 0
        for _ in range(num["c"]):
            now = self.io.time()
            if now - last < num["d"]:
                await self.io.sleep(num["d"] - now + last)
                now = self.io.time()
            last = now
            rc = await self.ioctl("batch_query", name=batch, testidx=num["t"],
                                  client=not server, timeout=num["o"])
            if rc == -1:
                self.err(f"Failed to query batch: {strerror(self.errno)}\n")
                break
            if verbose:
                self._tsb_verbose(flags)
                continue
            self._query_line(batch, num["t"])
        return rc

    def _tsb_verbose(self, flags: set[str]) -> None:
        """``lst_print_tsb_verbose``."""
        for ent in self.reply.get("ents", []):
            running = ent.get("priv", [0])[0]
            if (running == 0 and "a" in flags) or (running and "i" in flags) \
                    or (ent["fwk_errno"] == 0 and "e" in flags):
                continue
            what = strerror(ent["rpc_errno"]) if ent["rpc_errno"] else (
                "Running" if running > 0 else "Idle")
            self.out(f"{ent['peer']} [{state2str(ent['state'])}]: {what}\n")

    def _query_line(self, batch: str, test: int) -> None:
        t = self.trans
        failed, total = t["rpc"][2], t["rpc"][0]
        idle, run, fail = t["fwk"][0], t["fwk"][1], t["fwk"][2]
        line = f"{batch} [{test}] "
        if failed:
            line += f"{failed} of {total} nodes are unknown, "
        if not failed and run == 0 and fail == 0:
            self.out(line + "is stopped\n")
        elif not failed and idle == 0 and fail == 0:
            self.out(line + "is running\n")
        else:
            self.out(line + f"stopped: {idle} , running: {run}, failed: {fail}\n")

    # ------------------------------------------------------------------ add_test
    async def add_test(self, argv: list[str]) -> int:
        if (rc := self.no_session_key()) is not None:
            return rc
        # TEST... operands stop option parsing as lst's do: "brw read" etc. are operands
        p = self.getopt("add_test", argv, "b:c:d:f:l:t:", [
            Opt("batch", True, "b"), Opt("concurrency", True, "c"),
            Opt("distribute", True, "d"), Opt("from", True, "f"), Opt("to", True, "t"),
            Opt("loop", True, "l")])
        if p.error:
            return CMD_HELP
        o = {"b": None, "c": "1", "d": None, "f": None, "t": None, "l": "-1"}
        for val, arg in p.opts:
            o[val] = arg
        if not p.operands or o["f"] is None or o["t"] is None:
            return CMD_HELP
        concur = atoi(o["c"] or "")
        if concur <= 0 or concur > LST_MAX_CONCUR:
            self.err(f"Invalid concurrency of test: {concur}\n")
            return -1
        batch = o["b"] or LST_DEFAULT_BATCH
        dist = span = 1
        if o["d"] is not None:
            parsed = _distribute(o["d"])
            if parsed is None:
                self.err(f"Invalid distribution: {o['d']}\n")
                return -1
            dist, span = parsed
        test, params = p.operands[0], p.operands[1:]
        ttype = {"ping": 2, "brw": 1}.get(test.lower())
        param: dict[str, int] | None = None
        if ttype is None:
            self.err(f"Unknow test name {test}\n")
        elif ttype == 2:
            param = {"size": 0, "flags": 0}
        else:
            param = self._bulk_param(params)
        if ttype is None or param is None:
            self.err(f"Failed to add test ({test})\n")
            return -1
        for grp in (o["f"], o["t"]):
            if await self.node_count("group", grp) is None:
                self.err(f"Can't get count of nodes from {grp}: {strerror(self.errno)}\n")
                return -1
        rc = await self.ioctl("test_add", batch=batch, type=ttype, loop=atoi(o["l"] or ""),
                              concur=concur, dist=dist, span=span, param=param,
                              **{"from": o["f"], "to": o["t"]})
        if rc == 0:
            self.out("Test was added successfully\n")
        elif rc == -1:
            self.print_error("test", "Failed to add test: %s\n", strerror(self.errno))
        else:
            self.print_transerr(self.reply.get("ents", []), "add test")
        return rc

    def _bulk_param(self, args: list[str]) -> dict[str, int] | None:
        """``lst_get_bulk_param``: read/write, size=, check=, off=, skip_rx_copy."""
        prm = {"opc": bulk.LST_BRW_READ, "size": 4096, "flags": bulk.CHECK_NONE,
               "cli_off": 0, "srv_off": 0}
        check_seen = skip_seen = False
        checks = {"full": bulk.CHECK_FULL, "simple": bulk.CHECK_SIMPLE,
                  "discard": bulk.CHECK_DISCARD}
        for a in args:
            low = a.lower()
            if low.startswith(("check=", "c=")):
                tok = a.split("=", 1)[1]
                if tok.lower() not in checks:
                    self.err(f"Unknow flag {tok}\n")
                    return None
                prm["flags"] = checks[tok.lower()]
                if skip_seen and prm["flags"] != bulk.CHECK_DISCARD:
                    self.err(f"check={tok} conflicts with skip_rx_copy\n")
                    return None
                check_seen = True
            elif low.startswith(("size=", "s=")):
                tok = a.split("=", 1)[1]
                size, end = strtol(tok)
                if size <= 0:
                    self.err(f"Invalid size {tok}\n")
                    return None
                size *= {"k": 1024, "m": 1 << 20}.get(end[:1].lower(), 1)
                if size > LNET_MTU:
                    self.err(f"Size exceed limitation: {size} bytes\n")
                    return None
                prm["size"] = size
            elif low.startswith("off="):
                tok = a.split("=", 1)[1]
                off, _end = strtol(tok)
                if off < 0 or off % 8:
                    self.err(f"Invalid offset {tok}/{off}, it should be postive value and "
                             "multiple of 8\n")
                    return None
                prm["cli_off"] = prm["srv_off"] = off
            elif low in ("read", "r"):
                prm["opc"] = bulk.LST_BRW_READ
            elif low in ("write", "w"):
                prm["opc"] = bulk.LST_BRW_WRITE
            elif low in ("skip_rx_copy", "skip-rx-copy"):
                if check_seen and prm["flags"] != bulk.CHECK_DISCARD:
                    self.err("skip_rx_copy conflicts with check=\n")
                    return None
                prm["flags"], skip_seen = bulk.CHECK_DISCARD, True
            else:
                self.err(f"Unknow parameter: {a}\n")
                return None
        return prm


def _distribute(text: str) -> tuple[int, int] | None:
    """``lst_parse_distribute``: ``DIST:SPAN``, both above 0."""
    dist = atoi(text)
    if dist <= 0 or ":" not in text:
        return None
    span = atoi(text.split(":", 1)[1])
    return (dist, span) if span > 0 else None
