"""Worker processes for ``testbed explore``: one seed per task, each worker its own hash seed.

Theory of operation (issue 17 item 3): a seed's run must not depend on the process it runs in.
Each worker is a fresh interpreter (``multiprocessing`` spawn) started with its own
``PYTHONHASHSEED``, so ``hash()`` of every str, and with it the iteration order of every set
and dict keyed by strings built on it, differs between workers; a run that depends on such an
order gives a different event log in another worker. ``Pool.submit(task, avoid=w)`` queues a
task on a worker other than ``w`` (the determinism check's second run); ``results()`` yields
``(worker, result)`` as they come. A task is ``run_task``'s argument dict and a result its
JSON-ready return value, so nothing but plain data crosses the pipe. ``workers=0`` runs tasks
in this process (no pool), for one seed or a debugger.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import threading
import traceback
from collections.abc import Iterator
from typing import Any

from testbed.explore import runner, swarm, topo
from testbed.explore.model import Schedule
from testbed.sim import gcpolicy

#: PYTHONHASHSEED of worker ``i`` (0 is "no randomisation"; avoid it)
HASH_SEED_BASE = 1000


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process meanwhile (from the main thread only; elsewhere a
    no-op). A Ctrl-C on a terminal reaches every process of its group: a worker process
    spawned meanwhile inherits the ignored disposition across exec (Python installs its
    KeyboardInterrupt handler only over SIGINT's default), so the caller alone hears it and
    shuts its workers down, without a traceback from each (``driver.explore``). Also held
    while the workers close, so that a second Ctrl-C cannot leave them behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """One seed (or one explicit schedule): draw, run, summarise (plain data)."""
    tp = task_topology(task)
    if task.get("schedule") is not None:
        sch = Schedule.from_dict(task["schedule"])
        sw_lines: list[str] = []
    else:
        sw = swarm.swarm(tp, task["seed"])
        sch = swarm.expand(sw, tp, task["time"])
        sw_lines = sw.render()
    out = runner.run(tp, sch, planted=task.get("planted"), digest=task.get("digest", False),
                     chunk_events=task.get("chunk"))
    v = out.violation
    return {"seed": sch.seed, "run": task.get("run", 0), "ok": out.ok, "swarm": sw_lines,
            "schedule": sch.as_dict(),
            "violation": None if v is None else {
                "phase": v.phase, "invariant": v.invariant, "text": v.text,
                "proof": v.proof, "bound": v.bound, "lines": v.render()},
            "events": out.events, "sends": out.sends, "virtual": out.virtual,
            "wall": out.wall, "digest": out.digest, "chunks": out.chunks,
            "chunk_events": out.chunk_events, "skipped": len(out.skipped),
            "hashseed": os.environ.get("PYTHONHASHSEED", ""), "hashprobe": hash_probe()}


def task_topology(task: dict[str, Any]) -> topo.Topo:
    """The topology a task names, from the text it carries when it does (``topo.shipped``),
    shown under the caller's name."""
    text = task.get("topology_text")
    if text is None:
        return topo.load(task["topology"])
    tp = topo.load(topo.shipped(str(task.get("topology_name") or "topology"), text))
    return dataclasses.replace(tp, shown=str(task["topology"]))


def hash_probe() -> int:
    """The hash of a fixed str in this process: two processes whose probes differ order
    str-keyed sets and dicts differently (what the determinism check must vary)."""
    return hash("lnet-testbed explore")


def describe(exc: BaseException) -> str:
    """One line: the exception and the project's innermost frame it went through (an
    engine crash found by a seed is a finding: where it is matters)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/nodes/" in f.filename or "/testbed/" in f.filename]
    where = ""
    if frames:
        f = frames[-1]
        if isinstance(exc, RecursionError):  # the loop, not where the stack ran out
            count = collections.Counter((x.filename, x.lineno) for x in frames)
            f = next(x for x in frames if (x.filename, x.lineno) == count.most_common(1)[0][0])
        path = f.filename[f.filename.rfind("/nodes/") + 1:] if "/nodes/" in f.filename \
            else f.filename[f.filename.rfind("/testbed/") + 1:]
        where = f" (at {path}:{f.lineno} {f.name})"
    return f"{type(exc).__name__}: {str(exc)[:200]}{where}"


def safe_run_task(task: dict[str, Any]) -> dict[str, Any]:
    """``run_task``, with an exception as an *error* result (``error``: one line, ``ok``
    False): the seed did not run to a verdict, which is neither a pass nor a failure of an
    invariant (``driver.Report`` counts errors apart)."""
    try:
        return run_task(task)
    except Exception as exc:  # reported, never a hung pool nor a traceback
        return {"seed": task.get("seed"), "run": task.get("run", 0), "ok": False,
                "error": describe(exc), "hashseed": os.environ.get("PYTHONHASHSEED", ""),
                "hashprobe": hash_probe()}


def _worker(tasks: Any, results: Any, index: int) -> None:
    gcpolicy.relax()  # a worker only runs seeds: fewer collections (testbed/sim/gcpolicy.py)
    while True:
        task = tasks.get()
        if task is None:
            return
        results.put((index, safe_run_task(task)))


class Pool:
    """``size`` spawned workers, each with its own task queue and hash seed."""

    def __init__(self, size: int) -> None:
        ctx = mp.get_context("spawn")
        self.size = size
        self.results: Any = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(size)]
        self.load = [0] * size
        self.procs = []
        old = os.environ.get("PYTHONHASHSEED")
        try:
            for i in range(size):
                os.environ["PYTHONHASHSEED"] = str(HASH_SEED_BASE + i)
                p = ctx.Process(target=_worker, args=(self.tasks[i], self.results, i),
                                daemon=True, name=f"explore-worker-{i}")
                with sigint_ignored():
                    p.start()
                self.procs.append(p)
        finally:
            if old is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = old
        self.pending = 0

    def submit(self, task: dict[str, Any], avoid: int | None = None) -> int:
        """Queue ``task`` on the least loaded worker other than ``avoid``; its index."""
        choices = [i for i in range(self.size) if i != avoid] or [0]
        w = min(choices, key=lambda i: (self.load[i], i))
        self.load[w] += 1
        self.pending += 1
        self.tasks[w].put(task)
        return w

    def submit_to(self, w: int, task: dict[str, Any]) -> None:
        """Queue ``task`` on worker ``w`` (re-running a seed under the same hash seed)."""
        self.load[w] += 1
        self.pending += 1
        self.tasks[w].put(task)

    def results_iter(self, timeout: float = 3600.0) -> Iterator[tuple[int, dict[str, Any]]]:
        """Results as they come, until nothing is pending."""
        while self.pending:
            try:
                w, res = self.results.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"no result from any worker in {timeout:g} s") from None
            self.pending -= 1
            self.load[w] -= 1
            yield w, res

    def close(self) -> None:
        with sigint_ignored():
            for q in self.tasks:
                q.put(None)
            for p in self.procs:
                p.join(10)
                if p.is_alive():
                    p.terminate()
                    p.join(5)
