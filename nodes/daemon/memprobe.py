"""What grows inside a node daemon: a diagnostic, off unless ``LNET_MEMPROBE`` is set.

Theory of operation: ``LNET_MEMPROBE=DIR`` in a daemon's environment (the testbed passes its
environment down to every daemon) starts :mod:`tracemalloc` (``LNET_MEMPROBE_FRAMES`` frames,
default 4) and a task that, every ``LNET_MEMPROBE_PERIOD`` seconds (default 60), takes a
snapshot and appends to ``DIR/<node>.memprobe.txt``: the RSS, the biggest allocation sites
grown since the first snapshot and since the previous one, and the live objects by type that
grew since the first snapshot (``gc.get_objects``, an objgraph-style count). The first
snapshot is the baseline, so growth during the warm-up (connections, pools, the bounded
``lctl dk`` ring filling) shows in the early sections and steady growth in the later ones.
tracemalloc roughly halves the daemon's speed: this is for a diagnostic soak, never a
measured one (``benchmarks/soak.py --memprobe``).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

ENV = "LNET_MEMPROBE"
#: allocation sites and object types listed per section
TOP = 25


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _rss_parts() -> str:
    """RSS split: anonymous (heap, arenas: what a leak grows), file-backed (code and
    libraries paged in as new paths run), shared memory; and the private part of each."""
    want = ("RssAnon", "RssFile", "RssShmem")
    parts = [ln.split(":")[0] + " " + ln.split()[1] for ln in
             Path("/proc/self/status").read_text().splitlines() if ln.startswith(want)]
    try:
        roll = Path("/proc/self/smaps_rollup").read_text().splitlines()
        parts += [ln.split(":")[0] + " " + ln.split()[1] for ln in roll
                  if ln.startswith(("Private_Dirty", "Private_Clean", "Shared_Dirty"))]
    except OSError:
        pass
    return "rss kB: " + ", ".join(parts)


def _pymalloc() -> str:
    """pymalloc's arenas (1 MiB each, freed only when empty: fragmentation shows as arena
    bytes far above the live blocks), from ``sys._debugmallocstats`` (which says nothing
    while tracemalloc hooks the allocator)."""
    r, w = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(w, 2)
        os.close(w)
        sys._debugmallocstats()
        os.dup2(saved, 2)
        text = b""
        while chunk := os.read(r, 1 << 16):
            text += chunk
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(r)
    keep = {"# arenas allocated current": "arenas", "# arenas highwater mark": "highwater",
            "# bytes in allocated blocks": "live", "# bytes in available blocks": "free",
            "Total": "arena bytes"}
    out: dict[str, str] = {}
    for ln in text.decode(errors="replace").splitlines():
        name, _, value = ln.partition("=")
        label = keep.get(name.strip())
        if label is not None and label not in out:
            out[label] = value.strip()
    return "pymalloc: " + ", ".join(f"{k} {v}" for k, v in out.items())


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                              "usmblks", "fsmblks", "uordblks", "fordblks",
                                              "keepcost")]


def _malloc() -> str:
    """glibc's heap: bytes in use, free inside the heap (fragmentation or not yet trimmed),
    mmapped; and how many threads (each may get its own malloc arena)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        mi = libc.mallinfo2()
    except (OSError, AttributeError):
        return "malloc: n/a"
    return (f"malloc: heap {mi.arena // 1024} kB, in use {mi.uordblks // 1024} kB, free "
            f"{mi.fordblks // 1024} kB, mmapped {mi.hblkhd // 1024} kB; threads "
            f"{len(os.listdir('/proc/self/task'))}")


def _types() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def _diff(new: tracemalloc.Snapshot, old: tracemalloc.Snapshot, title: str) -> list[str]:
    stats = new.compare_to(old, "traceback")
    lines = [f"-- {title}: top {TOP} allocation sites by growth"]
    for st in stats[:TOP]:
        if st.size_diff <= 0:
            break
        where = " > ".join(f"{Path(f.filename).name}:{f.lineno}" for f in st.traceback)
        lines.append(f"{st.size_diff / 1024:+10.1f} KiB {st.count_diff:+8d} blocks  {where}")
    return lines


async def run(node: str) -> None:
    """Snapshot every period until cancelled (started only when ``LNET_MEMPROBE`` is set)."""
    out = Path(os.environ[ENV]) / f"{node}.memprobe.txt"
    period = float(os.environ.get(f"{ENV}_PERIOD", "60"))
    frames = int(os.environ.get(f"{ENV}_FRAMES", "4"))  # 0: no tracemalloc (RSS unperturbed)
    if frames:
        tracemalloc.start(frames)
    t0 = time.monotonic()
    first = prev = tracemalloc.take_snapshot() if frames else None
    types0 = _types()
    with out.open("a") as f:
        f.write(f"== {node} pid {os.getpid()} baseline: RSS {_rss_kb()} kB\n"
                f"{_rss_parts()}\n{_malloc()}\n{_pymalloc()}\n")
    while True:
        await asyncio.sleep(period)
        types = _types()
        grown = [(n, c - types0.get(n, 0)) for n, c in types.items() if c > types0.get(n, 0)]
        grown.sort(key=lambda t: -t[1])
        lines = [f"== {node} t={time.monotonic() - t0:.0f}s RSS {_rss_kb()} kB, objects "
                 f"{sum(types.values())} ({sum(types.values()) - sum(types0.values()):+d})",
                 _rss_parts(), _malloc(), _pymalloc()]
        if first is not None and prev is not None:
            snap = tracemalloc.take_snapshot()
            lines.append(f"traced {tracemalloc.get_traced_memory()[0] // 1024} kB (peak "
                         f"{tracemalloc.get_traced_memory()[1] // 1024} kB; tracemalloc's "
                         f"own {tracemalloc.get_tracemalloc_memory() // 1024} kB)")
            lines += _diff(snap, first, "since baseline") + _diff(snap, prev, "since last")
            prev = snap
        lines.append("-- object types grown since baseline: "
                     + ", ".join(f"{n} {d:+d}" for n, d in grown[:TOP]))
        if os.environ.get(f"{ENV}_TRIM"):  # how much of it glibc holds free (reclaimable)
            ctypes.CDLL(None).malloc_trim(0)
            lines.append(f"after malloc_trim(0): RSS {_rss_kb()} kB, {_malloc()}")
        with out.open("a") as f:
            f.write("\n".join(lines) + "\n")


def start(node: str) -> asyncio.Task[None] | None:
    """The probe's task when ``LNET_MEMPROBE`` names a directory, else None (the default)."""
    if not os.environ.get(ENV):
        return None
    return asyncio.get_running_loop().create_task(run(node), name="memprobe")
