"""Hostile input at the sim server's socket (hostile-input suite parts b and c; no root).

The sim server (``testbed.sim.server``, a real process serving every node of a simulated
testbed) gets bytes below ZeroMQ on its ``ctl.sock`` and lnetctl argv for its nodes built from
the real command words with hostile values; each answer is the command's output or a one-line
refusal, never a traceback, and afterwards the server answers ``status``, c1 LNet-pings s1,
the server's RSS grew by at most 20 MB and its run directory holds no new files. (Its field
checks are tests/unit/test_ctl_hostile.py's, on branch install.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostilekit import FUZZ, PAIR, RSS_SLACK_KB, files, raw_request, rss_kb, zmtp_garbage
from hypothesis import given
from hypothesis import strategies as st
from test_control_hostile import FIRST, RAW, WORDS

from testbed import runstate


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, int]]:
    from testbed.sim.client import SimClient

    root = tmp_path_factory.mktemp("hostile-sim")
    tb = SimClient.up(PAIR, name=f"hsim{uuid.uuid4().hex[:6]}", root=root, speed="0",
                      record_period=0)
    pid = int(runstate.read_state(tb.rundir)["supervisor_pid"])
    assert tb.node("c1").lnetctl("ping", tb.node("s1").nids[0]).rc == 0
    rss, made = rss_kb(pid), files(tb.rundir)
    yield tb, runstate.ctl_sock(tb.rundir), pid
    assert tb.status()["ok"] is True
    res = tb.node("c1").lnetctl("ping", tb.node("s1").nids[0])
    assert res.rc == 0, res
    grown = rss_kb(pid) - rss
    assert grown <= RSS_SLACK_KB, f"the sim server's RSS grew by {grown} kB"
    new = {f for f in files(tb.rundir) - made if not f.endswith((".log", ".jsonl", ".rec"))}
    assert not new, sorted(new)
    tb.down()
    assert not tb.rundir.exists()


@FUZZ
@given(data=RAW)
def test_bytes_below_zeromq_sim_server(sim: tuple[Any, Path, int], data: bytes) -> None:
    _tb, sock, _pid = sim
    zmtp_garbage(sock, data, wait=0.2)
    assert raw_request(sock, b'{"cmd": "status"}')["ok"] is True


@FUZZ
@given(first=st.sampled_from(FIRST), rest=st.lists(WORDS, max_size=8),
       tool=st.sampled_from(["lnetctl", "lctl"]), node=st.sampled_from(["c1", "s1"]))
def test_sim_argv_fuzz(sim: tuple[Any, Path, int], first: list[str], rest: list[str],
                       tool: str, node: str) -> None:
    _tb, sock, _pid = sim
    argv = [*first, *rest]
    reply = raw_request(sock, json.dumps({"cmd": tool, "node": node, "argv": argv}).encode(),
                        timeout=60.0)
    assert reply is not None, f"{tool} {argv!r}: no reply"
    if reply.get("ok") is False:
        err = reply.get("error", "")
        assert "\n" not in err and "Traceback" not in err, f"{tool} {argv!r}: {err}"[:400]
    else:
        assert isinstance(reply.get("rc"), int), reply
        assert "Traceback" not in reply.get("out", "") + reply.get("err", ""), reply
