"""Benchmark of ``testbed check`` (issue 16 item 4): events checked per second.

Run: ``.venv/bin/python benchmarks/check.py [--events 1000000]`` (no root, ~30 s). It writes a
realistic synthetic log (``testbed/observe/synthlog.py``: a routed Multi-Rail cluster with
message traces, resends, health changes, rail flaps and routes going down and up; it keeps
every invariant) to a temporary JSON-lines file, then times, in the same run:

1. ``reference``: reading the file and ``json.loads`` of every line (the floor any checker of
   a JSON log pays);
2. ``check``: ``testbed.observe.check.check_file`` (read + parse + every invariant);
3. ``bad``: the same log with one message completed twice, which must be flagged.

Target: at least 1M events checked in under 60 s. Prints ``key=value`` lines and the ratio of
``check`` to ``reference``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from testbed.observe.check import check_file  # noqa: E402
from testbed.observe.synthlog import generate  # noqa: E402

TARGET_EVENTS = 1_000_000
TARGET_SECONDS = 60.0


def _write(path: Path, events: list[dict[str, object]]) -> None:
    with open(path, "w") as fh:
        for ev in events:
            fh.write(json.dumps(ev, sort_keys=True) + "\n")


def _reference(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path) as fh:
        for line in fh:
            json.loads(line)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=TARGET_EVENTS)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    events = generate(args.events, seed=args.seed)
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="lnet-check-bench-") as tmp:
        path = Path(tmp) / "events.jsonl"
        _write(path, events)
        size_mb = os.path.getsize(path) / 1e6
        ref_s = _reference(path)
        t0 = time.perf_counter()
        result = check_file(path)
        check_s = time.perf_counter() - t0
        dup = next(e for e in reversed(events) if e.get("event") == "complete")
        _write(path, [*events, dict(dup, t=events[-1]["t"])])
        t0 = time.perf_counter()
        bad = check_file(path)
        bad_s = time.perf_counter() - t0
    n = result.events
    print(f"log events={n} size_mb={size_mb:.1f} generate_s={gen_s:.1f}")
    print(f"reference parse_s={ref_s:.2f} events_per_s={n / ref_s:.0f}")
    print(f"check check_s={check_s:.2f} events_per_s={n / check_s:.0f} ok={result.ok} "
          f"checked={','.join(result.checked)} ratio_to_parse={check_s / ref_s:.2f}")
    print(f"bad check_s={bad_s:.2f} flagged={bad.invariants['completion'].count}")
    projected = check_s * TARGET_EVENTS / n
    print(f"target events={TARGET_EVENTS} seconds<{TARGET_SECONDS:.0f} "
          f"projected_s={projected:.1f} met={projected < TARGET_SECONDS}")
    return 0 if result.ok and bad.invariants["completion"].count == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
