"""``testbed sim --script`` line splitting (issue 27 item 4): ``testbed/shellwords.py`` against
``shlex.split`` (what it replaced) and ``str.split`` (the linear floor), in the same run.

For lines of one long word and of many short quoted words at each size, prints the seconds of
each splitter, ``growth`` (the time at 2x the size over the time at the size: 2 is linear, 4
quadratic) and ``of_floor`` (shellwords' time over ``str.split``'s). shlex runs only up to
``--shlex-max`` characters (it is quadratic: 1.6 MB took 26.5 s). Target: shellwords' growth
<= 3 (quadratic: 4) where it takes 50 ms or more (shorter times are timer and page-fault
noise), and a 2 MiB (ARG_MAX) one-word line in under 1 s. No root; about a minute.

    python benchmarks/script_words.py [--sizes 200000,400000,800000,1600000] [--json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))  # (before benchmarks/, whose faults.py is a script)

from nodes.limits import ARG_MAX  # noqa: E402
from testbed import shellwords  # noqa: E402

SHAPES: dict[str, Callable[[int], str]] = {
    "one word": lambda n: "c1 lnetctl net show " + "x" * n,
    "quoted words": lambda n: "c1 lnetctl " + " ".join(["'a b' \"c\\\"d\" e\\ f"] * (n // 16)),
}


def best_of(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200000,400000,800000,1600000")
    ap.add_argument("--shlex-max", type=int, default=400_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for shape, make in SHAPES.items():
        prev = None
        for n in sizes:
            line = make(n)
            small = make(4000)
            assert shellwords.split(small) == shlex.split(small)
            ours = best_of(lambda line=line: shellwords.split(line))
            floor = best_of(lambda line=line: line.split())
            ref = best_of(lambda line=line: shlex.split(line), 1) if n <= args.shlex_max \
                else None
            rows.append({"shape": shape, "chars": len(line), "shellwords_s": round(ours, 4),
                         "str_split_s": round(floor, 4),
                         "shlex_s": None if ref is None else round(ref, 3),
                         "growth": None if prev is None else round(ours / prev, 2),
                         "of_floor": round(ours / floor, 1) if floor else None})
            prev = ours
    top = "c1 lnetctl net show " + "x" * (ARG_MAX - 20)
    assert len(shellwords.split(top)) == 5
    arg_max_s = best_of(lambda: shellwords.split(top))
    worst = max((r["growth"] for r in rows if r["growth"] is not None
                 and r["shellwords_s"] >= 0.05), default=0.0)  # (shorter: timer noise)
    result = {"rows": rows, "arg_max_line_s": round(arg_max_s, 4), "worst_growth": worst,
              "target_met": worst <= 3.0 and arg_max_s < 1.0}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in rows:
            print(f"{r['shape']:<13} {r['chars']:>10,} chars  shellwords {r['shellwords_s']:.4f} s"
                  f"  growth {r['growth'] or '-':>5}  str.split {r['str_split_s']:.4f} s"
                  f" (x{r['of_floor']})  shlex {r['shlex_s'] if r['shlex_s'] is not None else '-'}")
        print(f"2 MiB line: {arg_max_s:.4f} s; worst growth {worst}; target "
              f"{'met' if result['target_met'] else 'NOT met'}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
