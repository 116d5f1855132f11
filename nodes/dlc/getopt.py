"""``getopt_long`` as glibc implements it, for every lnetctl and lctl verb (issue 14 "Parsing").

Theory of operation: real lnetctl parses each verb with glibc ``getopt_long`` (lnetctl.c, every
``jt_*``); users rely on its rules, so one implementation of them serves every verb here:

* long options match exactly, or by an unambiguous prefix (``--prim`` for ``--prim_nid``);
  several prefix matches that all mean the same option (same argument kind and value, as
  ``--hop``/``--hop-count``) are not ambiguous (glibc ``process_long_option``);
* ``--name=value`` or ``--name value`` for a required argument; an optional argument only
  attached (``--verbose=2``, ``-v2``);
* short options cluster (``-ab``), an argument is the rest of the cluster or the next word;
* operands are permuted to the end (GNU order); ``--`` ends the options; ``-`` is an operand;
* errors carry glibc's messages, prefixed with the verb's ``argv[0]`` as glibc prints it
  (``add: unrecognized option '--foo'``). getopt returns ``'?'`` for them; every lnetctl
  handler stops there, so ``parse`` raises at the first one.

One pass over argv, work linear in its length (issue 11 item 2: argparse was quadratic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nodes.echo import clip

NO_ARG, REQUIRED, OPTIONAL = 0, 1, 2


@dataclass(frozen=True, slots=True)
class LongOpt:
    """One ``struct option``: ``name``, ``has_arg`` and the ``val`` getopt returns."""

    name: str
    has_arg: int
    val: str


class GetoptError(Exception):
    """What glibc prints on stderr before getopt returns ``'?'`` (one line)."""

    def __init__(self, message: str, word: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.word = word  # the argv element being scanned (portals.c prints it)


def _short_table(shortopts: str) -> dict[str, int]:
    table: dict[str, int] = {}
    i = 0
    spec = shortopts.lstrip("+-:")
    while i < len(spec):
        ch = spec[i]
        kind = NO_ARG
        if spec[i + 1:i + 3] == "::":
            kind, i = OPTIONAL, i + 2
        elif spec[i + 1:i + 2] == ":":
            kind, i = REQUIRED, i + 1
        table[ch] = kind
        i += 1
    return table


def _find_long(prog: str, text: str, longopts: tuple[LongOpt, ...]) -> LongOpt:
    """Exact match, else the unambiguous prefix match (glibc ``process_long_option``)."""
    exact = next((o for o in longopts if o.name == text), None)
    if exact is not None:
        return exact
    found = [o for o in longopts if o.name.startswith(text)]
    if not found:
        raise GetoptError(f"{prog}: unrecognized option '--{clip(text)}'")
    first = found[0]
    if any((o.has_arg, o.val) != (first.has_arg, first.val) for o in found[1:]):
        names = " ".join(f"'--{o.name}'" for o in found)
        raise GetoptError(f"{prog}: option '--{clip(text)}' is ambiguous; possibilities: {names}")
    return first


def parse(prog: str, argv: list[str], shortopts: str, longopts: tuple[LongOpt, ...] = (),
          lookahead: dict[str, Callable[[str], bool]] | None = None,
          ) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Scan ``argv`` (without the verb itself) as ``getopt_long`` would.

    ``lookahead`` maps an option value to a test of the word after it: lnetctl's ``-v`` handler
    takes that word as the level when it parses as a number and does not start with ``-``
    (``argv[optind++]`` in ``jt_show_net``); such an option without an attached argument then
    carries the word, prefixed with a NUL so the handler can tell it from an attached one.

    Returns:
        ``(options, operands)``: options as ``(val, optarg)`` in command-line order (``val``
        is the short letter or the long option's ``val``), operands in order.

    Raises:
        GetoptError: glibc's message for the first bad option.
    """
    short = _short_table(shortopts)
    look = lookahead
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i, n = 0, len(argv)
    while i < n:
        arg = argv[i]
        i += 1
        try:
            i = _one(prog, arg, argv, i, short, longopts, look, opts, operands)
        except GetoptError as e:
            e.word = e.word or arg
            raise
        if i < 0:  # "--": the rest are operands
            operands.extend(argv[-i - 1:])
            break
    return opts, operands


def _long_opt(prog: str, arg: str, argv: list[str], i: int, longopts: tuple[LongOpt, ...],
              look: dict[str, Callable[[str], bool]] | None,
              opts: list[tuple[str, str | None]]) -> int:
    """``--name[=value]``; returns the index after what it consumed."""
    name, eq, value = arg[2:].partition("=")
    try:
        opt = _find_long(prog, name, longopts)
    except GetoptError as e:
        if eq:  # glibc prints the whole word after "--"
            raise GetoptError(e.message.replace(f"'--{clip(name)}'",
                                                 f"'--{clip(arg[2:])}'", 1)) from None
        raise
    if eq and opt.has_arg == NO_ARG:
        raise GetoptError(f"{prog}: option '--{opt.name}' doesn't allow an argument")
    if opt.has_arg == REQUIRED and not eq:
        if i >= len(argv):
            raise GetoptError(f"{prog}: option '--{opt.name}' requires an argument")
        value, eq = argv[i], "="
        i += 1
    if not eq and look is not None and opt.val in look and i < len(argv) \
            and not argv[i].startswith("-") and look[opt.val](argv[i]):
        value, eq = "\0" + argv[i], "="
        i += 1
    opts.append((opt.val, value if eq else None))
    return i


def _short_opts(prog: str, arg: str, argv: list[str], i: int, short: dict[str, int],
                look: dict[str, Callable[[str], bool]] | None,
                opts: list[tuple[str, str | None]]) -> int:
    """A cluster ``-abc``; returns the index after what it consumed."""
    j = 1
    while j < len(arg):
        ch = arg[j]
        j += 1
        if ch not in short or ch == ":":
            raise GetoptError(f"{prog}: invalid option -- '{ch}'")
        kind = short[ch]
        if kind == NO_ARG or (kind == OPTIONAL and j == len(arg)):
            if j == len(arg) and look is not None and ch in look and i < len(argv) \
                    and not argv[i].startswith("-") and look[ch](argv[i]):
                opts.append((ch, "\0" + argv[i]))
                i += 1
            else:
                opts.append((ch, None))
            continue
        if j < len(arg):
            opts.append((ch, arg[j:]))
        elif i < len(argv):
            opts.append((ch, argv[i]))
            i += 1
        else:
            raise GetoptError(f"{prog}: option requires an argument -- '{ch}'")
        break
    return i


def _one(prog: str, arg: str, argv: list[str], i: int, short: dict[str, int],
         longopts: tuple[LongOpt, ...], look: dict[str, Callable[[str], bool]] | None,
         opts: list[tuple[str, str | None]], operands: list[str]) -> int:
    """Scan one argv word (``arg``, ``i`` the index after it); the next index, or ``-i-1``
    for ``--``."""
    if arg == "--":
        return -i - 1
    if arg.startswith("--"):
        return _long_opt(prog, arg, argv, i, longopts, look, opts)
    if arg.startswith("-") and arg != "-":
        return _short_opts(prog, arg, argv, i, short, look, opts)
    operands.append(arg)
    return i
