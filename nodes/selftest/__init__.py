"""lnet_selftest: srpc, the test framework, the brw/ping tests and the lst console (issue 13).

A sans-I/O layer above the engine on every node, as the ``lnet_selftest`` module is above
LNet (lnet/selftest/): ``node.Selftest`` is fed the events of its own MDs and the time and
returns engine actions; ``attach`` puts one on a node driver (``nodes/driver.py``), so the
node daemon and the simulator both serve selftest. The ``lst`` tool's side is ``lstcli``.
Compiled with mypyc with the engine where a C compiler was at install (``nodes/native.py``);
this module stays Python.
"""

from nodes.native import use_native

#: True when ``nodes.selftest.X`` imports the compiled modules (``nodes/lnd/__init__.py``)
NATIVE = use_native(__path__, __name__)

from nodes.selftest.node import Selftest, attach  # noqa: E402  (after the path is set)

__all__ = ["NATIVE", "Selftest", "attach"]
