"""The registry of backends: one place that maps a backend's name to its classes and to what
it can do (issue 29 item 3).

Theory of operation: ``testbed.up``/``testbed.attach``, the CLI (``testbed up``, ``clock``,
``lst``) and the pytest plugin and fixtures (``--lnet-backend``) look a backend up here and
ask its :class:`Backend` record, instead of comparing its name in ``if``/``elif`` chains
(``tests/unit/test_layout_backend.py`` holds them to it). A record names its classes as
``module:Class`` text, imported only when used: ``import testbed`` loads neither Mininet nor
ZeroMQ. Capabilities are facts a caller branches on:

* ``in_process``: ``up`` without ``detach`` runs the testbed in the calling process (sim's
  ``SimTestbed``); ``detached`` names the client of the long-lived form (``SimClient``);
* ``virtual_time``: a clock that moves only when asked or paced (``--seed``, ``--speed``,
  ``clock advance``, ``testbed sim``'s scripts);
* ``needs_root``: bring-up makes namespaces on this machine (tests skip without root and
  Mininet);
* ``remote``: nodes off this machine (guests, SSH hosts): a test that needs a namespace here
  is skipped, a node's ``exec`` goes over SSH;
* ``providers``: what ``--provider`` may name (only vagrant has any);
* ``local_netns``: a node is a network namespace on this machine whose daemon's socket is
  reachable here (``testbed lst`` runs the real ``lst`` inside it);
* ``cli_up``: ``testbed up``'s own form for the backend (vagrant/hosts print hosts and
  endpoints); ``oneshot``: ``testbed sim``'s topology-and-script run in this process.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from testbed.base import TestbedError


@dataclass(frozen=True)
class Backend:
    """One backend: its classes (``module:Class``) and what it can do (module docstring)."""

    name: str
    about: str
    client: str  # the process-backed client: ``up`` (detached) and ``attach``
    in_process: str | None = None  # the in-process testbed, if there is one
    virtual_time: bool = False
    needs_root: bool = False
    remote: bool = False
    providers: tuple[str, ...] = ()
    local_netns: bool = False  # a node is a network namespace here (``lst``, ``exec`` enter it)
    pass_name: bool = False  # ``up`` gets ``backend=name`` (one client for two backends)
    cli_up: str | None = None  # ``testbed up``'s own form (``module:function``), if any
    oneshot: str | None = None  # ``testbed sim``: a topology and a script in this process

    def client_class(self) -> Any:
        return load(self.client)

    def up(self, topology: Any, **kw: Any) -> Any:
        """Bring ``topology`` up on this backend (``testbed.up``'s keywords)."""
        detach = kw.pop("detach", False)
        if self.pass_name:
            kw["backend"] = self.name
        if self.in_process is not None and not detach:
            return load(self.in_process).up(topology, **kw)
        return self.client_class().up(topology, **kw)

    def attach(self, name: str, rdir: Any, root: Any) -> Any:
        """The client of a running testbed of this backend."""
        return self.client_class()(name, rdir, root)


def load(path: str) -> Any:
    """What ``module:attr`` names, its module imported now."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


REGISTRY: dict[str, Backend] = {b.name: b for b in (
    Backend("mininet", "Mininet namespaces on this machine, one daemon per node (default)",
            "testbed.mininet:MininetTestbed", needs_root=True, local_netns=True),
    Backend("sim", "every engine in one process on a virtual clock, deterministic",
            "testbed.sim.client:SimClient", in_process="testbed.sim:SimTestbed",
            virtual_time=True, oneshot="testbed.sim.script:oneshot"),
    Backend("vagrant", "nodes in Vagrant guests (LXC containers or libvirt VMs)",
            "testbed.vagrant.client:VagrantTestbed", remote=True,
            providers=("lxc", "libvirt"), pass_name=True, cli_up="testbed.vagrant.cli:cmd_up"),
    Backend("hosts", "nodes on this machine and machines reached over SSH",
            "testbed.vagrant.client:VagrantTestbed", remote=True, pass_name=True,
            cli_up="testbed.vagrant.cli:cmd_up"),
)}
#: the names, in the order help texts list them
NAMES = tuple(REGISTRY)
#: the backend of a testbed whose state file names none (before backends were recorded)
DEFAULT = "mininet"


def of(name: object) -> Backend:
    """The backend a state file or a client names; one that names none or an unknown one is
    taken as the default (testbeds from before backends were recorded)."""
    return REGISTRY.get(name, REGISTRY[DEFAULT]) if isinstance(name, str) else REGISTRY[DEFAULT]


def get(name: object) -> Backend:
    """The backend called ``name``.

    Raises:
        TestbedError: no such backend (one line, naming the known ones).
    """
    backend = REGISTRY.get(name) if isinstance(name, str) else None
    if backend is None:
        raise TestbedError(f"unknown backend {name!r} (choose one of: {', '.join(NAMES)})")
    return backend
