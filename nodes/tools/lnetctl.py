"""``lnetctl``: the DLC command-line tool, talking to this namespace's node daemon.

Like real lnetctl, this process reads and writes the files: ``import [FILE]`` reads FILE or
stdin here (bounded, ``nodes/dlc/importfile.py``) and sends the parsed content -- the daemon
never opens a user's path (issue 11 item 1); ``export FILE`` writes the exported YAML here.
Without arguments it reads commands from stdin, one per line (lnetctl's interactive mode).
"""

from __future__ import annotations

import sys

from nodes.dlc.cmdline import Stop
from nodes.dlc.importfile import ImportFileError, read_import_file, read_import_stream
from nodes.dlc.verbs.lnetctl_config import import_target
from nodes.dlc.verbs.lnetctl_export import export_target, write_export
from nodes.tools.remote import call, emit, interactive


def run(argv: list[str]) -> int:
    if argv and argv[0] == "import":
        return _import(argv)
    if argv and argv[0] == "export":
        return _export(argv)
    return emit(call("lnetctl", argv))


def _import(argv: list[str]) -> int:
    try:
        _mode, path = import_target(argv[1:])
    except Stop:
        return emit(call("lnetctl", argv))  # help or an option error: the daemon prints it
    try:
        if path is None:
            content = read_import_stream(sys.stdin.buffer, "<stdin>")
        else:
            content = read_import_file(path, blocking=True)
    except ImportFileError as e:
        return emit(e.result)
    rest = [a for a in argv[1:] if a != path] if path is not None else argv[1:]
    return emit(call("lnetctl", ["import", *rest], {"input": content}))


def _export(argv: list[str]) -> int:
    try:
        _backup, path = export_target(argv[1:])
    except Stop:
        return emit(call("lnetctl", argv))
    if path is None:
        return emit(call("lnetctl", argv))
    rc, out, err = call("lnetctl", [a for a in argv if a != path])
    if rc == 0:
        why = write_export(path, out)
        if why is not None:
            return emit((255, "", why))
        out = ""
    return emit((rc, out, err))


def main() -> int:
    if not sys.argv[1:]:
        return interactive("lnetctl", run)
    return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
