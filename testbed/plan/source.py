"""Where a topology comes from, and the bounds on reading it (issue 11 item 5, issue 18).

Theory of operation: a topology is named by a path or by the name of a built-in one
(``routed`` -> ``topologies/routed.yaml``). The built-in files live in the top-level
``topologies/`` directory of the source tree; the wheel carries them as the package
``testbed.topologies`` (``package-dir`` in pyproject.toml), found with
``importlib.resources``, so an installed testbed and a checkout find the same files.

Reading is bounded before anything is parsed: the file must be a regular file (opened
``O_NONBLOCK``, so a FIFO cannot block us; ``/dev/zero`` and directories are refused), at most
:data:`MAX_TOPOLOGY_BYTES`, read with a bounded ``read``. YAML aliases are references in
the composed node graph; expanding them is what turns 609 bytes into gigabytes (a "billion
laughs"). :func:`check_expansion` counts the nodes the document would have once every alias
is expanded, and how deep it would nest (memoised, linear in the composed graph), and refuses
more than :data:`MAX_YAML_NODES` or :data:`MAX_YAML_DEPTH`, and any recursive alias, before a
single Python object is built. Composing is itself recursive (libyaml's composer in C, one
call per level, no guard: 100,000 nested ``[`` was a segfault), so the nesting is measured
first on the parser's event stream (:func:`check_depth`, iterative), before the composer runs.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import stat
from collections.abc import Iterator
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from testbed.plan.model import TopologyError

#: Largest topology file read (a 10,000-node topology with two rails each is ~360 KB).
MAX_TOPOLOGY_BYTES = 8 * 2**20
#: Most YAML nodes (mappings, lists, scalars) a document may have once aliases are expanded
#: (the 10,000-node topology above has 60,000).
MAX_YAML_NODES = 2_000_000
#: Deepest nesting of mappings and lists a document may have, aliases expanded (a topology
#: nests 5 deep; libyaml's composer recurses in C once per level, so 100,000 nested ``[``
#: overflowed the C stack -- a segfault -- before this bound was checked ahead of it).
MAX_YAML_DEPTH = 64
#: Package that carries the built-in topologies (the top-level ``topologies/`` directory).
TOPOLOGY_PACKAGE = "testbed.topologies"
_SOURCE_TREE = Path(__file__).resolve().parents[2] / "topologies"


def builtin_dir() -> Traversable:
    """The built-in topologies: the installed package, else a checkout's ``topologies/``."""
    with contextlib.suppress(ModuleNotFoundError):
        return importlib.resources.files(TOPOLOGY_PACKAGE)
    return _SOURCE_TREE  # a source checkout used in place (PYTHONPATH=checkout)


def builtin_names() -> list[str]:
    """Names of the built-in topologies (``default``, ``routed``, ...)."""
    return sorted(p.name[:-5] for p in builtin_dir().iterdir() if p.name.endswith(".yaml"))


def builtin_topology(name: str) -> Path | None:
    """The file of built-in topology ``name`` (``"routed"``), or None."""
    if not name or "/" in name or name.startswith("."):
        return None
    entry = builtin_dir() / f"{name}.yaml"
    return Path(str(entry)) if entry.is_file() else None


def default_topology() -> Path:
    """``topologies/default.yaml`` (seed 000 Figure 2: c1 and s1, two rails each)."""
    path = builtin_topology("default")
    assert path is not None, "the package lost topologies/default.yaml"
    return path


def resolve(spec: str | os.PathLike[str]) -> Path:
    """A topology argument as a file: an existing path, else a built-in topology's name.

    Raises:
        TopologyError: neither (naming the built-in topologies).
    """
    path = Path(spec)
    if path.is_file() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    found = builtin_topology(str(spec))
    if found is not None:
        return found
    if path.exists():
        return path  # a directory or a device here: read_bounded says what it is
    raise TopologyError(f"no such file, nor a built-in topology (built-in: "
                        f"{', '.join(builtin_names())})", path=str(spec))


def read_bounded(path: Path) -> str:
    """The text of topology file ``path``, read within the bounds above.

    Raises:
        TopologyError: not a regular file, too large, unreadable or not UTF-8 (one line).
    """
    src = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise TopologyError(f"cannot read topology: {e.strerror or e}", path=src) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TopologyError(f"cannot read topology: not a regular file (a "
                                f"{_file_kind(mode)})", path=src)
        chunks, size = [], 0
        while size <= MAX_TOPOLOGY_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_TOPOLOGY_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise TopologyError(f"cannot read topology: {e.strerror or e}", path=src) from None
    finally:
        os.close(fd)
    if size > MAX_TOPOLOGY_BYTES:
        raise TopologyError(f"topology file larger than {MAX_TOPOLOGY_BYTES} bytes "
                            f"({MAX_TOPOLOGY_BYTES >> 20} MiB): refused", path=src)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TopologyError(f"cannot read topology: not UTF-8 text (byte "
                            f"{data[e.start]:#04x} at offset {e.start})",
                            path=src, line=line) from None


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"),
             (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def too_deep(source: str, mark: yaml.Mark | None, how: str = "") -> TopologyError:
    return TopologyError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep{how}: refused",
                         path=source, line=None if mark is None else mark.line + 1)


def check_depth(events: Iterator[yaml.Event], source: str) -> None:
    """Refuse a document whose mappings and lists nest more than :data:`MAX_YAML_DEPTH`
    levels, from its parser events (iterative; stops at the first level too many).

    Raises:
        TopologyError: naming the line of the first collection too deep.
        yaml.YAMLError: the parser's own refusal of the text.
    """
    depth = 0
    for ev in events:
        if isinstance(ev, _OPEN):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise too_deep(source, ev.start_mark)
        elif isinstance(ev, _CLOSE):
            depth -= 1


_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def check_expansion(root: yaml.Node, source: str, limit: int = MAX_YAML_NODES) -> int:
    """How many nodes ``root`` has with every alias expanded; refused above ``limit``,
    nested deeper than :data:`MAX_YAML_DEPTH` once expanded (an alias of a deep list inside
    a deep list), or when an alias refers to a node that contains it (iterative: no
    recursion limit).

    Raises:
        TopologyError: the document expands beyond ``limit`` or the depth, or is recursive.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()  # started, not finished: the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_.discard(key)
            kids = _children(node)
            size[key] = total = 1 + sum(size[id(c)] for c in kids)
            if kids and isinstance(node, yaml.CollectionNode):
                depth[key] = 1 + max(depth[id(c)] for c in kids)
                if depth[key] > MAX_YAML_DEPTH:
                    raise too_deep(source, node.start_mark, " once its aliases are expanded")
            else:
                depth[key] = 1 if isinstance(node, yaml.CollectionNode) else 0
            if total > limit:
                raise TopologyError(
                    f"YAML aliases expand this document beyond {limit} nodes: refused "
                    "(an alias bomb?)", path=source, line=node.start_mark.line + 1)
            continue
        if key in size:
            continue
        open_.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_:
                raise TopologyError("YAML error: recursive alias (a node that contains "
                                    "itself)", path=source, line=child.start_mark.line + 1)
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)]
