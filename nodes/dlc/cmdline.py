"""The steps every lnetctl verb takes before its own work (lnetctl.c ``check_cmd``, getopt).

Theory of operation: ``check_cmd`` runs first in most ``jt_*`` functions: too few words print
the command's help and fail with -EINVAL; a lone ``-h``/``--help`` (or a prefix of it) prints
the help and returns 1 (the exit status). Then the verb's ``getopt_long`` loop runs; on an
option error glibc prints its message on stderr and most verbs print their help and return 0
(``case '?': print_help(...)`` falling into ``default: return 0``). ``Stop`` carries such an
early outcome out of a parser as an exception, so parsers read straight.
"""

from __future__ import annotations

import errno as errno_mod
from collections.abc import Callable

from nodes.dlc import getopt
from nodes.dlc.help import print_help
from nodes.dlc.output import Result, exit_code
from nodes.dlc.tunables import parse_long

LongOpt = getopt.LongOpt
REQ, NO, OPT = getopt.REQUIRED, getopt.NO_ARG, getopt.OPTIONAL


class Stop(Exception):
    """An early outcome of a verb (help, usage or parse error): its ``Result``."""

    def __init__(self, result: Result) -> None:
        super().__init__(result)
        self.result = result


def _is_help(word: str) -> bool:
    if word.startswith("--"):
        return len(word) > 2 and "help".startswith(word[2:])
    return word.startswith("-") and "h" in word[1:]


def check_cmd(group: str, sub: str | None, args: list[str], min_args: int) -> None:
    """lnetctl.c ``check_cmd``; ``args`` are the words after the command name.

    Raises:
        Stop: too few words (help, -EINVAL) or a lone help option (help, exit status 1).
    """
    argc = len(args) + 1
    if argc < min_args:
        raise Stop((exit_code(-errno_mod.EINVAL), print_help(group, sub), ""))
    if argc == 2 and _is_help(args[0]):
        raise Stop((1, print_help(group, sub), ""))


def options(prog: str, args: list[str], short: str, longs: tuple[LongOpt, ...] = (), *,
            help_of: tuple[str, str] | None = None, fail: Result | None = None,
            lookahead: dict[str, Callable[[str], bool]] | None = None,
            ) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The verb's getopt loop. On an option error: glibc's line on stderr, the help of
    ``help_of`` on stdout if the verb prints it, and exit 0 -- or ``fail`` when the verb
    turns '?' into an error of its own.

    Raises:
        Stop: an option error.
    """
    try:
        return getopt.parse(prog, args, short, longs, lookahead)
    except getopt.GetoptError as e:
        if fail is not None:
            rc, out, err = fail
            raise Stop((rc, out, e.message + "\n" + err)) from None
        out = print_help(*help_of) if help_of else ""
        raise Stop((0, out, e.message + "\n")) from None


def long_or(text: str | None, default: int = -1) -> int:
    """``parse_long`` or the verb's "ignore option" default."""
    value = parse_long(text) if text is not None else None
    return default if value is None else value


def verbose_level(text: str | None) -> int:
    """``-v [N]`` (``jt_show_net``): a number taken from the next word, else 1; an attached
    argument (``--verbose=2``) also gives 1, as lnetctl's ``if (optarg || ...)`` does."""
    if text is None or not text.startswith("\0"):
        return 1
    value = parse_long(text[1:])
    return 1 if value is None else value


def is_level(word: str) -> bool:
    return parse_long(word) is not None
