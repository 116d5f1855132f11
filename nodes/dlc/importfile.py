"""Reading an ``lnetctl import`` file, bounded, on the side of whoever runs lnetctl.

Theory of operation (issue 11 item 1): real lnetctl reads the import file itself (``jt_import``
``fopen``/stdin) and only the parsed configuration reaches the kernel. Here the ``lnetctl``
client -- or the testbed, for ``testbed lnetctl NODE import FILE`` -- calls
``read_import_file``/``read_import_stream``; the node daemon receives ``content`` (the parsed
document, JSON-safe), never a path. Reading is bounded: at most ``MAX_IMPORT_BYTES`` (a larger
input, ``/dev/urandom`` or ``/dev/zero`` included, is refused after that many bytes), the
parsed document at most ``MAX_IMPORT_NODES`` nodes with aliases counted each time they are
used (an alias bomb is refused, not expanded). ``blocking=False`` (the default, for callers
that must not stall: a daemon, the supervisor) accepts only regular files; the interactive
client passes ``blocking=True`` and reads FIFOs and stdin as lnetctl does.

Errors are lnetctl's: an unreadable file is cYAML's builder error (``cannot open 'F': why``,
``jt_import``), YAML that does not parse is ``Failed to handle token:N NAME [...]``
(``yaml_token_error``), each as ``ImportFileError.result``.
"""

from __future__ import annotations

import contextlib
import errno as E
import os
import stat
import sys
from typing import IO, Any

import yaml

from nodes.dlc.output import Result, error, exit_code
from nodes.dlc.yamltoken import yaml_token_error
from nodes.limits import MAX_IMPORT_BYTES, MAX_IMPORT_NODES
from nodes.tools.yamlfmt import dump

#: content crossing the control socket: {"name": where it came from, "doc": parsed YAML}
Content = dict[str, Any]


class ImportFileError(Exception):
    """What lnetctl prints for an import input it cannot use."""

    def __init__(self, result: Result) -> None:
        super().__init__(result[2].strip())
        self.result = result


def _builder_error(rc: int, descr: str) -> ImportFileError:
    """``cYAML_build_error(-1, -1, "yaml", "builder", descr)``, ``main`` returning ``rc``;
    descr quoted so that a path or a message with ``: `` stays YAML (docs/differences.md)."""
    return ImportFileError(error("yaml", "builder", -1, descr, rc=rc))


def _too_big(name: str) -> ImportFileError:
    return ImportFileError((exit_code(-E.EFBIG), "", f"lnetctl import: {name}: more than "
                            f"{MAX_IMPORT_BYTES} bytes: {os.strerror(E.EFBIG)}\n"))


def read_import_stream(f: IO[bytes], name: str) -> Content:
    """Read and parse an already open input (a file, a FIFO, stdin), at most
    ``MAX_IMPORT_BYTES``."""
    data = f.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise _too_big(name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _builder_error(-E.EINVAL, f"cannot open '{name}': not UTF-8 text") from None
    return parse_import_text(text, name)


def read_import_file(path: str, *, blocking: bool = False) -> Content:
    """``jt_import``'s ``fopen(file)`` plus the parse: the content to hand the daemon.

    Raises:
        ImportFileError: unreadable, too large, not a regular file (unless ``blocking``), not
            YAML, or too many nodes.
    """
    flags = os.O_RDONLY | (0 if blocking else os.O_NONBLOCK)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        no = e.errno or E.EIO
        raise _builder_error(-no, f"cannot open '{path}': {os.strerror(no)}") from None
    try:  # the type first: io refuses to wrap a directory (IsADirectoryError, issue 27 item 6)
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):  # fopen(dir) succeeds in C; cYAML's read then fails: EISDIR
            raise _builder_error(-E.EISDIR, f"cannot open '{path}': {os.strerror(E.EISDIR)}")
        if not blocking and not stat.S_ISREG(mode):
            raise ImportFileError((exit_code(-E.EINVAL), "", (
                f"lnetctl import: '{path}' is not a regular file (pipe it to the lnetctl "
                "command's stdin instead)\n")))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return read_import_stream(f, path)


def parse_import_text(text: str, name: str) -> Content:
    """YAML text -> content, or the builder error lnetctl prints."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:  # lustre_yaml_config -> cYAML_build_tree: -EINVAL
        raise _builder_error(-E.EINVAL, yaml_token_error(text, e)) from None
    except RecursionError:
        raise _builder_error(-E.EINVAL, "Failed to handle token: nesting too deep") from None
    except ValueError:  # an integer past int()'s digits (issue 27 item 9): Python's message
        raise _builder_error(-E.EINVAL, "Failed to handle token: a number of more than "
                             f"{sys.get_int_max_str_digits():,} digits") from None
    return {"name": name, "doc": json_safe(doc)}


def json_safe(doc: Any) -> Any:
    """The document with string keys and JSON scalars only, at most ``MAX_IMPORT_NODES``
    nodes (shared subtrees counted at every use).

    Raises:
        ImportFileError: too many nodes (an alias bomb, or a giant file).
    """
    budget = [MAX_IMPORT_NODES]

    def walk(node: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or depth > 64:
            raise ImportFileError((exit_code(-E.E2BIG), "", (
                f"lnetctl import: more than {MAX_IMPORT_NODES} YAML nodes or nesting deeper "
                f"than 64: {os.strerror(E.E2BIG)}\n")))
        if isinstance(node, dict):
            return {str(k) if not isinstance(k, str) else k: walk(v, depth + 1)
                    for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(v, depth + 1) for v in node]
        if node is None or isinstance(node, bool | int | float | str):
            return node
        return str(node)

    return walk(doc, 0)


def content_error(content: object) -> str | None:
    """Validation of content received on the control socket: a one-line reason or None."""
    if not isinstance(content, dict) or set(content) != {"name", "doc"} \
            or not isinstance(content["name"], str):
        return "input must be {\"name\": str, \"doc\": parsed YAML}"
    try:
        json_safe(content["doc"])
    except ImportFileError as e:
        return str(e)
    return None


def show(content: Content) -> str:
    """``import --show`` prints the parsed document back."""
    doc = content["doc"]
    with contextlib.suppress(Exception):
        return dump(doc) if isinstance(doc, dict) else ""
    return ""
