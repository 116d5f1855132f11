"""YAML with line numbers, and the validation helpers every section parser uses.

Theory of operation: ``_Loader`` (and ``_FastLoader``, the same on libyaml) is a SafeLoader
whose mappings (``LocDict``) and sequences (``LocList``) remember the lines of their keys
and values and flag duplicate keys; ``Doc`` turns any failure into a ``TopologyError`` naming
file, line and YAML path.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, NoReturn

import yaml

from nodes.echo import MAX_SHOWN_CHARS, shown
from testbed.plan.model import NAME_RE, RESERVED_NAMES, TopologyError
from testbed.plan.source import (
    MAX_TOPOLOGY_BYTES,
    MAX_YAML_DEPTH,
    check_depth,
    check_expansion,
    too_deep,
)


class LocDict(dict):  # type: ignore[type-arg]
    """A mapping that remembers where its keys and values start (1-based lines)."""

    line: int
    key_lines: dict[Any, int]
    value_lines: dict[Any, int]
    duplicate: tuple[Any, int, int] | None  # (key, first line, repeated line)

    def vline(self, key: Any) -> int:
        """Line of a value; an empty value points at its key instead of the next line."""
        return self.key_lines[key] if self[key] is None else self.value_lines[key]


class LocList(list):  # type: ignore[type-arg]
    line: int
    lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences carry line numbers and flag duplicate keys,
    and whose (recursive) composer refuses to nest deeper than :data:`MAX_YAML_DEPTH`."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise too_deep(self.name, self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> LocDict:
    out = LocDict()
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


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> LocList:
    out = LocList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


class _FastLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same loader on libyaml's parser (10x faster on a 10,000-node topology); its error
    messages differ, so a document it refuses is parsed again by ``_Loader`` for the error."""


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """SafeLoader's int, with an integer near or past what Python converts to and from text
    (``int()``'s 4,300 digits, CVE-2020-10735; a hex one is read but cannot be printed)
    refused at its line (issue 27 item 9: it was Python's message, with no line)."""
    digits = sys.get_int_max_str_digits() or 4300  # (0: unlimited here; bound it anyway)
    try:
        value = int(yaml.SafeLoader.construct_yaml_int(loader, node))
        if value.bit_length() <= 3 * digits:  # < 10**digits
            return value
    except ValueError:
        pass
    raise yaml.constructor.ConstructorError(
        None, None, f"an integer of {len(node.value):,} characters: too large (Python reads "
        f"at most {digits:,} digits; no topology value comes near)", node.start_mark)


for _cls in (_Loader, _FastLoader):
    _cls.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _cls.add_constructor("tag:yaml.org,2002:map", _construct_map)
    _cls.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
    # Nothing in a topology is a date: keep `2020-13-45` a string the validator can name.
    _cls.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)


