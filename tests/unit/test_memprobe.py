"""The daemon's memory probe (``nodes/daemon/memprobe.py``): off unless ``LNET_MEMPROBE``
names a directory; on, it writes the RSS split, glibc's heap and pymalloc's arenas each
period, and with tracemalloc the growing allocation sites."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

import pytest

from nodes.daemon import memprobe


def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(memprobe.ENV, raising=False)

    async def go() -> object:
        return memprobe.start("n1")

    assert asyncio.run(go()) is None


@pytest.mark.parametrize("frames", [0, 2])
def test_writes_what_grows(frames: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memprobe.ENV, str(tmp_path))
    monkeypatch.setenv(f"{memprobe.ENV}_PERIOD", "0.05")
    monkeypatch.setenv(f"{memprobe.ENV}_FRAMES", str(frames))
    hoard: list[bytes] = []

    async def go() -> None:
        task = memprobe.start("n1")
        assert task is not None
        for _ in range(4):
            hoard.append(bytes(200_000))
            await asyncio.sleep(0.04)
        task.cancel()

    try:
        asyncio.run(go())
    finally:
        tracemalloc.stop()
    text = (tmp_path / "n1.memprobe.txt").read_text()
    assert text.startswith("== n1 pid") and "\n== n1 t=" in text
    for part in ("rss kB: RssAnon", "malloc: heap", "pymalloc:"):
        assert part in text
    # pymalloc's figures hide behind tracemalloc's allocator hooks
    assert ("pymalloc: highwater" in text) == (not frames)
    assert ("since baseline" in text and "test_memprobe.py" in text) == bool(frames)
