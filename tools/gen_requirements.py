"""Generate docs/requirements.md from the seed documents (run once; the output is committed).

Usage: ``python tools/gen_requirements.py [SEEDS_DIR] > docs/requirements.md``

* Seed 000 (Multi-Rail requirements) carries IDs (cfg-005 ... doc-015) and classes: parsed.
* Seed 003 (LNet Health requirements) has no IDs in its text: its requirement blocks are parsed
  per section, in order, and given the stable IDs listed in ``HEALTH_IDS`` (``hlth-<cat>-...``,
  the categories being the seed's own: cfg, lnd, lnt, stt, dbg, tst, doc). Where the seed lost
  a block's class cell the class is *assumed* and marked so.
* Seed 002 (routing and health) has numbered requirement lists without IDs or classes: they are
  quoted in ``ROUTING`` by hand with IDs ``rtr-...``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CLASSES = ("REQUIRED", "DESIRED", "NICE-TO-HAVE")
ID_LINE = re.compile(r"^\s*([a-z]{3}-\d{3})\s*$")
CLASS_PREFIX = re.compile(r"^(REQUIRED|DESIRED|NICE-TO-HAVE)(\d\.\d)(ACCEPTED|IN-PROGRESS)(.*)$")

#: REQUIRED requirements that an emulator on one box cannot meet or test, and why.
NOT_APPLICABLE = {
    "snd-010": "NUMA distances come from the kernel's NUMA APIs; emulated nodes are processes "
               "with one CPT and NUMA is emulated per NI, there is no kernel NUMA API call",
    "snd-015": "about the Linux kernel version LNet is built against; the emulator is user space",
    "cfg-025": "CPT binding of an NI: every emulated node has a single CPT (docs/differences.md)",
    "bck-005": "about lnetctl binaries of different releases against different kernel modules; "
               "there is one lnetctl and one engine here",
    "tst-005": "the Lustre acceptance test suite needs real Lustre servers and clients",
    "doc-005": "patches against the Lustre Manual are a documentation deliverable",
    "doc-010": "man pages of the real lnetctl are a documentation deliverable",
    "doc-015": "lustre/doc of the real DLC API is a documentation deliverable",
    "hlth-lnd-drain-qp": "o2iblnd queue pairs: there is no o2iblnd in the emulator",
    "hlth-doc-config": "the Lustre manual is a documentation deliverable",
    "hlth-doc-timeouts": "the Lustre manual is a documentation deliverable",
}

#: Seed 003: one ID per requirement block, per section, in the seed's order.
HEALTH_SECTIONS = {
    "Configuration Requirements": "cfg",
    "LNet Driver (LND) Requirements": "lnd",
    "LNet Requirements": "lnt",
    "Statistics Requirements": "stt",
    "Debugging Requirements": "dbg",
    "Testing Requirements": "tst",
    "Documentation Requirements": "doc",
}
HEALTH_IDS = {
    "cfg": ["dlc", "yaml", "retry", "health-range", "sensitivity", "transaction-timeout",
            "reset-health"],
    "lnd": ["existing-failures", "dev-fail-detect", "dev-fail-report", "degrade-detect",
            "degrade-report", "tx-timeout-from-lnet", "drain-qp", "timeout-close",
            "local-timeout", "network-timeout", "remote-timeout", "finalize-status"],
    "lnt": ["local-ni-health", "peer-ni-health", "health-range", "decrement", "increment",
            "select-order", "recovery-queue", "resend-reselect", "non-mr-same-ni",
            "router-any-ni", "no-resend-types", "retry-limit", "resend-stop",
            "default-timeout", "fail-event", "msg-timeout", "lnd-enforces-timeout",
            "retry-zero", "response-timeout", "ulp-timeout", "timeout-after-send", "udev",
            "flapping"],
    "stt": ["local-timeout-resends", "remote-timeout-resends", "network-timeout-resends",
            "ni-down-events", "ni-up-events", "avg-send-time", "avg-transaction-time",
            "reset"],
    "dbg": ["sim-local-timeout", "sim-remote-timeout", "sim-network-timeout", "sim-ni-down",
            "sim-ni-up", "sim-ack-timeout", "sim-reply-timeout"],
    "tst": ["lutf", "lutf-hooks"],
    "doc": ["config", "timeouts"],
}
#: Seed 003 blocks whose class cell is empty in the seed: the class we assume.
HEALTH_ASSUMED_DESIRED = {"hlth-lnd-drain-qp"}

#: Seed 002: (id, class, section, quoted text). The seed gives no classes: the pre-health
#: router/gateway/peer lists are DESIRED (the seed proposes replacing them with health), the
#: Multi-Rail router and route requirements REQUIRED.
ROUTING = [
    ("rtr-router-last-rx", "DESIRED", "Router Requirements",
     "Track the last time stamp any message was received on a local NI"),
    ("rtr-router-ni-down", "DESIRED", "Router Requirements",
     "if the NI hasn't received any traffic for a period of router_ping_timeout + "
     "MAX(live_router_check_interval, dead_router_check_interval) then it's marked down"),
    ("rtr-router-no-send-down", "DESIRED", "Router Requirements",
     "Do not send messages to a peer NI which is marked down."),
    ("rtr-router-peer-up-rx", "DESIRED", "Router Requirements",
     "Set the peer status to up when messages are received"),
    ("rtr-router-query-down", "DESIRED", "Router Requirements",
     "For each peer NI that is marked down, when there are messages to forward to it, query it "
     "at least once per second to check if it is back up. If the query result determines that "
     "the peer NI is reachable, the peer NI state is set to UP. Messages can then be send to "
     "that peer NI."),
    ("rtr-gw-down-on-fail", "DESIRED", "Gateway Requirements",
     "Mark the gateway peer NI as down when the LND fails to send a message"),
    ("rtr-gw-up", "DESIRED", "Gateway Requirements",
     "Mark the gateway peer NI as up when we receive an unsolicited message or when we receive "
     "a REPLY for a PING sent from the router checker."),
    ("rtr-gw-asym", "DESIRED", "Gateway Requirements",
     "Mark the route as down if one of the gateway's interfaces, identified by the gateway peer "
     "NI, are down, provided the avoid_asym_router_failure is set to 1."),
    ("rtr-peer-no-alive-check", "DESIRED", "Peer Requirements",
     "Do not check for peer aliveness when sending a message to a peer."),
    ("rtr-peer-route-up", "DESIRED", "Peer Requirements",
     "Pick a route which has its gateway peer NI marked as up."),
    ("rtr-mr-sensitivity", "REQUIRED", "Multi-Rail Router Requirements",
     "Configure a percentage of the maximum health below which an interface will not be "
     "selected for use. This percentage value will be referred to as "
     "router_sensitivity_percentage"),
    ("rtr-mr-no-unhealthy", "REQUIRED", "Multi-Rail Router Requirements",
     "Do not put message on the wire if the health of a peer_ni is below MAX_HEALTH * "
     "router_sensitivity_percentage"),
    ("rtr-mr-recover-ping", "REQUIRED", "Multi-Rail Router Requirements",
     "Attempt to recover an unhealthy peer_ni once per second by pinging it"),
    ("rtr-mr-lnd-notify", "REQUIRED", "Multi-Rail Router Requirements",
     "LND shall notify LNet whenever it determines a peer_ni is alive or dead. The API will "
     "provide a parameter which will force LNet to fully recover the peer_ni's health."),
    ("rtr-mr-notify-dead", "REQUIRED", "Multi-Rail Router Requirements",
     "LNet shall call an LND API to notify that a peer_ni is dead whenever the peer_ni's health "
     "goes below MAX_HEALTH * router_sensitivity_percentage"),
    ("rtr-route-down", "REQUIRED", "Multi-Rail Route Requirements",
     "A route is considered down if there are no viable peer_nis on the remote net of the "
     "gateway"),
    ("rtr-gw-down", "REQUIRED", "Multi-Rail Route Requirements",
     "A gateway is consider down under two circumstances: All remote nets reported in the "
     "REPLY to the PING are down; All local representation of the peer_nis on the remote net "
     "have a health value below: MAX_HEALTH * rtr_sensitivity_percentage"),
    ("rtr-discover-first-use", "REQUIRED", "Router Discovery",
     "When it's first used - This is the option which will be implemented"),
    ("rtr-select-hops-priority", "REQUIRED", "Route Selection",
     "With Multi-Rail there should be a two evaluation factors in the selection process. "
     "Hops and priority; If multiple NI's exist on the desired network one must be selected "
     "based on the existing selection criteria, health, credits and finally round robin."),
    ("rtr-multi-gw", "REQUIRED", "Router Aliveness and Health",
     "Allow multiple routes to the same remote network over multiple gateways."),
]


def parse_mr(text: str) -> list[dict[str, str]]:
    """Seed 000: ``ID`` line, then ``CLASSv.vSTATUSdescription`` and continuation lines."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == "Configuration Requirements")
    end = next(i for i, ln in enumerate(lines) if ln.startswith("Reviewer Sign-off"))
    headers = {lines[i - 2].strip() for i in range(start, end)
               if lines[i].startswith("IDClassVersionStatusDescription")}
    headers |= {"Functional Requirements", "Configuration Requirements"}
    reqs: list[dict[str, str]] = []
    section = ""
    cur: dict[str, str] | None = None
    body: list[str] = []
    for ln in lines[start:end]:
        s = ln.strip()
        if s in headers:
            section = s if s not in ("Functional Requirements",) else section
            continue
        if s.startswith("IDClassVersionStatusDescription"):
            continue
        m = ID_LINE.match(ln)
        if m:
            if cur is not None:
                cur["text"] = _join(body)
                reqs.append(cur)
            cur, body = {"id": m.group(1), "section": section, "seed": "000"}, []
            continue
        if cur is None:
            continue
        cm = CLASS_PREFIX.match(s)
        if cm and "class" not in cur:
            cur["class"] = cm.group(1)
            body.append(cm.group(4))
        else:
            body.append(ln)
    if cur is not None:
        cur["text"] = _join(body)
        reqs.append(cur)
    return reqs


