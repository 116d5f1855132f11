"""The observation subcommands of ``testbed``: ``events``, ``check``, ``capture`` and
``report``, registered on the main parser by ``register(subparsers)``.

Every error is a one-line ``TestbedError`` (``testbed/cli.py`` prints it, exit 1). These
commands read a run directory, not a live supervisor, so they also work on a run directory
kept after ``down``: ``-n NAME`` picks ``RUNROOT/NAME``, or ``--rundir DIR`` any directory;
with neither, the only run directory under RUNROOT. On a live testbed ``check`` and
``report`` first ask its writers to write what they buffer (``eventlog.flush_writers``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

from nodes.echo import shown, shown_path
from testbed import runstate
from testbed.base import TestbedError
from testbed.commands.common import name_arg, pick
from testbed.observe import check, eventlog, events_cmd


def resolve_rundir(name: str | None, rundir: str | None = None) -> Path:
    """The run directory to read: ``--rundir``, ``-n NAME``, or the only one there is."""
    if rundir:
        path = Path(rundir)
        if not path.is_dir():
            raise TestbedError(f"no run directory {path}")
        return path
    if name is None:
        names = runstate.list_testbeds()
        if not names:
            raise TestbedError(f"no testbed run directory under {runstate.runroot()} "
                               "(start one with `testbed up`, or give --rundir)")
        if len(names) > 1:
            raise TestbedError(f"several testbeds ({', '.join(names)}): choose one with "
                               "-n NAME")
        name = names[0]
    path = runstate.rundir(name)
    if not path.is_dir():
        raise TestbedError(f"no testbed named {name} (no {path})")
    return path


def cmd_events(args: argparse.Namespace) -> int:
    rdir = resolve_rundir(args.name, args.rundir)
    path = events_cmd.events_path(rdir)
    if not path.exists():
        raise TestbedError(f"testbed {rdir.name} has no event log ({path})")
    kinds = events_cmd.parse_set(args.kind)
    odd = events_cmd.unknown_kinds(kinds, path)
    if odd:
        close = difflib.get_close_matches(odd[0], eventlog.KNOWN_KINDS, n=1)
        raise TestbedError(f"events --kind: unknown kind {odd[0]!r}"
                           + (f" (did you mean {close[0]!r}?)" if close else "")
                           + f"; known kinds: {', '.join(sorted(eventlog.KNOWN_KINDS))}")
    try:
        events_cmd.show(path, sys.stdout, nodes=events_cmd.parse_set(args.node),
                        kinds=kinds, since=args.since,
                        raw=args.json, follow=args.follow, alive=rdir.exists)
    except FileNotFoundError:
        raise TestbedError(f"testbed {rdir.name} has no event log ({path})") from None
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``testbed check [RUNDIR | --events FILE | -n NAME | --rundir DIR]``: a run directory
    (live, kept after ``down``, or copied elsewhere) is checked over its events.jsonl merged
    with its nodes' message traces; ``--events FILE`` checks that one file as it is."""
    if args.path and (args.events or args.rundir or args.name):
        raise TestbedError("check: give a RUNDIR, or one of --events, --rundir, -n, not both")
    events = args.events
    if args.path and not Path(args.path).is_dir():
        if not Path(args.path).exists():
            raise TestbedError(f"check: no run directory or event log {args.path}")
        events = args.path
    try:
        if events:
            result = check.check_file(events)
            _traces_beside(Path(events))
        else:
            rdir = Path(args.path) if args.path else resolve_rundir(args.name, args.rundir)
            eventlog.flush_writers(rdir)  # a live testbed: what the writers buffer, too
            result = check.check_rundir(rdir)
    except eventlog.LogError as exc:
        raise TestbedError(str(exc)) from None
    sys.stdout.write(result.render(max_violations=args.max))
    return 0 if result.ok and not (args.strict and result.untraced) else 1


