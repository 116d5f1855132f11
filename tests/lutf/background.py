"""A shell's ``CMD &`` jobs for the LUTF suites, on both backends: commands started together
on nodes, left running while ``seconds`` pass, then commands in the foreground, then ``wait``.

Theory of operation. On Mininet (any process-backed testbed) each job is a thread running the
node verb; time passes on the wall clock (``tb.advance``). On the in-process simulator a
blocking verb drives the virtual clock itself until its MDs complete
(``SimRuntime.wait_final``), which would run each job to its end before the next starts; so
for the duration the testbed is paced, as the sim server's pacing task makes it
(``testbed/sim/pacer.py``): each job is the node's verb coroutine awaiting its MDs, and this
module steps the fabric, so the jobs overlap in virtual time exactly as the shell's jobs
overlap in real time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

from testbed.base import split_argv

#: a job or foreground command: (node handle, "lnetctl"|"lctl", command line)
Command = tuple[Any, str, str]


def run(tb: Any, jobs: Sequence[Command], seconds: float,
        then: Sequence[Command] = ()) -> tuple[list[Any], list[Any]]:
    """Start ``jobs`` at once, let ``seconds`` pass, run ``then`` one after the other, wait
    for the jobs; returns (the jobs' results, the foreground commands' results)."""
    from testbed.sim import SimTestbed

    if isinstance(tb, SimTestbed):
        with tb.lock:
            return asyncio.run(_sim(tb, jobs, seconds, then))
    with concurrent.futures.ThreadPoolExecutor(max(len(jobs), 1)) as pool:
        futs = [pool.submit(node.verb, verb, split_argv([cmd])) for node, verb, cmd in jobs]
        tb.advance(seconds)
        done = [node.verb(verb, split_argv([cmd])) for node, verb, cmd in then]
        return [f.result() for f in futs], done


async def _sim(tb: Any, jobs: Sequence[Command], seconds: float,
               then: Sequence[Command]) -> tuple[list[Any], list[Any]]:
    fab = tb.fabric
    paced, kick = tb.paced, tb.kick
    tb.paced, tb.kick = True, lambda: None
    try:
        tasks = [asyncio.ensure_future(node.averb(verb, split_argv([cmd])))
                 for node, verb, cmd in jobs]
        await _settle()
        t_end = fab.now + seconds
        while fab.step(t_end):
            await _settle()
        fab.run_until(t_end)
        done = []
        for node, verb, cmd in then:
            done.append(await node.averb(verb, split_argv([cmd])))
            await _settle()
        while not all(t.done() for t in tasks) and fab.step():
            await _settle()
        await _settle()
        return [t.result() for t in tasks], done
    finally:
        tb.paced, tb.kick = paced, kick


async def _settle() -> None:
    """Let every job whose MD completed run on to its next wait."""
    for _ in range(4):
        await asyncio.sleep(0)
