"""lnet_selftest: srpc, the test framework, the brw/ping tests and the lst console (issue 13).

A sans-I/O layer above the engine on every node, as the ``lnet_selftest`` module is above
LNet (lnet/selftest/): ``node.Selftest`` is fed the events of its own MDs and the time and
returns engine actions; ``attach`` puts one on a node driver (``nodes/driver.py``), so the
node daemon and the simulator both serve selftest. The ``lst`` tool's side is ``lstcli``.
"""

from nodes.selftest.node import Selftest, attach

__all__ = ["Selftest", "attach"]