def parse_health(text: str) -> list[dict[str, str]]:
    """Seed 003: blocks separated by two blank lines, per section, IDs from HEALTH_IDS."""
    lines = text.splitlines()
    out: list[dict[str, str]] = []
    cat = None
    blocks: dict[str, list[list[str]]] = {c: [] for c in HEALTH_IDS}
    blank = 2
    for ln in lines:
        s = ln.strip()
        if s in HEALTH_SECTIONS:
            cat, blank = HEALTH_SECTIONS[s], 2
            continue
        if cat is None:
            continue
        if s.startswith("1. Notes:"):
            break
        if not s:
            blank += 1
            continue
        if blank >= 2:
            blocks[cat].append([])
        blank = 0
        blocks[cat][-1].append(ln)
    for cat, ids in HEALTH_IDS.items():
        if len(blocks[cat]) != len(ids):
            raise SystemExit(f"seed 003 section {cat}: {len(blocks[cat])} blocks, "
                             f"{len(ids)} IDs")
        section = next(k for k, v in HEALTH_SECTIONS.items() if v == cat)
        for slug, block in zip(ids, blocks[cat], strict=True):
            rid = f"hlth-{cat}-{slug}"
            cm = CLASS_PREFIX.match(block[0].strip())
            if cm:
                cls, assumed = cm.group(1), False
                block = [cm.group(4), *block[1:]]
            else:
                cls = "DESIRED" if rid in HEALTH_ASSUMED_DESIRED else "REQUIRED"
                assumed = True
            req = {"id": rid, "class": cls, "section": section, "seed": "003",
                   "text": _join(block)}
            if assumed:
                req["note"] = "class cell empty in the seed: class assumed"
            out.append(req)
    return out


