"""The sans-I/O LNet engine; compiled or pure Python, chosen here at import.

The install compiles the engine's modules with mypyc where it can (``setup.py``, with the
other packages ``nodes/native.py`` lists) into ``_native/`` in this package. ``nodes.native``
puts that directory first on this package's path, so ``nodes.lnet.X`` is the compiled module,
only while the sources are the ones it was built from: an edited source is never shadowed by
the compiled code of an older one. ``NATIVE`` says which runs. This module stays Python.
"""

from __future__ import annotations

from nodes.native import PURE_ENV, source_digest, use_native

__all__ = ["NATIVE", "PURE_ENV", "source_digest"]

#: True when ``nodes.lnet.X`` imports the compiled modules
NATIVE = use_native(__path__, __name__)
if NATIVE:
    # the engine first, which imports every module in an order that defines each class
    # before a compiled dataclass names it as a field's type: importing some modules alone
    # (``msg``: ``Forwarding.rxni: LNetNI``, imported only for type checking) would crash
    # (mypyc issue 1209, open); tests/unit/test_native.py imports each one alone
    import nodes.lnet.engine  # noqa: F401
