"""``testbed``: bring emulated LNet clusters up and down, look inside, break links.

Every error is one line on stderr (``testbed: error: ...``; a refused topology one line per
problem) and exit status 1 (2 for usage), never a traceback. ``exec`` and ``lnetctl`` pass
the command's exit status through unchanged; a reader that goes away (``| head``) ends it
quietly with 141, as a shell pipeline expects. The subcommands live in ``testbed.commands``
(one module per concern, each with a ``register``); this module builds the parser and maps
errors to exit statuses. Options go anywhere argparse allows: a subcommand's options and
positionals may be intermixed (``testbed fault add -n X loss node=c1``), except after a
command line passed through (``lnetctl``, ``exec``). ``testbed --version``;
``python -m testbed``; ``testbed completion bash|zsh|tcsh`` prints a completion script
(shtab, static: no Python runs on a tab press).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from nodes.echo import MAX_SHOWN_CHARS, one_line, shown_path
from testbed import sh
from testbed.base import TestbedError
from testbed.commands import (
    completion,
    explore,
    faults,
    lifecycle,
    lst,
    node,
    sim,
    status,
    trace,
    ui,
)
from testbed.commands.common import CliError, name_arg, version
from testbed.observe import cli as observe_cli
from testbed.plan import TopologyError
from testbed.pytest.trace import TraceError

PROG = "testbed"
#: subcommand modules, in the order ``testbed --help`` lists them
#: how to get a module an optional feature imports, by top-level name
MISSING_HINT = {"mininet": "apt install mininet; a venv needs --system-site-packages",
                "netfilterqueue": "pip install 'lnet-testbed[faults]'",
                "matplotlib": "pip install 'lnet-testbed[report]'",
                "aiohttp": "pip install 'lnet-testbed[ui]'"}
#: the longest word of an error line (issue 27 item 7; a path is far shorter)
ERR_WORD_CHARS = 4 * MAX_SHOWN_CHARS
MODULES = (lifecycle, status, sim, node, lst, faults, trace, observe_cli, explore, ui,
           completion)


class _Parser(argparse.ArgumentParser):
    """One-line usage errors; a subcommand's options intermixed with its positionals."""

    _mixing = False

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)  # (argparse quotes the bad argument whole: cut it)
        self.exit(2, f"{PROG}: error: {one_line(message)}{did_you_mean(message)}\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        passthrough = any(a.nargs == argparse.REMAINDER for a in self._actions)
        if self._mixing or self._subparsers is not None or passthrough:
            return super().parse_known_args(args, namespace)
        self._mixing = True  # parse_known_intermixed_args calls back into this method
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def did_you_mean(message: str) -> str:
    """``; did you mean 'status'?`` for argparse's invalid-choice error of a mistyped
    subcommand (or other choice) close to one of the choices, else nothing."""
    m = _INVALID_CHOICE.search(message)
    if not m:
        return ""
    choices = re.findall(r"'([^']*)'", m.group(2))
    close = difflib.get_close_matches(m.group(1), choices, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _err(text: str) -> None:
    """One error line; a word a message let through whole (a value quoted where it was
    formatted is cut to 80 characters there) is cut here, past any path's length."""
    print(f"{PROG}: error: {one_line(text, ERR_WORD_CHARS)}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Emulated Lustre LNet clusters on one Linux box.")
    p.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def named(cmd: str, helptext: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(cmd, help=helptext, description=helptext)
        arg: Any = sp.add_argument("-n", "--name", type=name_arg,
                                   help="testbed name (default: the only one up)")
        arg.complete = completion.TESTBED_NAMES
        return sp

    for module in MODULES:
        module.register(sub, named)
    p.set_defaults(parser=p)  # `testbed completion` describes the whole parser
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except TopologyError as exc:
        for line in exc.lines():
            _err(line)
    except (TestbedError, CliError, sh.CommandError, TraceError) as exc:
        _err(str(exc))
    except ModuleNotFoundError as exc:  # an optional part outside the package (issue 18)
        _err(f"Python module {exc.name} is not installed here ({sys.executable}): "
             + MISSING_HINT.get((exc.name or "").split(".")[0], "pip install it"))
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:  # `testbed ... | head`: the reader is gone, not an error
        _quiet_stdout()
        return 141
    except OSError as exc:
        _err(f"{exc.strerror or exc}" + (f": {shown_path(exc.filename)}" if exc.filename
                                          else ""))
    return 1


def _quiet_stdout() -> None:
    """No flush error at exit once the reader of stdout is gone."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def run() -> None:
    """The console script: ``main``, with a pipe closed under us at exit still quiet."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        status = 141
    sys.exit(status)


if __name__ == "__main__":
    run()
