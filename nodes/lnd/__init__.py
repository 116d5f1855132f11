"""The socklnd (``lnet/klnds/socklnd/``): frames, connections and their sockets.

Compiled with mypyc with the engine where a C compiler was at install (``nodes/native.py``):
``nodes.native.use_native`` puts this package's ``_native/`` first on its path while the
compiled modules match the sources. This module stays Python.
"""

from __future__ import annotations

from nodes.native import use_native

#: True when ``nodes.lnd.X`` imports the compiled modules
NATIVE = use_native(__path__, __name__)
if NATIVE:
    # the module that imports all the others first, so each class is defined before a
    # compiled dataclass names it as a field's type (mypyc issue 1209: nodes/lnet/__init__.py)
    import nodes.lnd.socklnd  # noqa: F401
