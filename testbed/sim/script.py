"""``testbed sim --script``: the one-shot form of the sim backend, a script of commands.

Theory of operation: ``oneshot`` brings a topology up in this process (``SimTestbed``), runs
the script's lines in order on the virtual clock and exits with the last failing status;
every error is one line naming the script line. A line is split into words in linear time
(``testbed/shellwords.py``) and refused past ``ARG_MAX`` characters, as a shell refuses it.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import yaml

from nodes.limits import ARG_MAX
from testbed import shellwords
from testbed.base import TestbedError
from testbed.sim.inproc import SimTestbed

SCRIPT_HELP = """one command per line ('#' starts a comment):
  NODE lnetctl ARGS...          NODE lctl ARGS...
  NODE put|get DST_NID|NODE [COUNT [SIZE]]
  link NODE IFACE up|down       run SECONDS        events"""
#: Longest ``run`` (virtual seconds), as ``testbed clock advance`` (testbed/sim/server.py).
MAX_RUN = 1e6


def run_script(tb: SimTestbed, lines: Iterable[str], out: TextIO, err: TextIO,
               source: str = "<script>") -> int:
    """Run a ``testbed sim --script`` file; returns the last non-zero status (0 if none).

    Every error is one line naming the script line; output is what the verbs print.
    """
    status = 0
    for lineno, raw in enumerate(lines, 1):
        if len(raw) > ARG_MAX:  # no command a shell could run is longer (issue 27 item 4)
            err.write(f"{source}:{lineno}: line of {len(raw):,} characters, more than "
                      f"{ARG_MAX:,} (ARG_MAX): {os.strerror(errno.E2BIG)}\n")
            status = 1
            continue
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            words = shellwords.split(line)  # (shlex.split: quadratic in a long word)
            status = _script_line(tb, words, out, err) or status
        except (ValueError, TestbedError) as exc:
            err.write(f"{source}:{lineno}: {exc}\n")
            status = 1
    return status


def _script_line(tb: SimTestbed, words: list[str], out: TextIO, err: TextIO) -> int:
    head = words[0]
    if head == "link" and len(words) == 4:
        tb.link(words[1], words[2], words[3])
        out.write(f"{words[1]} {words[2]} {words[3]}\n")
        return 0
    if head == "run" and len(words) == 2:
        tb.run(_number(words[1], "run: SECONDS", float, 0, MAX_RUN))
        return 0
    if head == "events" and len(words) == 1:
        out.writelines(json.dumps(e, sort_keys=True) + "\n" for e in tb.events())
        return 0
    if len(words) >= 2 and words[1] in ("lnetctl", "lctl"):
        res = tb.node(head).verb(words[1], words[2:])
        out.write(res.out)
        err.write(res.err)
        return res.rc
    if len(words) in (3, 4, 5) and words[1] in ("put", "get"):
        dst = words[2] if "@" in words[2] else tb.node(words[2]).nids[0]
        count = _number(words[3], f"{words[1]}: COUNT", int, 1, 1_000_000) \
            if len(words) > 3 else 1
        size = _number(words[4], f"{words[1]}: SIZE", int, 0, 1 << 20) \
            if len(words) > 4 else 4096
        reply = getattr(tb.node(head), words[1])(dst, count=count, size=size)
        if not reply.get("ok"):
            raise TestbedError(str(reply.get("error")))
        out.write(yaml.safe_dump({k: reply[k] for k in ("sent", "completed", "failed",
                                                        "errors")}, sort_keys=False))
        return 0 if not reply["failed"] else 1
    raise TestbedError(f"cannot parse {' '.join(words)!r} (see `testbed sim --help` and the "
                       "README, Backends)")


def _number(word: str, what: str, kind: type[int] | type[float], lo: int, hi: float) -> Any:
    """A script number in lo..hi (``run -5`` was taken without a word: issue 11 item 10)."""
    try:
        value = kind(word)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:  # (NaN fails both comparisons)
        raise TestbedError(f"{what} must be {'an integer' if kind is int else 'a number'} "
                           f"{lo}..{int(hi):,}, not {word!r}")
    return value


def oneshot(topology: str | None, *, name: str | None, seed: int, script: str | None,
            out: TextIO, err: TextIO) -> int:
    """``testbed up --backend sim`` / ``testbed sim``: bring up, run a script, exit.

    A sim testbed lives only in the process that made it, so the CLI runs it one-shot: the
    status lines, then each script line's output; ``-`` reads the script from stdin.
    """
    tb = SimTestbed.up(topology, name=name, seed=seed)
    out.write(f"sim testbed {tb.name} is up (seed {seed}, virtual time {tb.now:g}s)\n")
    for node, info in tb.status()["nodes"].items():
        out.write(f"  {node:<12} " + " ".join(f"{i}={d['nid']}" for i, d in
                                             info["interfaces"].items()) + "\n")
    if script is None:
        return 0
    try:
        if script == "-":
            import sys

            lines = sys.stdin.read().splitlines()
        else:
            lines = Path(script).read_text().splitlines()
    except OSError as exc:
        raise TestbedError(f"cannot read script {script}: {exc.strerror or exc}") from exc
    rc = run_script(tb, lines, out, err, source=script if script != "-" else "<stdin>")
    tb.down()
    return rc