def _join(body: list[str]) -> str:
    text = "\n".join(ln.rstrip() for ln in body).strip("\n")
    return re.sub(r"\n{2,}", "\n", text)


SEEDS = {
    "000": "Multi-Rail scope and requirements (seed 000)",
    "003": "LNet Health requirements (seed 003; IDs defined here, `hlth-<category>-<name>`)",
    "002": "Routing and Health (seed 002; IDs and classes defined here, `rtr-<name>`)",
}


def render(reqs: list[dict[str, str]]) -> str:
    out = [
        "# Requirements",
        "",
        "Generated by `tools/gen_requirements.py` from `../shared/seeds/` (seeds 000, 003, "
        "002), then kept by hand. `testbed.pytest.trace` parses this file: each requirement is a "
        "`### ID` heading, a `- class:` line, a `- section:` line, an optional "
        "`- applies: no — reason` line and the requirement's text quoted with `>`.",
        "Tests name the IDs they prove with `@pytest.mark.requirement(\"snd-030\", ...)`; an "
        "unknown ID is a collection error. `pytest --lnet-trace=PATH` and `testbed trace` list "
        "every requirement with the tests covering it and their last result.",
        "",
        "Classes are the seeds' own (REQUIRED, DESIRED, NICE-TO-HAVE). Seed 003 lost some "
        "class cells (marked *class assumed*); seed 002 has no classes at all (pre-health "
        "router/gateway/peer lists: DESIRED; Multi-Rail router/route: REQUIRED).",
        "",
        "## Requirements that do not apply to an emulator",
        "",
        "Every REQUIRED requirement of seed 000 (and the others) that an emulated LNet on one "
        "box cannot meet or prove. The trace report lists them apart, not as uncovered.",
        "",
        "| ID | class | why |",
        "|---|---|---|",
    ]
    known = {r["id"]: r["class"] for r in reqs}
    for rid, why in NOT_APPLICABLE.items():
        out.append(f"| {rid} | {known[rid]} | {why} |")
    for seed, title in SEEDS.items():
        out += ["", f"## {title}", ""]
        section = None
        for r in (r for r in reqs if r["seed"] == seed):
            if r["section"] != section:
                section = r["section"]
                out += [f"*{section}*", ""]
            out.append(f"### {r['id']}")
            out.append(f"- class: {r['class']}")
            out.append(f"- section: {r['section']}")
            if "note" in r:
                out.append(f"- note: {r['note']}")
            if r["id"] in NOT_APPLICABLE:
                out.append(f"- applies: no — {NOT_APPLICABLE[r['id']]}")
            out.append("")
            out += ["> " + ln if ln.strip() else ">" for ln in r["text"].splitlines()]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    seeds = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2] / "shared/seeds"
    reqs = parse_mr(next(seeds.glob("000_*")).read_text())
    reqs += parse_health(next(seeds.glob("003_*")).read_text())
    reqs += [{"id": i, "class": c, "section": s, "seed": "002", "text": t}
             for i, c, s, t in ROUTING]
    ids = [r["id"] for r in reqs]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"duplicate requirement IDs: {sorted(dup)}")
    if any(r.get("class") not in CLASSES for r in reqs):
        raise SystemExit("a requirement has no class: "
                         f"{[r['id'] for r in reqs if r.get('class') not in CLASSES]}")
    sys.stdout.write(render(reqs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
