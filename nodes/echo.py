"""Echoing a user's value in an error message, bounded (issue 11, README "Limits").

Theory of operation: an error names the bad value so its author can find it, but a value
comes from a file, an argv or a peer and may be a megabyte long; quoted whole, it turns a
one-line error into a megabyte line (a terminal flood, a log line past any reader's limit).
Every error that quotes a user's value quotes it through :func:`shown`: its ``repr``, cut to
:data:`MAX_SHOWN_CHARS` characters with the full length said, so the start (what identifies it)
stays readable. :func:`clip` does the same for text already formatted.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterable

#: characters of a user's value quoted in an error (a NID, path or name is well under this)
MAX_SHOWN_CHARS = 80
#: names listed on one progress line (a topology may have 10,000 nodes)
MAX_LISTED_NAMES = 8


def clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` if at most ``limit`` characters, else its start and ``... (N characters)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def clip_words(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` with each word (a run without whitespace) longer than ``limit`` cut as
    :func:`clip` does: the last guard of a message whose parts were formatted elsewhere (an
    argparse usage error quotes the bad argument whole). Linear in ``text``. A value
    :func:`shown` already cut (its quotes and ``...`` past ``limit``) is left whole."""
    if len(text) <= limit:
        return text
    return re.sub(rf"\S{{{limit + 6},}}", lambda m: clip(m.group(), limit), text)


def one_line(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """An error line for a terminal: :func:`clip_words`, then every character that is not
    printable (``\\r``, ``\\n``, an escape, a record separator) as its Python escape, as
    :func:`shown`'s ``repr`` does (issue 27: ``unrecognized arguments: \\r0`` hid the start
    of its own line)."""
    text = clip_words(text, limit)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def listed(names: Iterable[str], limit: int = MAX_LISTED_NAMES) -> str:
    """Names for a progress or status line, space-separated: the first ``limit``, then
    ``... and N more`` (issue 27 item 12: a 10,000-node ``up`` printed a 59 KB line)."""
    head: list[str] = []
    more = 0
    for name in names:
        if len(head) < limit:
            head.append(clip(name))
        else:
            more += 1
    return " ".join(head) + (f" ... and {more:,} more" if more else "")


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut as :func:`clip` does; a long string or a
    large collection is cut before its ``repr`` is built (:mod:`reprlib`: never a megabyte
    copy for an 80-character message)."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int past Python's str() digits (CVE-2020-10735)
        return f"<an integer of {value.bit_length() if isinstance(value, int) else '?'} bits>"
    return text if len(text) <= limit else f"{text[:limit]}..."


def shown_path(path: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """A file path for an error message, cut in its middle when longer than ``limit``: its
    start says where, its end names the file (a test's temporary directory alone passes 64
    characters; cut at the end, every error named the directory and not the file)."""
    text = str(path)
    if len(text) <= limit:
        return repr(text)
    keep = limit // 2
    return f"{text[:keep]!r}...{text[-keep:]!r} ({len(text)} characters)"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = MAX_SHOWN_CHARS
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple, _REPR.maxset = 3, 6, 6, 6, 6