def _compose_check_construct(loader_cls: type, text: str, source: str) -> Any:
    """``yaml.load`` in its two steps, with the alias expansion bounded in between: the
    composed node graph (aliases still references) is measured before anything is built.
    libyaml's composer recurses in C with no guard: its events are measured first."""
    if loader_cls is _FastLoader:
        check_depth(yaml.parse(text, Loader=_FastLoader), source)
    loader = loader_cls(text)
    loader.name = source  # what its errors (and too_deep) call the text
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document; every parser failure becomes a TopologyError with its line."""
    if len(text) > MAX_TOPOLOGY_BYTES:
        raise TopologyError(f"topology larger than {MAX_TOPOLOGY_BYTES} characters: refused",
                            path=source)
    try:
        return _compose_check_construct(_FastLoader, text, source)  # a SafeLoader
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        pass  # the pure-Python parser says what and where, as the tests pin it
    try:
        return _compose_check_construct(_Loader, text, source)  # _Loader is a SafeLoader
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



#: a key shown as ``parent.key`` in a field path; any other (or a longer one) goes through
#: ``shown`` as ``parent['...']``
_PLAIN_KEY = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_SHOWN_CHARS}}}")


def join_field(parent: str, key: Any) -> str:
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{shown(key)}]"


def kind_name(value: Any) -> str:
    names = {LocDict: "a mapping", LocList: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "nothing (null)"}
    return names.get(type(value), f"a {type(value).__name__}")


def suggest(word: Any, choices: Iterable[str]) -> str | None:
    """The choice closest to a misspelt ``word`` (``helth_sensitivity``), if one is close."""
    if not isinstance(word, str):
        return None
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return close[0] if close else None


def unknown(what: str, word: Any, choices: Iterable[str]) -> str:
    """``unknown key 'x' (did you mean 'y'?)``, else the keys allowed; for a name, those
    defined and a did-you-mean (at most 12 listed: a 10,000-node topology has many)."""
    names = list(choices)
    near = suggest(word, names)
    mean = f"did you mean {shown(near)}?" if near is not None else ""
    if what == "key" and mean:
        return f"unknown key {shown(word)} ({mean})"
    listed = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    if what == "key":
        return f"unknown key {shown(word)} (allowed: {listed})"
    also = f"; {mean}" if mean else ""
    return f"unknown {what} {shown(word)} (defined: {listed or 'none'}{also})"


@dataclass
class Doc:
    """The source being validated, so every failure can say where it is.

    ``fail`` raises (the unit being checked cannot go on); ``note`` records a problem and
    lets the caller go on; ``each()`` runs one independent unit (a network, a node, a key),
    recording its failure and going on with the next, so a refused topology lists every
    problem at once (``errors``; ``broken``: names whose definition failed, so references
    to them are not reported again).
    """

    source: str
    errors: list[TopologyError] = dc_field(default_factory=list)
    broken: set[str] = dc_field(default_factory=set)

    def fail(self, line: int | None, field: str, reason: str) -> NoReturn:
        raise TopologyError(reason, path=self.source, line=line, field=field)

    def note(self, line: int | None, field: str, reason: str) -> None:
        self.errors.append(TopologyError(reason, path=self.source, line=line, field=field))

    @contextlib.contextmanager
    def each(self, name: str | None = None) -> Iterator[None]:
        """One independent unit: its failure is recorded (and ``name`` marked broken)."""
        before, failed = len(self.errors), False
        try:
            yield
        except TopologyError as e:
            self.errors.extend(e.errors)
            failed = True
        if name is not None and (failed or len(self.errors) > before):
            self.broken.add(name)

    def skip(self) -> NoReturn:
        """End this unit without a new problem: it refers to a name whose definition
        failed (that failure was recorded)."""
        quiet = TopologyError("refers to a broken definition", path=self.source)
        quiet.errors = []
        raise quiet

    def refers_to_broken(self, name: Any) -> bool:
        return isinstance(name, str) and name in self.broken

    def check(self) -> None:
        """Raise every problem recorded so far, at once."""
        if self.errors:
            raise TopologyError.combine(self.errors)

    def mapping(self, value: Any, line: int, field: str,
                keys: Mapping[str, bool] | None = None) -> LocDict:
        """Check ``value`` is a mapping and, given a key table, that its keys are allowed.

        Unknown keys are noted (each one, with a did-you-mean) and ignored; a missing
        required key fails the unit."""
        if not isinstance(value, LocDict):
            self.fail(line, field, f"expected a mapping, got {kind_name(value)}")
        if keys is None:
            return value
        for key in value:
            if key not in keys:
                self.note(value.key_lines[key], join_field(field, key), unknown("key", key, keys))
        for key, required in keys.items():
            if required and key not in value:
                self.fail(value.line, field, f"missing required key {shown(key)}")
        return value

    def name(self, value: Any, line: int | None, field: str, what: str) -> str:
        if not isinstance(value, str) or not NAME_RE.fullmatch(value):
            self.fail(line, field, f"bad {what} name {shown(value)}: must match {NAME_RE.pattern}"
                      " (a lower-case letter, then up to 31 of a-z, 0-9, '-')")
        if what.startswith("testbed") and value in RESERVED_NAMES:
            self.fail(line, field, f"bad {what} name {shown(value)}: reserved (the run root's "
                      f"{value}/ directory is shared by every testbed)")
        return value

    def string(self, value: Any, line: int, field: str) -> str:
        if not isinstance(value, str):
            self.fail(line, field, f"expected a string, got {kind_name(value)}")
        return value


def find_duplicate(doc: Doc, value: Any, field: str, seen: set[int]) -> None:
    """Note every repeated key: PyYAML would silently keep the last one."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, LocDict):
        if value.duplicate is not None:
            key, first, again = value.duplicate
            doc.note(again, join_field(field, key),
                     f"duplicate key {shown(key)} (first at line {first})")
        for key, child in value.items():
            find_duplicate(doc, child, join_field(field, key), seen)
    elif isinstance(value, LocList):
        for i, child in enumerate(value):
            find_duplicate(doc, child, f"{field}[{i}]", seen)


# --------------------------------------------------------------------------- sections
