"""sanity-lnet.sh tests 400, 402, 403, 410: ``lnetctl udsp`` and ``fault`` command handling,
at lustre-release c881f8ebcb."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import fails, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


def test_sanity_400_udsp_add_delete_net_rule_without_net_num(s: Any) -> None:
    reinit(s)
    run(s, "udsp add --src tcp --priority 0")
    run(s, "udsp del --idx 0")


def test_sanity_402_destination_net_rule_does_not_panic(s: Any) -> None:
    reinit(s)
    run(s, "udsp add --dst kfi --priority 0")
    run(s, "peer add --prim 402@kfi")


def test_sanity_403_add_and_delete_udsp_net_and_nid_rules(s: Any) -> None:
    for rule_type in ("src", "dst"):
        reinit(s)
        for arg in ("tcp", "1.1.1.1@tcp"):
            run(s, f"udsp add --{rule_type} {arg} --prio 1")
            assert yaml.safe_load(s.lnetctl("udsp show").out) == {
                "udsp": [{"idx": 0, rule_type: arg, "action": {"priority": 1}}]}
            run(s, "udsp del --idx 0")
            assert s.lnetctl("udsp show").out == ""


def test_sanity_410_no_segfault_in_lnetctl_fault(s: Any) -> None:
    reinit(s)
    fails(s, "fault reset ''")
