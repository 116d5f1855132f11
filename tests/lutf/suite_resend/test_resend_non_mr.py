"""Resends to a non-Multi-Rail peer leave from the same local NI (seed 003
hlth-lnt-non-mr-same-ni; spec §2.2 NMR cases, §3.3).

``nonmr.yaml``: c1 is Multi-Rail with two NIs on net tcp (10.10.0.1 on lan0, 10.11.0.1 on
lan1); s2 is a downrev node (``multi_rail: false``) with one NI, 10.10.0.2, on lan0. c1 has no
static peer entry for s2: ``peer add`` without ``--non_mr`` would make s2 a DLC-configured
Multi-Rail peer, which real LNet keeps ("DLC says ... is Multi-Rail, Reply says not"), so c1
learns s2 from traffic and discovery (no MULTI_RAIL bit in its ping reply: non-MR). s2 gets a
route to lan1's subnet through its only interface, so both of c1's NIs can reach it. On
``--lnet-backend=sim`` (no namespaces, no ``ip route``) the fabric delivers c1's sends from
either NI (the sending host routes), s2's answers only to lan0: the warm-up fails loudly should
c1 ever prefer its lan1 NI there; the timed-out PUTs themselves never reach the wire (c1's
LNet drop rule), so which NI each attempt leaves from is the engine's choice alone.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.lnet_views import local_nis, ok, stats

pytestmark = [pytest.mark.mininet, pytest.mark.topology("nonmr.yaml")]

S2 = "10.10.0.2@tcp"
C1_NIDS = ("10.10.0.1@tcp", "10.11.0.1@tcp")
RETRY_COUNT = 2  # nonmr.yaml


def _preferred(c1: Any) -> list[str]:
    (peer,) = yaml.safe_load(ok(c1, "lnetctl", "peer show -v 4"))["peer"]
    assert peer["Multi-Rail"] is False, peer
    (lpni,) = peer["peer ni"]
    return list(lpni["udsp info"].get("Preferred source NIDs", {}).values())


@pytest.mark.requirement("hlth-lnt-non-mr-same-ni", "hlth-tst-lutf")
def test_timed_out_sends_to_a_non_mr_peer_are_resent_from_the_same_ni(topology: Any) -> None:
    """Real LNet (``lnet_set_non_mr_pref_nid`` / ``lnet_find_existing_preferred_best_ni``): a
    non-MR peer is always sent to from the local NI it was first used with, resends too
    (spec §3.3 reselects, and the NMR case reuses the preferred NI). A LOCAL_TIMEOUT on every
    PUT to s2 (LNet's health-error simulation, spec §8.2) lowers that NI's health, which
    would send an MR peer's resend to c1's other NI (test_resend.py); here all 1+retry_count
    attempts of each PUT leave from the preferred NI and the other NI sends nothing."""
    c1, s2 = topology.node("c1"), topology.node("s2")
    if topology.status().get("backend") != "sim":
        res = s2.exec(["ip", "route", "add", "10.11.0.0/24", "dev", "eth0"])
        assert res.rc == 0, res.err
    assert c1.put(S2, count=4, size=0)["completed"] == 4, "warm-up"
    (pref,) = _preferred(c1)
    other = next(n for n in C1_NIDS if n != pref)
    ok(c1, "lnetctl", "stats reset")
    before = local_nis(c1)
    ok(c1, "lctl", f"net_drop_add -s * -d {S2} -r 1 -m put -e local_timeout")
    reply = c1.put(S2, count=2, size=0)
    assert reply["failed"] == 2, reply
    after = local_nis(c1)
    attempts = 2 * (1 + RETRY_COUNT)
    st = stats(c1)
    assert st["local_timeout_count"] == attempts and st["resend_count"] == 2 * RETRY_COUNT, st
    timeouts = {n: after[n]["health stats"]["timeouts"] - before[n]["health stats"]["timeouts"]
                for n in C1_NIDS}
    assert timeouts == {pref: attempts, other: 0}, timeouts
    assert after[pref]["health stats"]["health value"] < 1000
    assert after[other]["statistics"]["send_count"] == before[other]["statistics"]["send_count"]
    assert _preferred(c1) == [pref]
