"""lnet-testbed's orchestrator: bring emulated LNet clusters up on a backend and drive them.

    import testbed
    tb = testbed.up("topologies/routed.yaml", backend="sim", seed=1)   # or backend="mininet"
    tb.node("c1").ping("10.12.0.2@tcp1"); tb.link("c1", "eth0", "down"); tb.down()
    tb = testbed.attach("demo")        # a testbed some other process brought up

Every backend satisfies the ``Testbed``/``NodeHandle`` protocols of ``testbed.base``.
Subpackages: ``plan`` (topology YAML -> plan -> node configuration verbs), ``mininet``
(client, supervisor, faults on the wire), ``sim`` (the in-memory fabric, the simulated node
runtime, the in-process testbed, the long-lived sim server and its client), ``pytest`` (the
plugin, fixtures, reports, traceability), ``commands`` (the CLI's subcommands, ``testbed.cli``
parses). Shared helpers: ``sh``, ``runstate``, ``names``, ``clean``, ``spawn``, ``ctlclient``.
Backends are imported only when used: ``import testbed`` loads neither Mininet nor ZeroMQ.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from testbed import backends
from testbed.backends import NAMES as BACKENDS  # the registry's (vagrant, hosts: testbed.vagrant)
from testbed.base import FaultAPI, NodeHandle, Testbed, TestbedError

__all__ = ["BACKENDS", "FaultAPI", "NodeHandle", "Testbed", "TestbedError", "attach", "up"]



def up(topology: str | os.PathLike[str] | None = None, backend: str = "mininet",
       **kw: Any) -> Testbed:
    """Bring ``topology`` (None: topologies/default.yaml) up on ``backend``.

    ``mininet``: ``testbed.mininet.MininetTestbed.up(topology, name=, progress=, root=)``.
    ``sim``: in this process (``testbed.sim.SimTestbed.up(topology, name=, seed=, latency=,
    jitter=)``, virtual time moves only when asked: deterministic), or with ``detach=True``
    as a server process other processes ``attach`` to (``testbed.sim.client.SimClient.up(
    topology, name=, seed=, speed=, root=, progress=)``, what ``testbed up --backend sim``
    runs).

    Raises:
        TopologyError: the topology is invalid (nothing was started).
        TestbedError: unknown backend, or bring-up failed (everything started was removed).
    """
    return backends.get(backend).up(topology, **kw)


def attach(name: str, *, root: str | Path | None = None) -> Testbed:
    """The running testbed ``name``, whichever backend carries it (its state file says).

    Raises:
        TestbedError: no such testbed is up.
    """
    from testbed import runstate
    from testbed.base import check_name

    base = runstate.runroot(root)
    rdir = runstate.rundir(check_name(name), base)
    problem = runstate.access_problem(base) or runstate.access_problem(rdir)
    if problem is not None:  # another user's: not "no such testbed" (issue 18)
        raise TestbedError(f"testbed {name}: {problem}")
    if not rdir.exists():
        raise TestbedError(f"no testbed named {name} is up")
    backend = runstate.read_state(rdir).get("backend") or backends.DEFAULT
    return backends.get(backend).attach(name, rdir, base)
