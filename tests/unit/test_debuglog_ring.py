"""A daemon's ``lctl dk`` lines (``nodes/dlc/debuglog.py``): packed in ``mmap`` chunks, kept in
order, bounded by bytes (the oldest chunk dropped whole), text intact."""

from __future__ import annotations

import logging

from rtdouble import RuntimeDouble

from nodes.dlc import debuglog


def test_ring_keeps_the_newest_lines_in_order_within_its_bytes() -> None:
    ring = debuglog._Ring()
    for i in range(40_000):
        ring.append((float(i), debuglog.D_NET, f"line {i}: caf\u00e9\nsecond part"))
    lines = list(ring)
    assert len(ring.chunks) * debuglog.CHUNK <= debuglog.MAX_BYTES
    assert lines[-1] == (39_999.0, debuglog.D_NET, "line 39999: caf\u00e9\nsecond part")
    firsts = [int(t) for t, _, _ in lines]
    assert firsts == list(range(firsts[0], 40_000)) and firsts[0] > 0  # oldest dropped
    assert len(lines) > 9_000  # ~10,000 lines of ~100 characters
    ring.append((1e9, debuglog.D_ERROR, "x" * (2 * debuglog.CHUNK)))  # longer than a chunk
    assert list(ring)[-1][2] == "x" * (debuglog.CHUNK - debuglog._REC.size)


def test_lctl_dk_prints_the_captured_lnet_lines_once() -> None:
    debuglog.install()
    rt = RuntimeDouble()  # its host keeps no engine log: a daemon's, captured
    debuglog.dump_and_clear(rt)  # what earlier tests logged
    logging.getLogger("lnet").error("resend of %s failed", "10.10.0.2@tcp")
    out = debuglog.dump_and_clear(rt)
    assert out.endswith(":0:(lnet) resend of 10.10.0.2@tcp failed\n"), out
    assert f":{debuglog.D_ERROR:08x}:" in out
    assert debuglog.dump_and_clear(rt) == ""
