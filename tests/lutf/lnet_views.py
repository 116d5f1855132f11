"""Helpers of the LUTF suites: pick NIs and peer NIs out of lnetctl's YAML views (spec §9)."""

from __future__ import annotations

from typing import Any

#: NIDs of the default topology (topologies/default.yaml, seed 000 Figure 2).
C1_NIDS = ("10.10.0.1@tcp", "10.11.0.1@tcp")
S1_NIDS = ("10.10.0.2@tcp", "10.11.0.2@tcp")


def local_nis(node: Any, verbose: int = 3) -> dict[str, dict[str, Any]]:
    """nid -> the NI's block of ``lnetctl net show -v VERBOSE`` (all nets, 0@lo excluded)."""
    view = node.yaml(f"net show -v {verbose}")
    return {ni["nid"]: ni for net in view["net"] if net["net type"] != "lo"
            for ni in net["local NI(s)"]}


def peer_nis(node: Any, prim_nid: str | None = None) -> dict[str, dict[str, Any]]:
    """nid -> the peer NI's block of ``lnetctl peer show -v 3`` (one peer if ``prim_nid``)."""
    view = node.yaml("peer show -v 3" + (f" --nid {prim_nid}" if prim_nid else ""))
    return {pni["nid"]: pni for peer in view["peer"] for pni in peer["peer ni"]}


def stats(node: Any) -> dict[str, int]:
    return node.yaml("stats show")["statistics"]


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], int)}


def lnet_error(result: Any) -> dict[str, Any]:
    """The single error entry of lnetctl's error YAML on stderr (``add: - net: {errno,...}``)."""
    import yaml

    doc = yaml.safe_load(result.err)
    (verb_entries,) = doc.values()
    (entry,) = verb_entries
    if "errno" in entry:  # `manage: - ping:` puts errno beside the key
        return entry
    (body,) = entry.values()
    return body


def ok(node: Any, verb: str, cmd: str) -> str:
    """Run ``lnetctl``/``lctl`` ``cmd`` on ``node``; fail the test with its output unless rc 0."""
    res = getattr(node, verb)(cmd)
    assert res.rc == 0, f"{verb} {cmd}: rc {res.rc}: {res.out}{res.err}"
    return str(res.out)


def discover_peers(tb: Any, nodes: tuple[str, ...] = ("c1", "s1")) -> None:
    """Bring every peer of ``nodes`` up to date the real way, ``lnetctl discover``: discovery
    is on (spec §5.3), so the first message to a peer that is not up to date (a static peer
    too) waits for a ping and push round; tests that count messages or health changes call
    this (``reset_nodes`` does) so they see only their own traffic. A peer that cannot be
    reached is left as it is (its discover fails)."""
    import yaml

    for name in nodes:
        node = tb.node(name)
        out = ok(node, "lnetctl", "peer show")
        for peer in (yaml.safe_load(out) or {}).get("peer") or []:
            node.lnetctl(f"discover {peer['primary nid']}")


def reset_nodes(tb: Any, *lnetctl_cmds: str, nodes: tuple[str, ...] = ("c1", "s1")) -> Any:
    """Put a module-scoped testbed back to a known state between tests: no LNet fault rules,
    then ``lnetctl_cmds`` (tunables), every peer up to date (``discover_peers``), every NI
    and peer NI at full health, statistics zeroed."""
    for name in nodes:
        node = tb.node(name)
        ok(node, "lctl", "net_drop_del -a")
        for cmd in lnetctl_cmds:
            ok(node, "lnetctl", cmd)
    discover_peers(tb, nodes)
    for name in nodes:
        node = tb.node(name)
        ok(node, "lnetctl", "net set --all --health 1000")
        ok(node, "lnetctl", "peer set --all --health 1000")
        ok(node, "lnetctl", "stats reset")
    return tb


def advance_until(tb: Any, check: Any, seconds: float = 10.0, what: str = "the condition",
                  step: float = 0.25) -> Any:
    """Poll ``check`` until it is truthy, letting ``step`` seconds pass between polls with
    ``tb.advance`` (wall clock on Mininet, virtual time on the sim, so one test runs on both
    backends); fails with the last value after ``seconds``."""
    waited = 0.0
    while not (value := check()):
        assert waited < seconds, f"waited {seconds}s for {what}; last value {value!r}"
        tb.advance(step)
        waited += step
    return value
