"""A node's kernel modules reloaded with new parameters (sanity-lnet ``load_lnet OPTS``).

Theory of operation: real LNet reads its module parameters when the module loads; sanity-lnet
reloads the modules (``cleanup_lnet`` + ``load_lnet "networks=... routes=..."``) to change
them. Here a node's "modules" are its daemon: ``reload_modules(node, {"lnet": {...}})`` on a
backend is ``lnetctl lnet unconfigure`` on the node, then the daemon restarted (a new
incarnation) with the new parameters on its command line and LNet left unconfigured, as after
``modprobe lnet`` without ``config_on_load``; the test then runs ``lnet configure [--all]`` or
``lctl net up``. ``reloaded_plan`` is the node's plan with the parameters replaced, module by
module: ``MODULE_FIELDS`` names the plan field each module's parameters live in (``lnet``:
``module_params``, the daemon's ``--lnet-param``); a module not named there is refused in one
line. A module left out of ``modules`` keeps the topology's parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from testbed.base import TestbedError
from testbed.plan import NodePlan

#: module -> the NodePlan field holding its parameters as ((name, value), ...)
MODULE_FIELDS: dict[str, str] = {"lnet": "module_params"}


def reloaded_plan(plan: NodePlan, modules: Mapping[str, Any]) -> NodePlan:
    """``plan`` with each module's parameters replaced by ``modules[module]`` (name -> value).

    Raises:
        TestbedError: an unknown module, or parameters that are not a name -> value mapping.
    """
    changes: dict[str, tuple[tuple[str, str], ...]] = {}
    for module, params in modules.items():
        field = MODULE_FIELDS.get(module)
        if field is None:
            raise TestbedError(f"reload: no parameters of module {module!r} are supported "
                               f"(modules: {', '.join(MODULE_FIELDS)})")
        if not isinstance(params, Mapping) or not all(
                isinstance(k, str) and isinstance(v, (str, int)) for k, v in params.items()):
            raise TestbedError(f"reload: parameters of module {module} must map names to "
                               "strings")
        changes[field] = tuple((k, str(v)) for k, v in params.items())
    return dataclasses.replace(plan, **changes)
