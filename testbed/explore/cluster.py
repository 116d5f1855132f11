"""``testbed explore --cluster``: seeds as tasks of a dask.distributed cluster (issue 30 item 3).

Theory of operation: one seed's run (``pool.safe_run_task``: plain data in, plain data out)
is one dask task, ``run_on_worker``; the scheduling, the retries of a task whose worker died
and the data movement are dask's. ``DaskWorkers`` gives the driver the interface of the
local process pool (``pool.Pool``): ``submit(task, avoid=W)`` (a task restricted to workers
other than ``W``: the determinism check's second run, on another worker -- another machine
when there are several), ``submit_to(W, task)``, ``results_iter()`` yielding ``(worker
address, result)`` as tasks finish (``distributed.as_completed``), ``close()``.

``--cluster tcp://HOST:8786`` connects to a running scheduler (docs/explore.md shows how to
start one and its workers); ``--cluster local:N`` starts a ``LocalCluster`` of N worker
processes of one thread each on this machine. dask gives every worker it spawns the same
``PYTHONHASHSEED`` (6640, for its own consistent hashing), which would hide a run that
depends on str hash order; the local cluster's workers each get their own
(``pool.HASH_SEED_BASE + i``), so the determinism check compares runs under different
hashes. A Nanny puts the variable in this process's environment just before it spawns its
worker process; the Nannies start together (dask's ``LocalCluster.scale``), each holding one
lock from setting the variable until its process exists (``HashSeedNanny.instantiate``):
the spawns, a few ms each, take turns, and the workers' start (an interpreter and its
imports, ~2 s) runs in parallel, as the process pool's does. Every result carries
``hashprobe``, the hash of a fixed str in the process that ran it: two runs are known to have
run under different hashes only when it differs.

A seed needs its worker process to itself (the runner sets process environment variables
around each run: ``runner.environment``): a worker with more than one thread is refused
with one line per seed (``dask worker --nthreads 1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from testbed.explore import pool

#: ``--cluster local:N``
LOCAL = "local:"
#: ``--cluster pool:N``: the local process pool (pool.py), without dask
POOL = "pool:"
#: times dask runs a seed again whose worker died before answering (dask's ``retries``)
RETRIES = 1
#: seconds to reach a scheduler and see a worker
CONNECT_TIMEOUT = 30.0
_RELAXED: list[bool] = []
#: dask configuration of the local cluster's workers: no statistical profiler (it samples
#: the running task's stack every 10 ms: a seed is one long task of pure Python), and the
#: worker's periodic checks less often (its event loop's health every 20 ms, its memory
#: every 100 ms, the host's every 500 ms: each wakes the worker's event loop thread, which
#: takes the GIL from the seed's thread; on a loaded box a thread that holds the GIL and
#: loses its core stalls the seed meanwhile); workers elsewhere: the same as environment
#: variables (docs/explore.md)
WORKER_CONFIG: dict[str, object] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "2s"}


class ClusterError(Exception):
    """The cluster cannot be used (dask missing, scheduler unreachable): one line."""


def available() -> bool:
    """Whether dask.distributed is installed (the ``explore`` extra)."""
    try:
        _dd()
    except ImportError:
        return False
    return True


def _dd() -> Any:
    """The ``distributed`` module (untyped: held as Any)."""
    return importlib.import_module("distributed")


def run_on_worker(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The dask task of one seed: ``(this worker's address, the result)``."""
    from testbed.sim import gcpolicy

    worker = _dd().get_worker()
    if worker.state.nthreads != 1:
        return worker.address, {
            "seed": task.get("seed"), "run": task.get("run", 0), "ok": False,
            "error": f"worker {worker.address} runs {worker.state.nthreads} threads: a seed "
                     "needs a worker process to itself (dask worker --nthreads 1)"}
    if not _RELAXED:
        gcpolicy.relax()  # a worker only runs seeds: fewer collections
        _RELAXED.append(True)
    return worker.address, pool.safe_run_task(task)


#: seconds between two looks at whether a Nanny's worker process exists yet
SPAWN_POLL = 0.005


def spawned(nanny: Any) -> bool:
    """Whether ``nanny``'s worker process exists (dask's ``AsyncProcess.pid`` is set once
    ``multiprocessing``'s spawn has run: the child's environment is fixed from then on)."""
    proc = getattr(nanny, "process", None)
    return getattr(getattr(proc, "process", None), "pid", None) is not None


