"""Where ``testbed ui`` draws each node, NI and segment: a fixed layout computed here.

Theory of operation: a force-directed layout in the page costs O(n²) per iteration and moves
every time the page loads; a testbed's shape is known, so the server places it once, the same
way every time. Segments sit on one horizontal line, in the order of the topology. Nodes
attached to the same set of segments form a group, drawn as a grid block centred over the
middle of those segments, above or below the line, on the side where the blocks already
placed across its width reach least far out (a block never overlaps another). A node's NIs
sit in a row on the side facing the segments, so each NI's edge to its segment is short.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SEG_GAP = 240.0  # between segments on the line
ROW = 160.0  # from the line to the first block, and between stacked blocks
CELL = 70.0  # between nodes of a block
NI_GAP = 16.0  # between a node's NIs
NI_DROP = 26.0  # from a node to its NIs


def place(nodes: Mapping[str, Any], segments: Mapping[str, Any],
          nis: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Positions by id: ``NODE``, ``seg:SEGMENT``, ``ni:NODE:IFACE``."""
    seg_x = {s: i * SEG_GAP for i, s in enumerate(segments)}
    out = {f"seg:{s}": {"x": x, "y": 0.0} for s, x in seg_x.items()}
    node_nis: dict[str, list[Mapping[str, Any]]] = {n: [] for n in nodes}
    for ni in nis.values():
        node_nis.setdefault(ni["node"], []).append(ni)
    groups: dict[tuple[str, ...], list[str]] = {}
    for node in nodes:
        segs = tuple(sorted({str(ni["segment"]) for ni in node_nis[node]
                             if ni["segment"] in seg_x}))
        groups.setdefault(segs, []).append(node)
    placed: list[tuple[float, float, float, float]] = []  # side, x1, x2, depth reached
    for segs, members in sorted(groups.items(), key=lambda g: _centre(g[0], seg_x)):
        cx = _centre(segs, seg_x)
        cols = max(1, math.ceil(math.sqrt(len(members))))
        rows = math.ceil(len(members) / cols)
        x1, x2 = cx - cols * CELL / 2, cx + cols * CELL / 2

        def reached(side: float, x1: float = x1, x2: float = x2) -> float:
            return max((d for s, a, b, d in placed if s == side and a < x2 and x1 < b),
                       default=0.0)

        side = -1.0 if reached(-1.0) <= reached(1.0) else 1.0
        start = ROW + reached(side)
        for i, node in enumerate(members):
            r, c = divmod(i, cols)
            x = cx + (c - (cols - 1) / 2) * CELL
            y = side * (start + r * CELL)
            out[node] = {"x": x, "y": y}
            mine = node_nis[node]
            for k, ni in enumerate(mine):
                out[f"ni:{ni['id']}"] = {"x": x + (k - (len(mine) - 1) / 2) * NI_GAP,
                                         "y": y - side * NI_DROP}
        placed.append((side, x1, x2, start - ROW + rows * CELL + ROW / 2))
    return out


def _centre(segs: tuple[str, ...], seg_x: Mapping[str, float]) -> float:
    """Middle of a group's segments (a node on no known segment: left of the line)."""
    return sum(seg_x[s] for s in segs) / len(segs) if segs else -SEG_GAP
