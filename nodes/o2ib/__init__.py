"""o2iblnd emulation (issue 28): the kib_msg codec, a sans-I/O emulated verbs layer and the
LND on it, run for the NIs of ``o2ib`` nets (docs/o2ib.md).

Compiled with mypyc with the engine where a C compiler was at install (``nodes/native.py``;
``o2ibio.py`` stays Python): ``nodes.native.use_native`` puts this package's ``_native/``
first on its path while the compiled modules match the sources.
"""

from __future__ import annotations

from nodes.native import use_native

#: True when ``nodes.o2ib.X`` imports the compiled modules
NATIVE = use_native(__path__, __name__)
if NATIVE:
    # the module that imports all the others first, so each class is defined before a
    # compiled dataclass names it as a field's type (mypyc issue 1209: nodes/lnet/__init__.py)
    import nodes.o2ib.o2iblnd  # noqa: F401
