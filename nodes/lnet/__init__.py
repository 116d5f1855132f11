"""The sans-I/O LNet engine; compiled or pure Python, chosen here at import.

The install compiles the engine's modules with mypyc where it can (``setup.py``) into
``_native/`` in this package, with the SHA-256 of the sources they were built from
(``source_digest``) in ``_native/SOURCES``. That directory goes first on this package's path,
so ``nodes.lnet.X`` is the compiled module, only while the digest matches the sources beside
it: an edited source is never shadowed by the compiled code of an older one (it runs as
Python, with one line on stderr saying so, until ``make native`` rebuilds). Never built (no
C compiler at install), or ``LNET_TESTBED_PURE_PYTHON=1`` in the environment: the sources
run. ``NATIVE`` says which. This module stays Python (setup.py does not compile it).
"""

from __future__ import annotations

import hashlib
import os
import sys

#: set to anything non-empty: run the sources even when compiled modules are up to date
PURE_ENV = "LNET_TESTBED_PURE_PYTHON"
_NATIVE_DIR = "_native"


def source_digest(directory: str) -> str:
    """SHA-256 of the names and contents of the package's modules but ``__init__.py``."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py") and name != "__init__.py":
            with open(os.path.join(directory, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def _use_native(path: list[str]) -> bool:
    """Put the compiled modules first on ``path`` when they match the sources (module doc)."""
    if os.environ.get(PURE_ENV) or not path:
        return False
    native = os.path.join(path[0], _NATIVE_DIR)
    try:
        with open(os.path.join(native, "SOURCES")) as f:
            built = f.read().strip()
    except OSError:
        return False
    if built != source_digest(path[0]):
        sys.stderr.write(f"{__name__}: the compiled engine is older than its sources (edited "
                         "since the build); running the sources: `make native` rebuilds\n")
        return False
    path.insert(0, native)
    return True


#: True when ``nodes.lnet.X`` imports the compiled modules
NATIVE = _use_native(__path__)
if NATIVE:
    # the engine first, which imports every module in an order that defines each class
    # before a compiled dataclass names it as a field's type: importing some modules alone
    # (``msg``: ``Forwarding.rxni: LNetNI``, imported only for type checking) would crash
    # (mypyc issue 1209, open); tests/unit/test_native.py imports each one alone
    import nodes.lnet.engine  # noqa: F401
