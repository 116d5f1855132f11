"""A command line split into words as ``shlex.split`` does (POSIX rules), in linear time.

Theory of operation (issue 27 item 4): ``shlex.split`` builds each word a character at a time
(``self.token = self.token + nextchar``, an attribute CPython cannot grow in place), so a word
of n characters costs O(n²): an 800 KB ``testbed sim --script`` line took 4.75 s, 1.6 MB
26.5 s. :func:`split` gives the same words for the same input (checked against shlex by a
property test) by jumping over each run of ordinary characters with one regular-expression
match and joining a word's pieces once: O(n) in the line. Rules, as shlex's POSIX mode with
``whitespace_split`` and no comments: blanks (space, tab, CR, LF) separate words; ``'...'``
is literal; in ``"..."`` a backslash escapes only ``"`` and ``\\``; elsewhere a backslash
escapes any character. An unclosed quote or a trailing backslash is a ``ValueError`` with
shlex's message.
"""

from __future__ import annotations

import re

#: shlex's ``whitespace`` (not Unicode's: a no-break space is part of a word there too)
_BLANKS = re.compile(r"[ \t\r\n]*")
#: a run of characters with no special meaning outside quotes
_PLAIN = re.compile(r"[^ \t\r\n'\"\\]+")
#: a run inside double quotes up to the next ``"`` or backslash
_IN_DOUBLE = re.compile(r'[^"\\]*')


def split(line: str) -> list[str]:
    """The words of ``line`` (``shlex.split(line)``'s), in time linear in ``len(line)``.

    Raises:
        ValueError: ``No closing quotation`` or ``No escaped character``, as shlex.
    """
    words: list[str] = []
    i, n = 0, len(line)
    while True:
        i = _BLANKS.match(line, i).end()  # type: ignore[union-attr]  # (matches empty)
        if i >= n:
            return words
        parts: list[str] = []
        while i < n and line[i] not in " \t\r\n":
            c = line[i]
            if c == "'":
                end = line.find("'", i + 1)
                if end < 0:
                    raise ValueError("No closing quotation")
                parts.append(line[i + 1:end])
                i = end + 1
            elif c == '"':
                i = _double(line, i + 1, parts)
            elif c == "\\":
                if i + 1 >= n:
                    raise ValueError("No escaped character")
                parts.append(line[i + 1])
                i += 2
            else:
                m = _PLAIN.match(line, i)
                assert m is not None  # (c is an ordinary character)
                parts.append(m.group())
                i = m.end()
        words.append("".join(parts))


def _double(line: str, i: int, parts: list[str]) -> int:
    """The inside of a ``"..."`` starting at ``i`` appended to ``parts``; the index after
    its closing quote."""
    n = len(line)
    while True:
        m = _IN_DOUBLE.match(line, i)
        assert m is not None  # (matches empty)
        parts.append(m.group())
        i = m.end()
        if i >= n:
            raise ValueError("No closing quotation")
        if line[i] == '"':
            return i + 1
        if i + 1 >= n:  # a backslash last
            raise ValueError("No escaped character")
        nxt = line[i + 1]
        parts.append(nxt if nxt in '"\\' else "\\" + nxt)
        i += 2
