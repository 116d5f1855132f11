"""Topology plans: YAML with line numbers -> validated, frozen ``Plan`` -> node configuration verbs.

Modules: ``yamlload`` (a SafeLoader keeping lines, the validation helpers), ``schema`` (key
tables, tunables, ``global:`` and ``networks:``), ``nodes`` (the ``nodes:`` section),
``load`` (``parse_topology``/``load_topology``), ``model`` (the plan dataclasses and
``TopologyError``), ``verbs`` (the lnetctl verbs that configure one node, on every backend).
Nothing here touches a namespace or needs root.
"""

from testbed.plan.load import load_topology, parse_topology
from testbed.plan.model import (
    NAME_RE,
    IfacePlan,
    NodePlan,
    PeerPlan,
    Plan,
    RoutePlan,
    SegmentPlan,
    TopologyError,
)
from testbed.plan.schema import DEFAULT_TOPOLOGY, TUNABLES
from testbed.plan.verbs import Step, config_steps, config_verbs, request

__all__ = ["DEFAULT_TOPOLOGY", "NAME_RE", "TUNABLES", "IfacePlan", "NodePlan", "PeerPlan",
           "Plan", "RoutePlan", "SegmentPlan", "Step", "TopologyError", "config_steps",
           "config_verbs", "load_topology", "parse_topology", "request"]
