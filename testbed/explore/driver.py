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

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from testbed.explore import emit, pool, runner, shrink, topo, verdicts
from testbed.explore.model import Schedule

Say = Callable[[str], None]
Report = verdicts.Report


def _task(topology: str, seed: int, time_s: float, planted: str | None, digest: bool,
          run: int = 0, chunk: int | None = None) -> dict[str, Any]:
    return {"topology": topology, "seed": seed, "time": time_s, "planted": planted,
            "digest": digest, "run": run, "chunk": chunk}


def explore(topology: str, seeds: Iterable[int], *, time_s: float = 600.0, workers: int = 2,
            check_determinism: bool = False, planted: str | None = None,
            out_dir: Path | None = None, quiet: bool = False, say: Say = print) -> Report:
    """Run ``seeds`` on ``topology`` (see the module doc)."""
    seeds = list(seeds)
    rep = Report(workers=max(workers, 1))
    t0 = time.perf_counter()
    if workers <= 0 and not check_determinism:
        for s in seeds:
            res = pool.safe_run_task(_task(topology, s, time_s, planted, False))
            rep.results[s] = res
            verdicts.show(res, topology, planted, quiet, say)
    else:
        _pooled(rep, topology, seeds, time_s, max(workers, 2 if check_determinism else 1),
                check_determinism, planted, quiet, say)
    rep.wall = time.perf_counter() - t0
    verdicts.summary(rep, check_determinism, time_s, say)
    if out_dir is not None and rep.failures:
        _shrink_all(rep, topology, planted, out_dir, say)
    return rep


def _pooled(rep: Report, topology: str, seeds: list[int], time_s: float, size: int,
            det: bool, planted: str | None, quiet: bool, say: Say) -> None:
    workers = pool.Pool(size)
    rep.workers = size
    first: dict[int, tuple[int, dict[str, Any]]] = {}
    todo = list(reversed(seeds))
    try:
        def feed() -> None:
            while todo and workers.pending < 2 * size:
                s = todo.pop()
                w = workers.submit(_task(topology, s, time_s, planted, det))
                if det:
                    workers.submit(_task(topology, s, time_s, planted, True, run=1), avoid=w)
        feed()
        for w, res in workers.results_iter():
            s = res["seed"]
            if det and s not in rep.results and s not in first:
                first[s] = (w, res)
            elif det and s in first:
                _pair(rep, topology, time_s, planted, workers, first.pop(s), (w, res), quiet,
                      say)
            else:
                rep.results[s] = res
                verdicts.show(res, topology, planted, quiet, say)
            feed()
    finally:
        workers.close()


def _pair(rep: Report, topology: str, time_s: float, planted: str | None, workers: pool.Pool,
          a: tuple[int, dict[str, Any]], b: tuple[int, dict[str, Any]], quiet: bool,
          say: Say) -> None:
    """Both runs of a seed are in: its result is the first run's, or the run that errored
    (no verdict); only two runs that both ran to the end are compared."""
    a, b = sorted((a, b), key=lambda wr: int(wr[1].get("run", 0)))
    bad = [r for _w, r in (a, b) if r.get("error")]
    s = a[1]["seed"]
    rep.results[s] = bad[0] if bad else a[1]
    verdicts.show(rep.results[s], topology, planted, quiet, say)
    if len(bad) == 1:
        say(f"seed {s}: run {bad[0].get('run', 0)} errored, the other ran to the end: not "
            "compared")
    if not bad:
        rep.compared.add(s)
        _compare(rep, topology, time_s, planted, workers, a, b, say)


def _compare(rep: Report, topology: str, time_s: float, planted: str | None,
             workers: pool.Pool, a: tuple[int, dict[str, Any]], b: tuple[int, dict[str, Any]],
             say: Say) -> None:
    (wa, ra), (wb, rb) = a, b
    if ra.get("digest") == rb.get("digest") and ra.get("digest"):
        return
    s = ra["seed"]
    ca, cb = ra.get("chunks") or [], rb.get("chunks") or []
    k = next((i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y),
             min(len(ca), len(cb)))
    workers.submit_to(wa, _task(topology, s, time_s, planted, True, run=2, chunk=k))
    workers.submit_to(wb, _task(topology, s, time_s, planted, True, run=3, chunk=k))
    again = {res["run"]: res for _w, res in workers.results_iter()}
    evs = [again.get(2, {}).get("chunk_events") or [], again.get(3, {}).get("chunk_events") or []]
    i = next((j for j, (x, y) in enumerate(zip(*evs, strict=False)) if x != y),
             min(len(evs[0]), len(evs[1])))
    mm = {"seed": s, "hashseeds": [ra.get("hashseed"), rb.get("hashseed")],
          "digests": [ra.get("digest"), rb.get("digest")], "events": [ra.get("events"),
                                                                     rb.get("events")],
          "index": k * runner.CHUNK + i,
          "first": [e[i] if i < len(e) else None for e in evs]}
    rep.mismatches.append(mm)
    verdicts.mismatch(mm, say)


#: perturbed sim runs a failure must also survive to be shrunk and written (shrink.py)
ROBUST = 2
#: failing seeds per invariant tried for one that survives them
ROBUST_TRIES = 6


def _shrink_all(rep: Report, topology: str, planted: str | None, out_dir: Path,
                say: Say) -> None:
    tp = topo.load(topology)
    by_inv: dict[str, list[dict[str, Any]]] = {}
    for res in rep.failures:
        v = res.get("violation")
        if v is not None:
            by_inv.setdefault(v["invariant"], []).append(res)
    for cands in by_inv.values():
        _shrink_one(tp, cands, planted, out_dir, rep, say)


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


def _violation_time(v: dict[str, Any]) -> float | None:
    proof = v.get("proof") or []
    if not proof:
        return None
    last = max(proof, key=lambda item: item[0])[1]
    return float(last["t"]) if isinstance(last.get("t"), int | float) else None
