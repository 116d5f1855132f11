"""What lnetctl prints when a command fails: exit status and cYAML error blocks (issue 14).

Theory of operation: a command's outcome is ``(rc, stdout, stderr)``. Errors are cYAML trees
built by ``cYAML_build_error`` (cyaml.c): ``CMD: [{ENTITY: {errno: N, descr: TEXT}}]``, several
errors of one command appended to the same ``CMD:`` sequence. liblnetconfig puts the double
quotes into the text itself (``"\\"cannot ...\\""``) and cYAML prints strings raw, so ``descr``
comes out double-quoted -- which also keeps a text with ``: `` valid YAML. lnetctl's own parser
errors (``jt_set_*``) carry no quotes and print raw (``parser_error``). The exit status is
``main``'s return value, a negative errno, as the shell sees it (``exit_code``).
"""

from __future__ import annotations

from typing import Any

from nodes.tools.yamlfmt import dump

Result = tuple[int, str, str]


def exit_code(err: int) -> int:
    """The 8-bit exit status of ``main`` returning ``err`` (0 stays 0 only for 0)."""
    return (256 + err) % 256 or (1 if err else 0)


class Errors:
    """A cYAML error tree under construction (``cYAML_build_error`` appends)."""

    def __init__(self) -> None:
        self._tree: dict[str, list[dict[str, Any]]] = {}
        self.rc = 0

    def add(self, cmd: str, entity: str, errno: int, descr: str) -> Errors:
        self._tree.setdefault(cmd, []).append({entity: {"errno": errno, "descr": descr}})
        self.rc = errno
        return self

    def __bool__(self) -> bool:
        return bool(self._tree)

    def text(self) -> str:
        return dump(self._tree) if self._tree else ""

    def result(self, out: str = "", rc: int | None = None) -> Result:
        return exit_code(self.rc if rc is None else rc), out, self.text()


def error(cmd: str, entity: str, errno: int, descr: str, rc: int | None = None) -> Result:
    """One error block and its exit status (``rc`` when ``main`` returns something else)."""
    return Errors().add(cmd, entity, errno, descr).result(rc=rc)


def parser_error(cmd: str, entity: str, text: str) -> str:
    """``cYAML_build_error(-1, -1, cmd, entity, text)`` for a text without quotes: printed
    raw, continuation lines aligned after ``descr: `` (cyaml.c ``print_string``)."""
    first, *more = text.split("\n")
    pad = " " * len("          descr: ")
    lines = [f"{cmd}:", f"    - {entity}:", "          errno: -1", f"          descr: {first}"]
    return "\n".join(lines + [pad + line for line in more]) + "\n"
