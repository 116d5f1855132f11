"""``testbed explore``: many seeds on worker processes, determinism, shrinking, the figures.

Theory of operation (issue 17): ``explore(...)`` hands one task per seed to the worker pool
(``pool.py``; ``workers`` 0 runs them here), prints each seed's swarm and verdict as results
come (``say``), and for every failure the first violated invariant with its events and
``reproduce with: testbed explore TOPOLOGY --seed S``. With ``check_determinism`` each seed
runs twice on two workers whose ``PYTHONHASHSEED`` differ and the event-log hashes are
compared; a mismatch is a failure: both runs of the first differing chunk are fetched again
from the same workers and the first differing event is printed. With ``out_dir`` the first
failing seed of each invariant is shrunk (``shrink.py``) and written out as a pytest file
(``emit.py``). ``Report`` carries every result and the two speed figures the issue asks for:
virtual time per wall second (x real time, per worker) and seeds per hour on this box.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from testbed.explore import cluster, emit, pool, runner, shrink, stream, topo, verdicts
from testbed.explore.model import Schedule
from testbed.plan.source import read_bounded, resolve

Say = Callable[[str], None]
Report = verdicts.Report


def explore(topology: str, seeds: Iterable[int], *, time_s: float = 600.0, workers: int = 2,
            check_determinism: bool = False, planted: str | None = None,
            out_dir: Path | None = None, quiet: bool = False, say: Say = print,
            cluster: str | None = None, progress: bool = False) -> Report:
    """Run ``seeds`` on ``topology`` (see the module doc). ``cluster``: a dask scheduler's
    address, ``local:N`` (a LocalCluster) or ``pool:N`` (local processes without dask);
    None: ``local:WORKERS`` when dask is installed, else ``pool:WORKERS``; ``workers`` 0
    (without ``check_determinism``) runs the seeds in this process. ``progress``: a
    progress bar with the running summary on stderr (a terminal only).

    Raises:
        cluster.ClusterError: the cluster cannot be used (one line).
    """
    seeds = list(seeds)
    file = resolve(topology)
    job = stream.Job(topology, time_s, planted, check_determinism,
                     shipped=(file.stem, read_bounded(file)))
    rep = Report(workers=1)
    t0 = time.perf_counter()
    bar = stream.Progress(len(seeds), say, enabled=progress)
    try:
        if workers <= 0 and not check_determinism and cluster is None:
            for s in seeds:
                res = pool.safe_run_task(job.task(s))
                rep.results[s] = res
                verdicts.show(res, topology, planted, quiet, bar.say)
                bar.update(rep)
            rep.wall = time.perf_counter() - t0
            bar.close()
            verdicts.summary(rep, check_determinism, time_s, say)
            if out_dir is not None and rep.failures:
                _shrink_all(rep, job, out_dir, say)
            return rep
        engine = _engine(cluster, max(workers, 2 if check_determinism else 1), say)
        rep.workers, rep.start = engine.size, time.perf_counter() - t0
        try:
            try:
                stream.Stream(rep, job, engine, quiet, bar).run(seeds)
            except KeyboardInterrupt:  # Ctrl-C: the summary of what finished, no shrinking
                rep.interrupted = len(seeds) - len(rep.results)
            rep.wall = time.perf_counter() - t0
            bar.close()
            verdicts.summary(rep, check_determinism, time_s, say)
            if out_dir is not None and rep.failures and not rep.interrupted:
                _shrink_all(rep, job, out_dir, say, engine)
        finally:
            engine.close()
    finally:
        bar.close()
    return rep


def _engine(spec: str | None, workers: int, say: Say) -> stream.Workers:
    """The worker engine ``spec`` names (``explore``'s ``cluster``)."""
    if spec is None:
        if cluster.available():
            spec = f"{cluster.LOCAL}{workers}"
        else:
            say(f"(dask.distributed is not installed: {workers} local worker processes; "
                "pip install 'lnet-testbed[explore]' for --cluster)")
            spec = f"{cluster.POOL}{workers}"
    if spec.startswith(cluster.POOL):
        return pool.Pool(int(spec[len(cluster.POOL):]))
    return cluster.DaskWorkers(spec)


#: perturbed sim runs a failure must also survive to be shrunk and written (shrink.py)
ROBUST = 2
#: failing seeds per invariant tried for one that survives them
ROBUST_TRIES = 6


def _shrink_all(rep: Report, job: stream.Job, out_dir: Path, say: Say,
                engine: stream.Workers | None = None) -> None:
    """Shrink the first robust failure of each invariant and write its test under
    ``out_dir``: here, or on the cluster (one task per invariant, ``shrink_remote``), the
    written files coming back to be written here."""
    by_inv: dict[str, list[dict[str, Any]]] = {}
    for res in rep.failures:
        v = res.get("violation")
        if v is not None:
            by_inv.setdefault(v["invariant"], []).append(res)
    if isinstance(engine, cluster.DaskWorkers):
        tasks = [{"job": job.task(-1), "cands": cands[:ROBUST_TRIES]}
                 for cands in by_inv.values()]
        for out in engine.call_all(shrink_remote, tasks):
            for line in out["lines"]:
                say(line)
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, text in out["files"].items():
                (out_dir / name).write_text(text)
            for name in out["written"]:
                rep.written.append(out_dir / name)
            for name in sorted(out["files"]):
                say(f"  wrote {out_dir / name} (shrunk on {out['worker']})")
        return
    tp = pool.task_topology(job.task(-1))
    for cands in by_inv.values():
        _shrink_one(tp, cands, job.planted, out_dir, rep, say)


def shrink_remote(task: dict[str, Any]) -> dict[str, Any]:
    """A cluster task: ``_shrink_one`` of one invariant's failures in a scratch directory;
    the lines it said and the files it wrote come back as data."""
    import socket
    import tempfile

    lines: list[str] = []
    job = task["job"]
    with tempfile.TemporaryDirectory(prefix="lnet-explore-shrink-") as d:
        rep = Report()
        _shrink_one(pool.task_topology(job), task["cands"], job.get("planted"), Path(d), rep,
                    lambda line: None if line.startswith("  wrote ") else lines.append(line))
        files = {p.name: p.read_text() for p in Path(d).iterdir() if p.is_file()}
    return {"lines": lines, "files": files, "written": [p.name for p in rep.written],
            "worker": socket.gethostname()}


def _shrink_one(tp: topo.Topo, cands: list[dict[str, Any]], planted: str | None,
                out_dir: Path, rep: Report, say: Say) -> None:
    """Shrink the first failure of one invariant that also fails when its steps and
    messages are moved a little (``shrink.py`` "Robustness"): a test of it replays on
    Mininet's wall clock. With none among the first ``ROBUST_TRIES``, the first failure."""
    def log(line: str) -> None:
        say(f"  {line}")

    chosen, sh = cands[0], None
    for res in cands[:ROBUST_TRIES]:
        v = res["violation"]
        probe = shrink.Shrinker(tp, v["invariant"], v["phase"], planted=planted, log=log,
                                robust=ROBUST)
        if probe.fails(probe.cut(Schedule.from_dict(res["schedule"]), _violation_time(v))):
            chosen, sh = res, probe
            break
        say(f"seed {res['seed']}: {v['invariant']} does not survive {ROBUST} timing "
            "perturbations: not shrunk")
    v = chosen["violation"]
    original = Schedule.from_dict(chosen["schedule"])
    say(f"seed {chosen['seed']}: shrinking ({v['invariant']}, {v['phase']} phase"
        + (f", robust to {ROBUST} timing perturbations)" if sh else
           "; no failure survived timing perturbations: it may replay on Mininet by chance)"))
    if sh is None:
        sh = shrink.Shrinker(tp, v["invariant"], v["phase"], planted=planted, log=log)
    small = sh.shrink(original, _violation_time(v))
    final = runner.run(tp, small, planted=planted).violation
    if final is None or final.invariant != v["invariant"]:
        say("  the shrunk schedule does not fail the same way on a full re-run: "
            "nothing written")
        return
    path = emit.write(out_dir, tp, small, final, original=original, runs=sh.runs,
                      planted=planted, robust=sh.robust)
    rep.written.append(path)
    say(f"  wrote {path}")
    log = runner.run(tp, original, planted=planted, keep_log=True).log
    events = path.with_name(f"{tp.path.stem}-seed{chosen['seed']}.events.jsonl")
    with open(events, "w") as fh:
        for ev in log:
            fh.write(json.dumps(ev, sort_keys=True) + "\n")
    say(f"  wrote {events} (seed {chosen['seed']}'s event log: testbed check --events it)")


def _violation_time(v: dict[str, Any]) -> float | None:
    proof = v.get("proof") or []
    if not proof:
        return None
    last = max(proof, key=lambda item: item[0])[1]
    return float(last["t"]) if isinstance(last.get("t"), int | float) else None
