"""Topology plans: YAML with line numbers -> validated, frozen ``Plan`` -> node configuration verbs.

Modules: ``yamlload`` (a SafeLoader keeping lines, the validation helpers), ``schema`` (key
tables, tunables, ``global:`` and ``networks:``), ``nodes`` (the ``nodes:`` section),
``load`` (``parse_topology``/``load_topology``), ``source`` (built-in topologies by name,
the bounded read, the YAML alias budget), ``model`` (the plan dataclasses and
``TopologyError``), ``verbs`` (the lnetctl verbs that configure one node, on every backend).
Nothing here touches a namespace or needs root.
"""

from testbed.plan.load import load_topology, parse_topology
from testbed.plan.model import (
    NAME_RE,
    RESERVED_NAMES,
    IfacePlan,
    NodePlan,
    PeerPlan,
    Plan,
    RoutePlan,
    SegmentPlan,
    TopologyError,
)
from testbed.plan.schema import MAX_NODES, TUNABLES
from testbed.plan.source import builtin_names, builtin_topology, default_topology
from testbed.plan.verbs import ImportFile, Step, config_steps, config_verbs, request

#: ``topologies/default.yaml`` (installed: the ``testbed.topologies`` package's copy)
DEFAULT_TOPOLOGY = default_topology()

__all__ = ["DEFAULT_TOPOLOGY", "MAX_NODES", "NAME_RE", "RESERVED_NAMES", "TUNABLES",
           "IfacePlan", "ImportFile", "NodePlan", "PeerPlan", "Plan", "RoutePlan",
           "SegmentPlan", "Step",
           "TopologyError", "builtin_names", "builtin_topology", "config_steps",
           "config_verbs", "default_topology", "load_topology", "parse_topology", "request"]
