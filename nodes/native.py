"""Which of our packages run compiled with mypyc, and whether the compiled code is current.

``setup.py`` compiles the modules of every package in ``COMPILED`` (but the ones listed as
left in Python) and the modules ``COMPILED_ONLY`` names (the rest of their packages stays
Python) in one mypyc group, so compiled code calls compiled code directly across the
packages: one shared library in ``nodes/lnet/_native/``, and one small module per source module
in its own package's ``_native/``, with the SHA-256 of all those packages' sources
(``source_digest``) in each ``_native/SOURCES``. Each package's ``__init__.py`` calls
``use_native``, which puts its ``_native/`` first on the package's path only while that digest
matches the sources: an edited source in any compiled package sends all of them back to
Python together (one stderr line says so), as compiled code of one package may have been built
against the others' old selves. ``LNET_TESTBED_PURE_PYTHON=1`` runs the sources regardless.

Only the standard library here: ``setup.py`` loads this file by path, before anything is
installed.
"""

from __future__ import annotations

import hashlib
import os
import sys

#: set to anything non-empty: run the sources even when compiled modules are up to date
PURE_ENV = "LNET_TESTBED_PURE_PYTHON"
NATIVE_DIR = "_native"

#: compiled package -> {module file left as Python: why}
COMPILED: dict[str, dict[str, str]] = {
    "nodes.lnet": {
        "__init__.py": "picks compiled or source modules at import",
        "errors.py": "its exceptions are subclassed outside the engine (nodes/dlc, "
                     "nodes/daemon), which mypyc's compiled classes refuse",
    },
    "nodes.lnd": {
        "__init__.py": "picks compiled or source modules at import",
    },
    "nodes.o2ib": {
        "__init__.py": "picks compiled or source modules at import",
        "o2ibio.py": "the daemon's asyncio driver: its protocol subclasses asyncio's "
                     "BufferedProtocol, which mypyc's compiled classes cannot",
    },
    "nodes.selftest": {
        "__init__.py": "picks compiled or source modules at import",
        # the lst console (lnet/selftest/console.c, conrpc.c) and the lst tool: a few RPCs
        # per command or stat tick, never per test RPC; their ioctl classes are mixins
        # (Console, LstTool), which mypyc's compiled classes refuse
        **dict.fromkeys(["console.py", "congroup.py", "conbatch.py", "conrpc.py",
                         "lstbase.py", "lstbatch.py", "lstcli.py", "lstgroup.py",
                         "lststat.py", "lstwatch.py", "getopt.py", "nidlist.py"],
                        "the lst console and tool: not per message; mixin classes"),
    },
}

#: compiled package -> the only modules of it compiled, for a package whose per-message code
#: is a few modules beside many that are not (the simulator's fabric, the node driver); its
#: other modules are to the compiled code what another package's are: called through Python's
#: API, what they return checked at run time (so the digest need not cover them)
COMPILED_ONLY: dict[str, tuple[str, ...]] = {
    # the node driver (the node daemon's and the simulator's): once per batch of actions,
    # with its LND timeouts (``lndtimeouts.py``: after a batch that moved their tunables);
    # the recorder it calls once per message (payload bytes) and per batch (``maybe_sample``)
    "nodes": ("driver.py", "lndtimeouts.py", "recorder.py"),
    # the node daemon's runtime: the socklnd's and the loop timer's callbacks into the driver
    # (several per message: interpreted, ~5 % of a busy lst brw daemon, issue 13)
    "nodes.daemon": ("runtime.py",),
    # the simulator's per-message Python: the clock, the wire, path decisions, faults
    "testbed.sim": ("conns.py", "fabric.py", "links.py", "netfaults.py", "paths.py", "sched.py",
                    "simdriver.py", "simfabric.py"),
}

#: the directory holding ``nodes/`` (the repository, or site-packages)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_digests: dict[str, str] = {}
_warned = False


def package_dir(package: str, root: str = ROOT) -> str:
    return os.path.join(root, *package.split("."))


def packages() -> list[str]:
    """Every package with compiled modules (``COMPILED``'s and ``COMPILED_ONLY``'s)."""
    return sorted({*COMPILED, *COMPILED_ONLY})


def compiled_modules(package: str, root: str = ROOT) -> list[str]:
    """The file names of ``package``'s compiled modules."""
    if package in COMPILED_ONLY:
        return sorted(COMPILED_ONLY[package])
    python = COMPILED[package]
    return sorted(n for n in os.listdir(package_dir(package, root))
                  if n.endswith(".py") and n not in python)


def compiled_sources(root: str = ROOT) -> list[str]:
    """The modules compiled, as paths relative to ``root`` (what mypyc is given)."""
    return [os.path.relpath(os.path.join(package_dir(p, root), n), root)
            for p in packages() for n in compiled_modules(p, root)]


def _digested(package: str, root: str) -> list[str]:
    """The modules of ``package`` the digest covers: ``COMPILED``'s all but ``__init__.py``
    (those left as Python included: compiled code reads their types), ``COMPILED_ONLY``'s
    the compiled ones."""
    if package in COMPILED_ONLY:
        return sorted(COMPILED_ONLY[package])
    return sorted(n for n in os.listdir(package_dir(package, root))
                  if n.endswith(".py") and n != "__init__.py")


def digested_sources(root: str = ROOT) -> list[str]:
    """What ``source_digest`` covers, as paths relative to ``root``: the modules whose edit
    sends the compiled ones back to Python (and ``make native``'s prerequisites)."""
    return [os.path.relpath(os.path.join(package_dir(p, root), n), root)
            for p in packages() for n in _digested(p, root)]


def source_digest(root: str = ROOT) -> str:
    """SHA-256 of the names and contents of the compiled packages' modules (``_digested``)."""
    if root in _digests:
        return _digests[root]
    h = hashlib.sha256()
    for package in packages():
        d = package_dir(package, root)
        for name in _digested(package, root):
            with open(os.path.join(d, name), "rb") as f:
                h.update(f"{package}.{name}".encode() + b"\0" + f.read() + b"\0")
    _digests[root] = digest = h.hexdigest()
    return digest


def built_for_sources(package: str, root: str = ROOT) -> bool:
    """The package's ``_native/SOURCES`` records the digest of the sources here."""
    try:
        with open(os.path.join(package_dir(package, root), NATIVE_DIR, "SOURCES")) as f:
            return f.read().strip() == source_digest(root)
    except OSError:
        return False


def use_native(path: list[str], package: str) -> bool:
    """Put the package's compiled modules first on its ``path`` when they match the sources
    (module doc); called by each compiled package's ``__init__.py`` with its ``__path__``."""
    global _warned
    if os.environ.get(PURE_ENV) or not path or package not in packages():
        return False
    native = os.path.join(path[0], NATIVE_DIR)
    if not os.path.isfile(os.path.join(native, "SOURCES")):
        return False  # never built (no C compiler at install): silently the sources
    root = os.path.dirname(path[0])
    for _ in range(package.count(".")):
        root = os.path.dirname(root)
    if not built_for_sources(package, root):
        if not _warned:
            _warned = True
            sys.stderr.write(f"{package}: the compiled modules are older than their sources "
                             "(edited since the build); running the sources: `make native` "
                             "rebuilds\n")
        return False
    path.insert(0, native)
    return True



if __name__ == "__main__":  # the Makefile: `make native` rebuilds when one of these changed
    print(" ".join(digested_sources()))
