"""``getopt_long`` as glibc runs it for lst's commands (lnet/utils/lst.c), with its messages.

Theory of operation: options and operands may be mixed (glibc permutes argv unless ``--``
ends the options); a long option is matched exactly or by an unambiguous prefix and takes
its argument as ``--opt=ARG`` or the next word; short options cluster (``-ft 30``, ``-t30``).
Every problem is reported with glibc's own wording, prefixed by the command name (lst passes
its ``argv[0]``, the command), and makes ``getopt`` return '?': lst then prints the
command's usage. Nothing here raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Opt:
    """One ``struct option``: ``arg`` is True for ``required_argument``."""

    name: str
    arg: bool
    val: str


@dataclass(slots=True)
class Parsed:
    """Options in order as (val, argument), the operands, and the first error."""

    opts: list[tuple[str, str | None]] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)
    error: str | None = None


def getopt_long(prog: str, argv: list[str], shortopts: str, longopts: list[Opt]) -> Parsed:
    """Parse ``argv`` (the words after the command); stop at the first error."""
    out = Parsed()
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            out.operands += argv[i:]
            break
        if word.startswith("--"):
            i = _long(prog, word, argv, i, longopts, out)
        elif word.startswith("-") and word != "-":
            i = _short(prog, word, argv, i, shortopts, out)
        else:
            out.operands.append(word)
        if out.error is not None:
            break
    return out


def _long(prog: str, word: str, argv: list[str], i: int, longopts: list[Opt],
          out: Parsed) -> int:
    name, eq, value = word[2:].partition("=")
    exact = [o for o in longopts if o.name == name]
    cands = exact or [o for o in longopts if o.name.startswith(name)]
    if not cands:
        out.error = f"{prog}: unrecognized option '--{name}'"
        return i
    if len(cands) > 1:
        names = " ".join(f"'--{o.name}'" for o in cands)
        out.error = f"{prog}: option '--{name}' is ambiguous; possibilities: {names}"
        return i
    opt = cands[0]
    if not opt.arg:
        if eq:
            out.error = f"{prog}: option '--{opt.name}' doesn't allow an argument"
        else:
            out.opts.append((opt.val, None))
        return i
    if not eq:
        if i >= len(argv):
            out.error = f"{prog}: option '--{opt.name}' requires an argument"
            return i
        value, i = argv[i], i + 1
    out.opts.append((opt.val, value))
    return i


def _short(prog: str, word: str, argv: list[str], i: int, shortopts: str,
           out: Parsed) -> int:
    j = 1
    while j < len(word):
        c = word[j]
        pos = shortopts.find(c)
        if pos < 0 or c == ":":
            out.error = f"{prog}: invalid option -- '{c}'"
            return i
        if shortopts[pos + 1:pos + 2] != ":":
            out.opts.append((c, None))
            j += 1
            continue
        if j + 1 < len(word):
            out.opts.append((c, word[j + 1:]))
        elif i < len(argv):
            out.opts.append((c, argv[i]))
            i += 1
        else:
            out.error = f"{prog}: option requires an argument -- '{c}'"
        return i
    return i


def atoi(text: str) -> int:
    """C ``atoi``: leading blanks, a sign, digits; anything else ends it (0 if none)."""
    s = text.lstrip(" \t\n\v\f\r")
    sign, k = 1, 0
    if s[:1] in "+-" and s[:1]:
        sign, k = (-1 if s[0] == "-" else 1), 1
    n = 0
    while k < len(s) and s[k].isdigit() and s[k].isascii():
        n = n * 10 + int(s[k])
        k += 1
    value = sign * n
    return (value + 2**31) % 2**32 - 2**31  # an int overflows as on x86


def strtol(text: str) -> tuple[int, str]:
    """C ``strtol(text, &end, 0)``: (value, what is left), base from the prefix."""
    s = text.lstrip(" \t\n\v\f\r")
    sign, k = 1, 0
    if s[:1] in ("+", "-") and s:
        sign, k = (-1 if s[0] == "-" else 1), 1
    base, digits = 10, "0123456789"
    if s[k:k + 2].lower() == "0x" and k + 2 < len(s) and s[k + 2] in "0123456789abcdefABCDEF":
        base, k, digits = 16, k + 2, "0123456789abcdefABCDEF"
    elif s[k:k + 1] == "0":
        base, digits = 8, "01234567"
    start, n = k, 0
    while k < len(s) and s[k] in digits:
        n = n * base + int(s[k], base)
        k += 1
    if k == start:
        return 0, text
    return sign * n, s[k:]
