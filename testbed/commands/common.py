"""What the CLI's subcommands share: the one-line error, picking the testbed to act on, the
version, and output (tables by ``tabulate``, ``--json``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import testbed
from testbed import runstate

#: ``named(cmd, help)``: a subparser with ``-n/--name`` (testbed.cli.build_parser)
Named = Callable[[str, str], argparse.ArgumentParser]
DIST = "lnet-testbed"


class CliError(Exception):
    """A one-line error for the user."""


def name_arg(text: str) -> str:
    """``-n NAME``: a testbed name, checked as argparse parses it (a usage error, exit 2)."""
    from testbed.base import TestbedError, check_name

    try:
        return check_name(text)
    except TestbedError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def version() -> str:
    """This code's version: a checkout's pyproject.toml when run from one, else the
    installed distribution's metadata."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
        if project.get("name") == DIST:
            return str(project["version"])
    except (OSError, KeyError, ValueError):
        pass
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return "unknown"


def json_option(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--json", action="store_true",
                    help="print JSON instead of a table (for scripts)")


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], indent: str = "") -> str:
    """Rows as an aligned text table (tabulate's "simple" format); "" for no rows."""
    from tabulate import tabulate

    rows = list(rows)
    if not rows:
        return ""
    text = tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True,
                    missingval="-")
    return "".join(f"{indent}{line}".rstrip() + "\n" for line in text.splitlines())


def running(root: str | None = None) -> list[str]:
    """Names of the testbeds whose control process is alive."""
    return [n for n in runstate.list_testbeds(root)
            if runstate.supervisor_alive(n, runstate.read_state(runstate.rundir(n, root)))]


def pick(name: str | None) -> testbed.Testbed:
    """The testbed to act on: -n NAME, or the only one that is up."""
    if name is None:
        up = running()
        if not up:
            raise CliError("no testbed is up (start one with `testbed up`)"
                           + runstate.unreadable_hint())
        if len(up) > 1:
            raise CliError(f"several testbeds are up ({', '.join(up)}): choose one with -n NAME")
        name = up[0]
    return testbed.attach(name)


def needs_root(what: str, why: str) -> None:
    """The one-line "needs root" for what only root can do (issue 18)."""
    if os.geteuid() != 0:
        raise CliError(f"{what} needs root ({why}): run it as root")
