"""The Mininet backend: one network namespace and one node daemon per node, real sockets.

``client`` (``MininetTestbed``/``MininetNode``, what the CLI and tests hold), ``supervisor``
(the per-testbed process that builds the network with Mininet, starts and configures the
daemons and serves ``ctl.sock``), ``netbuild`` (bridges, hosts, veths), ``faultctl`` and
``faultres`` (faults on the wire, owned by the supervisor).
"""

from testbed.mininet.client import MininetNode, MininetTestbed

__all__ = ["MininetNode", "MininetTestbed"]
