"""Two o2ib nets on one ``ib*`` interface (issue 28): ko2iblnd listens once per IB device
(``kiblnd_dev_start``: one cm_id on the device's address, port 987) and
``kiblnd_passive_connect`` finds the NI by the CONNREQ's destination NID, so ``o2ib1`` added
on ``ib0`` next to ``o2ib`` takes its own connections on the same port; traffic on both nets
completes, and deleting one net leaves the other's connections working (the listener
outliving one of its NIs: tests/unit/test_o2ibio.py)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.topology("o2ib_tun.yaml")]

S1, S1B = "10.53.0.2@o2ib", "10.53.0.2@o2ib1"


def test_two_o2ib_nets_share_one_ib_interface(topology: Any) -> None:
    c1, s1 = topology.node("c1"), topology.node("s1")
    for n in (c1, s1):
        res = n.lnetctl("net add --net o2ib1 --if ib0")
        assert res.rc == 0, res
    nis = {ni["nid"] for net in c1.lnetctl_yaml("net show")["net"]
           for ni in net["local NI(s)"]}
    assert {"10.53.0.1@o2ib", "10.53.0.1@o2ib1"} <= nis
    assert c1.put(S1B, count=16, size=1 << 20)["completed"] == 16
    assert c1.put(S1, count=16, size=8)["completed"] == 16
    ni = s1.lnetctl_yaml("net show -v --net o2ib1")["net"][0]["local NI(s)"][0]
    assert ni["statistics"]["recv_count"] >= 16
    assert s1.lnetctl("net del --net o2ib").rc == 0  # o2ib1 keeps the address's listener
    assert c1.put(S1B, count=8, size=8)["completed"] == 8
    assert c1.lnetctl("net del --net o2ib1").rc == 0
    assert c1.lnetctl("net add --net o2ib1 --if ib0").rc == 0
    assert c1.put(S1B, count=8, size=8)["completed"] == 8  # a new connection, accepted
