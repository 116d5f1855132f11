"""YAML with line numbers, and the validation helpers every section parser uses.

Theory of operation: ``_Loader`` (and ``_FastLoader``, the same on libyaml) is a SafeLoader
whose mappings (``_LocDict``) and sequences (``_LocList``) remember the lines of their keys
and values and flag duplicate keys; ``_Doc`` turns any failure into a ``TopologyError`` naming
file, line and YAML path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import yaml

from testbed.plan.model import NAME_RE, TopologyError


class _LocDict(dict):  # type: ignore[type-arg]
    """A mapping that remembers where its keys and values start (1-based lines)."""

    line: int
    key_lines: dict[Any, int]
    value_lines: dict[Any, int]
    duplicate: tuple[Any, int, int] | None  # (key, first line, repeated line)

    def vline(self, key: Any) -> int:
        """Line of a value; an empty value points at its key instead of the next line."""
        return self.key_lines[key] if self[key] is None else self.value_lines[key]


class _LocList(list):  # type: ignore[type-arg]
    line: int
    lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences carry line numbers and flag duplicate keys."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _LocDict:
    out = _LocDict()
    out.line, out.key_lines, out.value_lines = node.start_mark.line + 1, {}, {}
    out.duplicate = None
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:  # own keys only: merged (<<) ones may be overridden
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = _hashable_key(loader, node, key_node)
        line = key_node.start_mark.line + 1
        if key in seen and out.duplicate is None:
            out.duplicate = (key, seen[key], line)
        seen.setdefault(key, line)
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = _hashable_key(loader, node, key_node)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
        out.value_lines[key] = value_node.start_mark.line + 1
    return out


def _hashable_key(loader: _Loader, node: yaml.Node, key_node: yaml.Node) -> Any:
    key = loader.construct_object(key_node, deep=True)
    try:
        hash(key)
    except TypeError:
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping", node.start_mark, "found unhashable key",
            key_node.start_mark) from None
    return key


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _LocList:
    out = _LocList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


class _FastLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same loader on libyaml's parser (10x faster on a 10,000-node topology); its error
    messages differ, so a document it refuses is parsed again by ``_Loader`` for the error."""


for _cls in (_Loader, _FastLoader):
    _cls.add_constructor("tag:yaml.org,2002:map", _construct_map)
    _cls.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
    # Nothing in a topology is a date: keep `2020-13-45` a string the validator can name.
    _cls.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)


def _load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document; every parser failure becomes a TopologyError with its line."""
    try:
        return yaml.load(text, Loader=_FastLoader)  # a SafeLoader
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        pass  # the pure-Python parser says what and where, as the tests pin it
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        reason = e.problem or "invalid YAML"
        cmark = e.context_mark  # e.g. "while parsing a flow sequence" opened lines earlier
        if e.context:
            moved = cmark is not None and mark is not None and cmark.line != mark.line
            reason = f"{e.context}{f' (line {cmark.line + 1})' if moved else ''}: {reason}"
        line = mark.line + 1 if mark is not None else None
        kind = "error" if isinstance(e, yaml.constructor.ConstructorError) else "syntax error"
        raise TopologyError(f"YAML {kind}: {reason}", path=source, line=line) from None
    except yaml.reader.ReaderError as e:  # bad bytes or a control character
        line = text.count("\n", 0, e.position) + 1 if isinstance(text, str) else None
        char = f" #x{e.character:04x}" if isinstance(e.character, int) else ""
        raise TopologyError(f"YAML error: unacceptable character{char}: {e.reason}",
                            path=source, line=line) from None
    except yaml.YAMLError as e:
        raise TopologyError(f"YAML error: {e}", path=source) from None
    except (ValueError, TypeError, OverflowError) as e:  # a scalar PyYAML cannot construct
        raise TopologyError(f"YAML value error: {e}", path=source) from None
    except RecursionError:
        raise TopologyError("YAML nested too deeply", path=source) from None



def _join(parent: str, key: Any) -> str:
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{key!r}]"


def _kind(value: Any) -> str:
    names = {_LocDict: "a mapping", _LocList: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "nothing (null)"}
    return names.get(type(value), f"a {type(value).__name__}")


@dataclass
class _Doc:
    """The source being validated, so every failure can say where it is."""

    source: str

    def fail(self, line: int | None, field: str, reason: str) -> NoReturn:
        raise TopologyError(reason, path=self.source, line=line, field=field)

    def mapping(self, value: Any, line: int, field: str,
                keys: Mapping[str, bool] | None = None) -> _LocDict:
        """Check ``value`` is a mapping and, given a key table, that its keys are allowed."""
        if not isinstance(value, _LocDict):
            self.fail(line, field, f"expected a mapping, got {_kind(value)}")
        if keys is None:
            return value
        for key in value:
            if key not in keys:
                self.fail(value.key_lines[key], _join(field, key),
                          f"unknown key {key!r} (allowed: {', '.join(keys)})")
        for key, required in keys.items():
            if required and key not in value:
                self.fail(value.line, field, f"missing required key {key!r}")
        return value

    def name(self, value: Any, line: int | None, field: str, what: str) -> str:
        if not isinstance(value, str) or not NAME_RE.fullmatch(value):
            self.fail(line, field, f"bad {what} name {value!r}: must match {NAME_RE.pattern}"
                      " (a lower-case letter, then up to 31 of a-z, 0-9, '-')")
        return value

    def string(self, value: Any, line: int, field: str) -> str:
        if not isinstance(value, str):
            self.fail(line, field, f"expected a string, got {_kind(value)}")
        return value


def _find_duplicate(doc: _Doc, value: Any, field: str, seen: set[int]) -> None:
    """Refuse the first repeated key anywhere: PyYAML would silently keep the last one."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, _LocDict):
        if value.duplicate is not None:
            key, first, again = value.duplicate
            doc.fail(again, _join(field, key), f"duplicate key {key!r} (first at line {first})")
        for key, child in value.items():
            _find_duplicate(doc, child, _join(field, key), seen)
    elif isinstance(value, _LocList):
        for i, child in enumerate(value):
            _find_duplicate(doc, child, f"{field}[{i}]", seen)


# --------------------------------------------------------------------------- sections
