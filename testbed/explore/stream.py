"""Seeds through workers, results as they finish: ``testbed explore``'s main loop.

Theory of operation (issues 17, 30): ``Stream.run(seeds)`` keeps at most twice as many tasks
queued as there are workers (``feed``) and takes results in the order they finish, from any
engine with the worker interface (``pool.Pool``, local processes; ``cluster.DaskWorkers``, a
dask.distributed cluster). Without the determinism check a result is the seed's. With it, a
seed's first run that finished is followed by its second, submitted to any worker *but* the
one that ran the first (another process, with another ``PYTHONHASHSEED``; on a cluster
possibly another machine); a seed whose first run errored is not run again. When both runs
ran to the end their event-log hashes are compared; if they differ, the first differing
chunk is fetched again from each of the two workers (runs 2 and 3, in the same stream: other
seeds' results keep coming meanwhile) and the first differing event is printed. Each seed's
verdict is printed as it is known and a progress bar (tqdm, on a terminal) shows the running
summary.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from testbed.explore import runner, verdicts

Say = Callable[[str], None]


class Workers(Protocol):
    """What the loop needs of a worker engine (``pool.Pool``, ``cluster.DaskWorkers``)."""

    size: int
    pending: int

    def submit(self, task: dict[str, Any], avoid: Any = None) -> Any: ...

    def submit_to(self, w: Any, task: dict[str, Any]) -> None: ...

    def results_iter(self) -> Iterator[tuple[Any, dict[str, Any]]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Job:
    """What every seed of one exploration shares."""

    topology: str
    time_s: float
    planted: str | None
    det: bool
    #: the topology file's stem and text, carried by every task (``topo.shipped``)
    shipped: tuple[str, str] | None = None

    def task(self, seed: int, *, run: int = 0, chunk: int | None = None) -> dict[str, Any]:
        out = {"topology": self.topology, "seed": seed, "time": self.time_s,
               "planted": self.planted, "digest": self.det, "run": run, "chunk": chunk}
        if self.shipped is not None:
            out["topology_name"], out["topology_text"] = self.shipped
        return out


@dataclass
class Again:
    """A seed whose two runs' hashes differ: its first differing chunk asked again of both
    workers (runs 2 and 3)."""

    a: dict[str, Any]
    b: dict[str, Any]
    chunk: int
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)


class Progress:
    """A tqdm bar on stderr with the running summary (off when tqdm is missing or stderr
    is not a terminal); ``say`` prints above it."""

    def __init__(self, total: int, say: Say, enabled: bool = True) -> None:
        self._say = say
        self.bar: Any = None
        if enabled:
            with contextlib.suppress(ImportError):
                from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

                self.bar = tqdm(total=total, unit="seed", disable=None, mininterval=0.5,
                                desc="explore")

    def say(self, line: str) -> None:
        if self.bar is None:
            self._say(line)
            return
        with self.bar.external_write_mode():
            self._say(line)

    def update(self, rep: verdicts.Report) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(f"ok {len(rep.results) - len(rep.failures) - len(rep.errors)}"
                                     f" failed {len(rep.failures)} errored {len(rep.errors)}"
                                     f" mismatches {len(rep.mismatches)}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Stream:
    """One exploration's loop over ``workers`` (module doc)."""

    def __init__(self, rep: verdicts.Report, job: Job, workers: Workers, quiet: bool,
                 progress: Progress) -> None:
        self.rep, self.job, self.workers, self.quiet = rep, job, workers, quiet
        self.progress = progress
        self.first: dict[int, tuple[Any, dict[str, Any]]] = {}
        self.again: dict[int, Again] = {}

    def run(self, seeds: Iterable[int]) -> None:
        todo = collections.deque(seeds)
        size = max(self.workers.size, 1)

        def feed() -> None:
            while todo and self.workers.pending < 2 * size:
                self.workers.submit(self.job.task(todo.popleft()))

        feed()
        for w, res in self.workers.results_iter():
            self.on_result(w, res)
            feed()

    def on_result(self, w: Any, res: dict[str, Any]) -> None:
        s, run = res.get("seed"), int(res.get("run", 0))
        assert isinstance(s, int)
        if run >= 2:
            self._chunk_again(s, run, res)
        elif not self.job.det or (run == 0 and res.get("error")):
            self._verdict(res)
        elif run == 0:
            self.first[s] = (w, res)
            self.workers.submit(self.job.task(s, run=1), avoid=w)
        else:
            self._pair(self.first.pop(s), (w, res))

    def _verdict(self, res: dict[str, Any]) -> None:
        self.rep.results[res["seed"]] = res
        verdicts.show(res, self.job.topology, self.job.planted, self.quiet, self.progress.say)
        self.progress.update(self.rep)

    def _pair(self, a: tuple[Any, dict[str, Any]], b: tuple[Any, dict[str, Any]]) -> None:
        """Both runs of a seed are in: its result is the first run's, or the run that
        errored (no verdict); only two runs that both ran to the end are compared."""
        (wa, ra), (wb, rb) = a, b
        s = ra["seed"]
        if rb.get("error"):
            self._verdict(rb)
            self.progress.say(f"seed {s}: run 1 errored, the other ran to the end: not "
                              "compared")
            return
        self.rep.compared.add(s)
        if ra.get("hashprobe") != rb.get("hashprobe"):
            self.rep.hash_varied += 1
        self._verdict(ra)
        if ra.get("digest") and ra.get("digest") == rb.get("digest"):
            return
        ca, cb = ra.get("chunks") or [], rb.get("chunks") or []
        k = next((i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y),
                 min(len(ca), len(cb)))
        self.again[s] = Again(ra, rb, k)
        self.workers.submit_to(wa, self.job.task(s, run=2, chunk=k))
        self.workers.submit_to(wb, self.job.task(s, run=3, chunk=k))

    def _chunk_again(self, s: int, run: int, res: dict[str, Any]) -> None:
        pend = self.again[s]
        pend.runs[run] = res
        if len(pend.runs) < 2:
            return
        del self.again[s]
        ra, rb, k = pend.a, pend.b, pend.chunk
        evs = [pend.runs[2].get("chunk_events") or [], pend.runs[3].get("chunk_events") or []]
        i = next((j for j, (x, y) in enumerate(zip(*evs, strict=False)) if x != y),
                 min(len(evs[0]), len(evs[1])))
        mm = {"seed": s, "hashseeds": [ra.get("hashseed"), rb.get("hashseed")],
              "digests": [ra.get("digest"), rb.get("digest")],
              "events": [ra.get("events"), rb.get("events")],
              "index": k * runner.CHUNK + i,
              "first": [e[i] if i < len(e) else None for e in evs]}
        self.rep.mismatches.append(mm)
        verdicts.mismatch(mm, self.progress.say)
