"""``testbed check`` on a run over large (IPv6) NIDs (issue 26 item 8: "check ... handle[s]
them"): a sim testbed on topologies/ipv6.yaml (two IPv6-only rails, Multi-Rail over large
NIDs) with traffic passes every message invariant, each actually checked (docs/events.md §2:
completion, resend, fatal_ni, routing; not NOT CHECKED), and the same log with one PUT's
completion removed fails the completion invariant ("every message ends in exactly one
completion", lib-msg.c ``lnet_finalize``) naming that large-NID message."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from test_sim_server import (
    cli,
    env,  # noqa: F401 (a fixture)
)

S1 = "2001:db8:6::2@tcp"


def test_check_of_an_ipv6_run_checks_the_message_invariants_and_finds_a_lost_completion(
        env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    name = f"ipv6b-{uuid.uuid4().hex[:6]}"
    cli("up", "--backend", "sim", "--speed", "0", "-n", name, "ipv6", env=env)
    try:
        out = cli("traffic", "-n", name, "c1", "--to", S1, "--count", "20", env=env).stdout
        assert "put sent 20 completed 20 failed 0" in out
        cli("clock", "-n", name, "advance", "120", env=env)  # past every PUT's deadline
        cli("lnetctl", "-n", name, "c1", "ping", S1, env=env)  # the log goes on there
        res = cli("check", "--strict", "-n", name, env=env, check=False)
        events = Path(env["LNET_TESTBED_RUNROOT"]) / name / "events.jsonl"
        lines = events.read_text().splitlines()
    finally:
        cli("down", "-n", name, env=env)
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "PASS", res.stdout
    for inv in ("completion", "resend", "fatal_ni", "routing"):
        m = re.search(rf"^  ok +{inv} .*\((\d+) checked\)$", res.stdout, re.M)
        assert m and int(m.group(1)) >= 20, res.stdout
    assert "NOT CHECKED completion" not in res.stdout

    cut = next(i for i, ln in enumerate(lines)
               if (e := json.loads(ln)).get("kind") == "msg" and e.get("event") == "complete"
               and e.get("type") == "PUT" and e.get("dst") == S1)
    gone = json.loads(lines[cut])
    log = tmp_path / "cut.jsonl"
    log.write_text("\n".join(lines[:cut] + lines[cut + 1:]) + "\n")
    bad = cli("check", "--events", str(log), env=env, check=False)
    assert bad.returncode == 1, bad.stdout
    assert re.search(r"^  1 VIOLATION +completion", bad.stdout, re.M), bad.stdout
    assert f"message {gone['msg']} of c1 never completed" in bad.stdout, bad.stdout
    assert bad.stdout.splitlines()[-1] == "FAIL"
