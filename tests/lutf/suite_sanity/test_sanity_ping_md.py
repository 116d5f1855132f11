"""sanity-lnet.sh test 270: ping NID metadata under fail_loc CFS_FAIL_TEST_PING_MD, at
lustre-release c881f8ebcb. ``lctl set_param fail_loc=0x1000e003 fail_val=100`` (CFS_FAIL_SOME:
the next 100 checks hit) before the first NI is added; ``lnetctl ping`` of the node's own NID
then fetches the NID metadata first and logs "found metadata reply" on the console (api-ni.c
``lnet_discover_nid_metadata``, ``lnet_dump_nid_metadata``; docs/sanity-lnet.md E11, E12).
``cleanup_lnet`` around the test (the modules unloaded, so fail_loc back to 0) is
``lnet unconfigure`` and ``set_param fail_loc=0`` here. Nodes: ``single.yaml``."""

from __future__ import annotations

from typing import Any

import pytest

from lutf.suite_sanity.sanity import reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


def test_sanity_270_nid_metadata(module_topology: Any) -> None:
    s = module_topology.node("s")
    run(s, "lnet unconfigure")
    reinit(s)
    try:
        res = s.lctl("set_param fail_loc=0x1000e003 fail_val=100")
        assert res.rc == 0, res
        run(s, "net add --net tcp --if eth0")
        nid = s.lctl("list_nids").out.split()[0]
        assert "found metadata reply" not in s.log()
        run(s, f"ping {nid}")
        assert f"found metadata reply NI[{nid}]" in s.log()
    finally:
        s.lctl("set_param fail_loc=0")
        run(s, "lnet unconfigure")
