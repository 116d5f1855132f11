"""``testbed exec`` on the simulator for a node's ``/sys/module/{lnet,ksocklnd}/parameters``.

Theory of operation: a simulated node has no namespace or shell, but a script reads and writes
its module parameter files as on a real node (sanity-lnet: ``cat /sys/module/lnet/
parameters/X``, ``echo V > ...``). ``is_sysfs`` recognises the three command lines a script
uses on them -- ``cat PATH...``, ``echo [-n] WORDS > PATH``, ``ls DIR`` -- on paths under
/sys/module only; ``run`` answers them from the node's ``ModParams``
(``nodes/dlc/verbs/modparam_files.py``, what the Mininet node's FUSE mount serves), with the
status and the one error line dash prints on a Linux node: a refused write is ``echo: I/O
error`` (status 1, the kernel's reason in the node's log), an unknown or read-only file ``cannot
create PATH: Permission denied`` (status 2), a missing one for ``cat`` ``No such file or
directory`` (status 1).
"""

from __future__ import annotations

import errno as E
from collections.abc import Sequence

from nodes.dlc.verbs.modparam_files import BY_PATH, MODULES, ROOT, ModParams, ParamError, parse_path
from nodes.echo import clip
from nodes.lnet.actions import Log
from testbed.base import Completed

VERB = "sysfs"


def is_sysfs(words: Sequence[str]) -> bool:
    """True for ``cat``/``echo ... >``/``ls`` command lines on /sys/module paths."""
    if not words or words[0] not in ("cat", "echo", "ls"):
        return False
    paths = [w.lstrip(">") for w in words[1:] if w.startswith((ROOT, ">"))]
    return bool(paths) and all(p.startswith(ROOT) or p == "" for p in paths)


def run(params: ModParams, words: Sequence[str]) -> Completed:
    """One command line (``is_sysfs``) on ``params``: (status, stdout, stderr)."""
    if words[0] == "cat":
        return _cat(params, words[1:])
    if words[0] == "ls":
        return _ls(words[1:])
    return _echo(params, list(words[1:]))


def _cat(params: ModParams, paths: Sequence[str]) -> Completed:
    out, err, rc = [], [], 0
    for path in paths:
        try:
            out.append(params.read(parse_path(path)))
        except ParamError:
            err.append(f"cat: {clip(path)}: No such file or directory\n")
            rc = 1
    return Completed(rc, "".join(out), "".join(err))


def _ls(paths: Sequence[str]) -> Completed:
    out, err, rc = [], [], 0
    for path in paths or [ROOT]:
        parts = path.rstrip("/").split("/")[3:]  # after "", "sys", "module"
        if not parts:
            names = list(MODULES)
        elif len(parts) == 1 and parts[0] in MODULES:
            names = ["parameters"]
        elif len(parts) == 2 and parts[0] in MODULES and parts[1] == "parameters":
            names = sorted(n for m, n in BY_PATH if m == parts[0])
        else:
            err.append(f"ls: cannot access '{clip(path)}': No such file or directory\n")
            rc = 2
            continue
        out.append("".join(f"{n}\n" for n in names))
    return Completed(rc, "".join(out), "".join(err))


def _echo(params: ModParams, words: list[str]) -> Completed:
    newline = "\n"
    if words and words[0] == "-n":
        newline, words = "", words[1:]
    target = next((i for i, w in enumerate(words) if w.startswith(">")), None)
    if target is None:
        return Completed(0, " ".join(words) + newline, "")
    path = words[target][1:] or (words[target + 1] if target + 1 < len(words) else "")
    values = words[:target]
    try:
        param = parse_path(path)
    except ParamError:
        return _cannot_create(path)
    try:
        params.write(param, (" ".join(values) + newline).encode())
    except ParamError as e:
        if e.errno == E.EACCES:
            return _cannot_create(path)
        params.rt.execute([Log(level="error", text=f"{param.module}/{param.name}: {e.text}")])
        return Completed(1, "", "sh: 1: echo: echo: I/O error\n")
    return Completed(0, "", "")


def _cannot_create(path: str) -> Completed:
    return Completed(2, "", f"sh: 1: cannot create {clip(path)}: Permission denied\n")


__all__ = ["VERB", "is_sysfs", "run"]
