"""Print dicts the way lnetctl's cYAML printer lays them out (spec §9.3).

Why not ``yaml.dump``: lnetctl indents mappings by 4, puts a top-level sequence's ``- `` at
column 4 but a nested sequence's at the parent key's column + 2, and writes ``key: value`` for
scalars in place. Users diff our output against real nodes, so the layout matters. The output
is valid YAML (``yaml.safe_load`` reads it back), which the tests check.
"""

from __future__ import annotations

import re
from typing import Any

#: a plain scalar; not one starting with a YAML indicator (``*`` alias, ``@`` reserved, ``>``
#: folded, ``?`` key): ``udsp show`` prints ``dst: "*@tcp"``, which safe_load reads back
_PLAIN = re.compile(r"^[A-Za-z0-9_./<+-][A-Za-z0-9_./@<>?*+ ()-]*$")
_QUOTE_KEYS = frozenset({"descr", "CPT"})
#: an IPv6 NID: libyaml's emitter (lnetctl's netlink output, YAML_PLAIN_SCALAR_STYLE) keeps
#: a scalar plain when each ':' is followed by a non-space, so ``2001:db8::1@tcp`` unquoted
_NID6 = re.compile(r"^[0-9a-f:.]*:[0-9a-f:.]*@[a-z]+[0-9]*$")


def _scalar(key: object, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    plain = _PLAIN.match(text) or _NID6.match(text)
    if key in _QUOTE_KEYS or not plain or text.lower() in ("true", "false", "null", "yes", "no"):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return text


def _emit_map(d: dict[Any, Any], col: int, lines: list[str], first_prefix: str | None = None,
              top: bool = False) -> None:
    for i, (key, value) in enumerate(d.items()):
        lead = first_prefix if (i == 0 and first_prefix is not None) else " " * col
        if isinstance(value, dict):
            if not value:
                lines.append(f"{lead}{key}: {{}}")
                continue
            lines.append(f"{lead}{key}:")
            _emit_map(value, col + 4, lines)
        elif isinstance(value, list):
            if not value:
                lines.append(f"{lead}{key}: []")
                continue
            lines.append(f"{lead}{key}:")
            _emit_seq(value, 4 if top else col + 2, lines)
        else:
            text = _scalar(key, value)
            lines.append(f"{lead}{key}: {text}" if text != "" else f"{lead}{key}:")


def _emit_seq(items: list[Any], col: int, lines: list[str]) -> None:
    for item in items:
        prefix = " " * col + "- "
        if isinstance(item, dict) and item:
            _emit_map(item, col + 2, lines, first_prefix=prefix)
        elif isinstance(item, list):
            lines.append(prefix.rstrip())
            _emit_seq(item, col + 2, lines)
        else:
            lines.append(prefix + _scalar(None, item))


def dump(doc: dict[str, Any]) -> str:
    """Render one lnetctl document (top-level mapping) with a trailing newline."""
    lines: list[str] = []
    _emit_map(doc, 0, lines, top=True)
    return "\n".join(lines) + "\n" if lines else ""


def error_doc(cmd: str, entity: str, errno: int, descr: str) -> str:
    """``cYAML_build_error``: the error block lnetctl prints on stderr."""
    return dump({cmd: [{entity: {"errno": errno, "descr": descr}}]})
