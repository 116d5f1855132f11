"""What the CLI's subcommands share: the one-line error and picking the testbed to act on."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import testbed
from testbed import runstate

#: ``named(cmd, help)``: a subparser with ``-n/--name`` (testbed.cli.build_parser)
Named = Callable[[str, str], argparse.ArgumentParser]


class CliError(Exception):
    """A one-line error for the user."""


def name_arg(text: str) -> str:
    """``-n NAME``: a testbed name, checked as argparse parses it (a usage error, exit 2)."""
    from testbed.base import TestbedError, check_name

    try:
        return check_name(text)
    except TestbedError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def running(root: str | None = None) -> list[str]:
    """Names of the testbeds whose control process is alive."""
    return [n for n in runstate.list_testbeds(root)
            if runstate.supervisor_alive(n, runstate.read_state(runstate.rundir(n, root)))]


def pick(name: str | None) -> testbed.Testbed:
    """The testbed to act on: -n NAME, or the only one that is up."""
    if name is None:
        up = running()
        if not up:
            raise CliError("no testbed is up (start one with `testbed up`)")
        if len(up) > 1:
            raise CliError(f"several testbeds are up ({', '.join(up)}): choose one with -n NAME")
        name = up[0]
    return testbed.attach(name)
