"""``up``'s progress lines stay short on a 10,000-node topology (issue 27 item 12: the
"configuring NIs" line named every node, 59 KB)."""

from __future__ import annotations

from pathlib import Path

from nodes.echo import MAX_LISTED_NAMES, listed
from testbed import bringup
from testbed.plan import parse_topology
from testbed.sh import Completed


def test_a_10000_node_bring_up_prints_short_progress_lines(tmp_path: Path) -> None:
    plan = parse_topology("networks: {lan0: {lnet: tcp, subnet: 10.0.0.0/16}}\nnodes:\n"
                          + "".join(f"  n{i}: {{interfaces: [lan0]}}\n" for i in range(10_000)),
                          backend="sim")
    lines: list[str] = []
    bringup.configure(plan, lambda node, step: Completed(0, "", ""), tmp_path,
                      progress=lines.append)
    assert lines[0] == "configuring NIs: n0 n1 n2 n3 n4 n5 n6 n7 ... and 9,992 more"
    assert max(map(len, lines)) < 200


def test_listed_names() -> None:
    assert listed(["a", "b"]) == "a b"
    assert listed(f"n{i}" for i in range(MAX_LISTED_NAMES)) == " ".join(
        f"n{i}" for i in range(MAX_LISTED_NAMES))
    assert listed(["x" * 500, "b", "c"], limit=2) == (f"{'x' * 80}... (500 characters) b "
                                                      "... and 1 more")