def _nanny_class() -> Any:
    nanny: Any = _dd().Nanny
    locks: dict[int, asyncio.Lock] = {}  # one per event loop (a cluster's)

    class HashSeedNanny(nanny):  # type: ignore[misc]
        """A Nanny whose worker process starts with its own ``PYTHONHASHSEED``."""

        def __init__(self, *args: Any, hash_seed: int, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.pre_spawn_env["PYTHONHASHSEED"] = str(hash_seed)
            self.env["PYTHONHASHSEED"] = str(hash_seed)

        async def instantiate(self) -> Any:
            """dask's ``Nanny.instantiate`` (spawn the worker, wait until it registers),
            the spawn under the lock (module doc); the wait for the worker outside it."""
            lock = locks.setdefault(id(asyncio.get_running_loop()), asyncio.Lock())
            async with lock:
                start = asyncio.ensure_future(super().instantiate())
                while not start.done() and not spawned(self):
                    await asyncio.sleep(SPAWN_POLL)
            return await start

    return HashSeedNanny


def local_cluster(n: int) -> Any:
    """A ``LocalCluster`` of ``n`` one-thread worker processes, worker ``i`` started with
    ``PYTHONHASHSEED`` ``pool.HASH_SEED_BASE + i``, all at once (their spawns take turns:
    ``HashSeedNanny``); returns once every worker is up."""
    nanny = _nanny_class()
    old = os.environ.get("PYTHONHASHSEED")
    quiet = importlib.import_module("dask").config.set(WORKER_CONFIG)
    quiet.__enter__()  # (the Nannies copy the config they start their workers with)
    cluster = _dd().LocalCluster(n_workers=0, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=":0", silence_logs=40)
    try:
        for i in range(n):
            cluster.worker_spec[f"explore-{i}"] = {"cls": nanny, "options": {
                "nthreads": 1, "hash_seed": pool.HASH_SEED_BASE + i,
                # a worker's own log only at CRITICAL: its failures reach the caller as the
                # task's error (an errored seed); at ERROR a worker still closing after a
                # Ctrl-C printed a heartbeat traceback once the scheduler had gone (CI)
                "silence_logs": logging.CRITICAL}}
        with pool.sigint_ignored():  # Ctrl-C is the caller's (pool.sigint_ignored)
            cluster.sync(cluster._correct_state)
    except BaseException:
        cluster.close()
        raise
    finally:
        quiet.__exit__(None, None, None)
        if old is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = old
    return cluster


class DaskWorkers:
    """The driver's worker interface over a dask ``Client`` (module doc)."""

    def __init__(self, spec: str) -> None:
        if not available():
            raise ClusterError("--cluster needs dask.distributed: pip install "
                               "'lnet-testbed[explore]'")
        dd = self._dd = _dd()
        self.cluster: Any = None
        self.client: Any = None
        self.pending = 0
        try:
            if spec.startswith(LOCAL):
                self.cluster = local_cluster(int(spec[len(LOCAL):]))
                self.client = dd.Client(self.cluster, timeout=CONNECT_TIMEOUT)
            else:
                self.client = dd.Client(spec, timeout=CONNECT_TIMEOUT)
                self.client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            self.close()
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ClusterError(f"--cluster {spec}: {why}") from None
        self.size = max(len(self._workers()), 1)
        self._done: Any = dd.as_completed()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._keys = itertools.count()

    def _workers(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])

    def submit(self, task: dict[str, Any], avoid: str | None = None) -> None:
        """Queue ``task`` (on a worker other than ``avoid`` when there is one)."""
        others = [w for w in self._workers() if w != avoid] if avoid else []
        self._submit(task, others or None)

    def submit_to(self, w: str, task: dict[str, Any]) -> None:
        self._submit(task, [w])

    def _submit(self, task: dict[str, Any], workers: list[str] | None) -> None:
        key = f"explore-seed{task.get('seed')}-run{task.get('run', 0)}-{next(self._keys)}"
        fut = self.client.submit(run_on_worker, task, key=key, pure=False, workers=workers,
                                 allow_other_workers=False, retries=RETRIES)
        self._tasks[key] = task
        self._done.add(fut)
        self.pending += 1

    def results_iter(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(worker, result)`` as tasks finish, until none is pending; a task dask gave up
        on (its workers kept dying) is an error result."""
        while self.pending:
            fut = next(self._done)
            self.pending -= 1
            task = self._tasks.pop(str(fut.key))
            try:
                w, res = fut.result()
            except Exception as exc:  # dask's own verdict on the task (KilledWorker, ...)
                w, res = "", {"seed": task.get("seed"), "run": task.get("run", 0),
                              "ok": False, "error": f"dask: {pool.describe(exc)}"}
            fut.release()
            yield w, res

    def call_all(self, fn: Callable[[dict[str, Any]], dict[str, Any]],
                 tasks: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``fn(task)`` of each task on the cluster (a worker to itself), results as they
        finish; one that failed is ``{"lines": [its error], "files": {}, "written": []}``."""
        done = self._dd.as_completed([
            self.client.submit(fn, t, key=f"explore-shrink-{next(self._keys)}", pure=False,
                               retries=RETRIES) for t in tasks])
        for fut in done:
            try:
                out: dict[str, Any] = fut.result()
            except Exception as exc:
                out = {"lines": [f"shrinking failed on the cluster: {pool.describe(exc)}"],
                       "files": {}, "written": [], "worker": ""}
            fut.release()
            yield out

    def close(self) -> None:
        """Cancel what is queued or running, close the client and the local cluster (its
        workers and scheduler): after a Ctrl-C too, quietly (``pool.sigint_ignored``)."""
        with pool.sigint_ignored():
            if self.client is not None and self.pending:
                with contextlib.suppress(Exception):
                    self.client.cancel(list(self._done.futures), force=True)
            if self.cluster is not None:  # the workers first: none outlives the scheduler
                with contextlib.suppress(Exception):
                    self.cluster.scale(0)
                    self.cluster.sync(self.cluster._correct_state)
            for thing in (self.client, self.cluster):
                if thing is not None:
                    with contextlib.suppress(Exception):
                        thing.close()
