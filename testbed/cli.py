"""``testbed``: bring emulated LNet clusters up and down, look inside, break links.

Every error is one line on stderr (``testbed: error: ...``) and exit status 1 (2 for usage),
never a traceback. ``exec`` and ``lnetctl`` pass the command's exit status through unchanged.
The subcommands live in ``testbed.commands`` (one module per concern, each with a
``register``); this module builds the parser and maps errors to exit statuses.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from testbed import sh
from testbed.base import TestbedError
from testbed.commands import explore, faults, lifecycle, lst, node, sim, trace
from testbed.commands.common import CliError
from testbed.observe import cli as observe_cli
from testbed.plan import TopologyError
from testbed.pytest.trace import TraceError

PROG = "testbed"
#: subcommand modules, in the order ``testbed --help`` lists them
MODULES = (lifecycle, sim, node, lst, faults, trace, observe_cli, explore)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {message}\n")


def _err(text: str) -> None:
    print(f"{PROG}: error: {text}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Emulated Lustre LNet clusters on one Linux box.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def named(cmd: str, helptext: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(cmd, help=helptext, description=helptext)
        sp.add_argument("-n", "--name", help="testbed name (default: the only one up)")
        return sp

    for module in MODULES:
        module.register(sub, named)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except TopologyError as exc:
        _err(str(exc))
    except (TestbedError, CliError, sh.CommandError, TraceError) as exc:
        _err(str(exc))
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:  # `testbed lnetctl ... | head`: the reader is gone, not an error
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (no flush error at exit)
        return 141
    except OSError as exc:
        _err(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    return 1


if __name__ == "__main__":
    sys.exit(main())