def _traces_beside(events: Path) -> None:
    """One line on stderr when a run directory's events.jsonl was given alone while its
    nodes' message traces lie beside it (the message invariants need them)."""
    traces = sorted((events.parent / runstate.NODES_DIR).glob(eventlog.TRACE_GLOB))
    if events.name == runstate.EVENTS_FILE and traces:
        print(f"check: {len(traces)} node message trace(s) in {events.parent / runstate.NODES_DIR}"
              f" not read: `testbed check {events.parent}` merges them", file=sys.stderr)


def cmd_capture(args: argparse.Namespace) -> int:
    from testbed.observe import capture  # (scapy and subprocess plumbing: loaded on use)

    if args.summary:
        return _summary(args)
    if not args.node:
        raise TestbedError("capture: give NODE [IFACE] (or --summary FILE)")
    if args.output:  # before anything runs: dumpcap's own refusal came as a traceback
        _writable(Path(args.output))
    tb = pick(args.name)
    name = tb.name
    node = tb.node(args.node)
    if getattr(node, "host_pid", None) is None:  # the simulator: no namespace, no packets
        raise TestbedError(f"capture: testbed {name} has no network namespaces (sim backend); "
                           "capture needs the mininet backend (`testbed events` shows the "
                           "sim's messages)")
    ifaces = [*tb.status()["nodes"][args.node]["interfaces"], "any", "lo"]
    iface = args.iface or "any"
    if iface not in ifaces:
        raise TestbedError(f"node {args.node} has no interface {shown(iface)} "
                           f"(choose one of: {', '.join(ifaces)})")
    out = Path(args.output or f"{name}-{args.node}-{iface}.pcapng").resolve()
    _writable(out)
    try:
        proc = capture.start(node.host_pid, iface, out, args.seconds, args.filter)
    except capture.CaptureFailed as exc:
        raise TestbedError(f"capture: {exc}") from None
    try:
        capture.wait_ready(out, proc)
        until = f"for {args.seconds:g} s" if args.seconds else "until Ctrl-C"
        print(f"capturing on {args.node} {iface} into {out} {until}", file=sys.stderr)
        proc.wait()
    except KeyboardInterrupt:
        pass
    except capture.CaptureFailed as exc:  # (stopped below, as every capture)
        raise TestbedError(f"capture: {exc}") from None
    finally:
        err = capture.stop(proc)
    if not out.exists():
        raise TestbedError(f"capture failed: {' '.join(err.split())[:300]}")
    print(f"wrote {out}")
    return 0


