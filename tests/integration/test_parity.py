"""Backend parity (issue 10): one script of ``testbed`` CLI calls, written for Mininet, run
unchanged on Mininet and on the simulator (``--backend sim``, paced to the wall clock so the
script's sleeps mean the same), gives the same lnetctl YAML apart from the fields in
``VOLATILE``: bring-up, views, a link down, health falling, recovery.

The fields compared are everything lnetctl prints except counters of traffic and times: what
the engine decided (NIs, peers, their states, health values, credits, Multi-Rail, tunables)
must be the same whatever carried the messages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from itkit import PROJECT_ROOT, pytestmark  # noqa: F401  (the marks)

HERE = Path(__file__).resolve().parent

#: What may differ between backends: counters of traffic and of health events, and times;
#: nothing the engine decided (states, statuses, health values, credits, tunables). The
#: script takes its views at steady states (health 0 with a dead rail, 1000 once recovered),
#: but how many recovery pings failed on the way depends on how long each command took.
#: (Credit low-water marks are counters of concurrency: real sockets complete txs later than
#: the fabric.)
VOLATILE = frozenset({
    "statistics", "sent_stats", "received_stats", "dropped_stats", "last alive",
    "min_tx_credits", "min_rtr_credits", "ping_count", "next_ping",
    "dropped", "timeout", "timeouts", "error", "network timeout", "interrupts", "aborted",
    "no route",
})

C1_RAIL0, C1_RAIL1 = "10.10.0.1@tcp", "10.11.0.1@tcp"
S1_RAIL0, S1_RAIL1 = "10.10.0.2@tcp", "10.11.0.2@tcp"
VIEWS = ("net show -v 3", "peer show -v 3", "global show")


def _strip(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def _run_script(backend: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The script; returns every view it took, by label."""
    name = f"par{uuid.uuid4().hex[:6]}"
    seen: dict[str, Any] = {}

    def tb(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([sys.executable, "-m", "testbed.cli", *args], env=env,
                             capture_output=True, text=True, timeout=120)
        assert not check or res.returncode == 0, f"{args}: {res.stdout}{res.stderr}"
        return res

    def views(label: str, node: str = "c1", which: tuple[str, ...] = VIEWS[:2]) -> None:
        for v in which:
            seen[f"{label}: {node} {v}"] = _strip(yaml.safe_load(
                tb("lnetctl", "-n", name, node, *v.split()).stdout))

    def health() -> dict[str, int]:
        """Health of s1's peer NIs and of c1's local NIs, by NID, as c1 sees them."""
        peers = yaml.safe_load(tb("lnetctl", "-n", name, "c1", "peer", "show", "-v", "3")
                               .stdout)["peer"]
        nets = yaml.safe_load(tb("lnetctl", "-n", name, "c1", "net", "show", "-v", "3")
                              .stdout)["net"]
        values = {f"peer {p['nid']}": p["health stats"]["health value"] for peer in peers
                  for p in peer["peer ni"]}
        values |= {f"ni {ni['nid']}": ni["health stats"]["health value"] for net in nets
                   for ni in net["local NI(s)"]}
        return values

    def wait(want: dict[str, int]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = health()
            if all(now.get(k) == v for k, v in want.items()):
                return
            time.sleep(0.5)

    tb("up", *backend, "-n", name, str(HERE / "parity.yaml"))
    try:
        views("up", which=VIEWS)
        views("up", "s1", which=VIEWS)
        tb("lnetctl", "-n", name, "c1", "discover", S1_RAIL0)
        time.sleep(1.0)  # the pushes that follow a discovery are done
        views("discovered")
        # the whole rail goes (both ends): a carrier lost at c1 alone leaves s1 its side of
        # the TCP connection, which refuses c1's reconnects as duplicates (ksocknal_create_conn
        # EALREADY) until s1 finds it dead; the fabric keeps no TCP state across a flap
        tb("link", "-n", name, "c1", "eth1", "down")
        tb("link", "-n", name, "s1", "eth1", "down")
        time.sleep(2.0)  # what was in flight on the rail has failed
        views("link down")
        ping = tb("lnetctl", "-n", name, "c1", "ping", "--source", C1_RAIL1, S1_RAIL1,
                  check=False)
        seen["pinned ping rc"] = ping.returncode
        seen["pinned ping error"] = ping.stderr  # (lnetctl's error YAML: not strict YAML)
        wait({f"peer {S1_RAIL1}": 0, f"ni {C1_RAIL1}": 1000})  # its recovery pings fail too
        views("health fell")
        # s1's end first: while c1's eth1 is down, c1 has no route to lan1 and its rail-1 NI
        # is fatal, so every try fails at once (ENETUNREACH); the other order leaves a window,
        # as long as one command takes, where c1 reaches lan1 and nobody answers (ARP gives up
        # after 3.06 s, the LND's 3 s deadline first: LOCAL_TIMEOUT on c1's rail-0 NI, whose
        # recovery pings to itself add a peer: CI saw it on a loaded box)
        tb("link", "-n", name, "s1", "eth1", "up")
        tb("link", "-n", name, "c1", "eth1", "up")
        # its recovery pings succeed: back to 1000 (every health: none other fell)
        wait({f"peer {S1_RAIL0}": 1000, f"peer {S1_RAIL1}": 1000, f"ni {C1_RAIL1}": 1000,
              f"ni {C1_RAIL0}": 1000})
        views("recovered")
    finally:
        tb("down", "-n", name, check=False)
    return seen


def test_same_cli_script_same_lnetctl_yaml_on_both_backends() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LNET_TESTBED")}
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    with ThreadPoolExecutor(2) as pool:  # the same script on both backends at once
        on_mininet = pool.submit(_run_script, [], env)
        on_sim = pool.submit(_run_script, ["--backend", "sim", "--speed", "1"], env)
        mininet, sim = on_mininet.result(), on_sim.result()
    assert mininet["pinned ping rc"] != 0
    fell = mininet["health fell: c1 peer show -v 3"]["peer"][0]["peer ni"]
    assert {p["nid"]: p["health stats"]["health value"] for p in fell}[S1_RAIL1] == 0
    back = mininet["recovered: c1 peer show -v 3"]["peer"][0]["peer ni"]
    assert {p["nid"]: p["health stats"]["health value"] for p in back}[S1_RAIL1] == 1000
    assert list(sim) == list(mininet)
    for label in mininet:
        assert sim[label] == mininet[label], label