def _writable(out: Path) -> None:
    """Refuse, in one line, an output file dumpcap could not create (issue 27 item 3: a
    missing directory was dumpcap's failure, raised past the CLI as a traceback)."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise TestbedError(f"capture: cannot write {shown_path(out)}: no directory "
                           f"{shown_path(parent)}")
    if out.is_dir():
        raise TestbedError(f"capture: cannot write {shown_path(out)}: it is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TestbedError(f"capture: cannot write {shown_path(out)}: directory "
                           f"{shown_path(parent)} is not writable")


def _summary(args: argparse.Namespace) -> int:
    from testbed.observe import capture, pcapsum  # (scapy is slow to import: only here)

    try:
        summary = pcapsum.summarize(args.summary)
        view = capture.tshark_check(Path(args.summary)) if args.tshark else None
    except (pcapsum.CaptureError, capture.CaptureFailed) as exc:
        raise TestbedError(str(exc)) from None
    if args.json:
        data = summary.as_dict()
        if view is not None:
            data["tshark"] = {"lnet_frames": view.lnet_frames, "malformed": view.malformed}
        print(json.dumps(data, indent=1, sort_keys=True))
        return 0
    sys.stdout.write(summary.render())
    if view is not None:
        print(f"tshark (portals 0, 50-52 as data): {view.lnet_frames} LNet frames, "
              f"{len(view.malformed)} malformed")
        for m in view.malformed[:20]:
            print(f"  frame {m['frame']} {m['msg_type']} portal {m['portal']}: {m['message']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from testbed.observe import report, window  # (matplotlib, the `report` extra: on use)

    try:
        span = window.parse(args.window)
    except window.WindowError as exc:
        raise TestbedError(str(exc)) from None
    rdir = resolve_rundir(args.name, args.rundir)
    eventlog.flush_writers(rdir)  # a live testbed: what the writers buffer, too
    try:
        rep = report.report_rundir(rdir, args.output, span)
    except report.ReportError as exc:
        raise TestbedError(str(exc)) from None
    sys.stdout.write(rep.summary)
    print(f"report: {rep.out / report.INDEX} ({len(rep.pngs)} figures)")
    if rep.skipped:
        print(f"report: skipped {len(rep.skipped)} figures ({', '.join(rep.skipped)}): "
              f"{rep.why_skipped}")
    return 0


def _common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("-n", "--name", type=name_arg, help="testbed name (default: the only one)")
    sp.add_argument("--rundir", metavar="DIR", help="read this run directory instead")


def register(sub: Any, named: Any = None) -> None:
    """Add ``events``, ``check``, ``capture`` and ``report`` to ``testbed``'s subparsers."""
    text = ("print the testbed's event log: times relative to bring-up, filters; "
            "--json for the raw lines")
    sp = sub.add_parser("events", help=text, description=text)
    _common(sp)
    sp.add_argument("--node", action="append", metavar="NODE[,NODE]",
                    help="only events of these nodes (repeatable)")
    sp.add_argument("--kind", action="append", metavar="KIND[,KIND]",
                    help="only these kinds (repeatable; msg.send etc. for message traces)")
    sp.add_argument("--since", type=float, metavar="SECONDS",
                    help="only events at or after SECONDS from the start of bring-up")
    sp.add_argument("--json", action="store_true", help="print the raw JSON lines")
    sp.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    sp.set_defaults(func=cmd_events)
    text = ("check LNet's invariants over an event log (docs/events.md §2); exit 1 on a "
            "violation")
    sp = sub.add_parser("check", help=text, description=text)
    sp.add_argument("path", nargs="?", metavar="RUNDIR",
                    help="a run directory (live, kept after down, or a copy): events.jsonl "
                         "merged with nodes/*.trace.jsonl, streamed; or one event log file")
    _common(sp)
    sp.add_argument("--events", metavar="FILE", help="a JSON-lines event log file")
    sp.add_argument("--max", type=int, default=20, metavar="N",
                    help="violations printed per invariant (default 20)")
    sp.add_argument("--strict", action="store_true",
                    help="exit 1 also when the message invariants could not be checked "
                    "(no message trace: `up --no-trace`)")
    sp.set_defaults(func=cmd_check)
    text = ("capture packets in a node's namespace (dumpcap, pcapng), or --summary FILE: "
            "decode a capture as LNet")
    sp = sub.add_parser("capture", help=text, description=text)
    sp.add_argument("-n", "--name", type=name_arg, help="testbed name (default: the only one)")
    sp.add_argument("node", nargs="?", help="node to capture on")
    sp.add_argument("iface", nargs="?", help="interface (default: any = all of the node's)")
    sp.add_argument("--for", dest="seconds", type=float, metavar="S",
                    help="stop after S seconds (default: Ctrl-C)")
    sp.add_argument("-o", "--output", metavar="FILE.pcapng",
                    help="output file (default: NAME-NODE-IFACE.pcapng here)")
    sp.add_argument("--filter", metavar="BPF", help="capture filter, e.g. 'tcp port 988'")
    sp.add_argument("--summary", metavar="FILE", help="decode FILE as LNet over socklnd")
    sp.add_argument("--tshark", action="store_true",
                    help="with --summary: also count tshark's LNet and malformed frames")
    sp.add_argument("--json", action="store_true", help="with --summary: print JSON")
    sp.set_defaults(func=cmd_capture)
    text = ("HTML page, PNG figures and a text summary of a run (also from a run directory "
            "kept after down)")
    sp = sub.add_parser("report", help=text, description=text)
    _common(sp)
    sp.add_argument("-o", "--output", metavar="DIR", help="where to write (default RUNDIR/report)")
    sp.add_argument("--window", default="auto", metavar="START:END|all",
                    help="the time the figures show, in seconds from the start of bring-up "
                    "(10:25, 10:, :25); all: the whole run; default: the span where "
                    "something happened (faults, health, links, routes, traffic)")
    sp.set_defaults(func=cmd_report)
