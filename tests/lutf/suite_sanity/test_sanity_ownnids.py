"""sanity-lnet.sh tests 215 and 475: traffic to the node's own NIDs goes through the LND, as
real LNet short-cuts only ``0@lo`` (lib-move.c ``lnet_select_pathway``, docs/sanity-lnet.md
E1/E2): ``ping --source`` moves the statistics of the right NI, and a ping of one's own NID
fills the get_rtt latency statistics of the local NI and of the self peer NI, which ``stats
reset`` clears. Re-expressed on node ``s`` at lustre-release c881f8ebcb."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import fails, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


def _nids(s: Any) -> list[str]:
    return s.lctl("list_nids").out.split()


def _ni_stats(s: Any, nids: list[str]) -> dict[str, tuple[int, int]]:
    """``get_ni_stat NID send_count|recv_count`` for each NID."""
    out = {}
    for net in yaml.safe_load(s.lnetctl("net show -v").out)["net"]:
        for ni in net["local NI(s)"]:
            if ni["nid"] in nids:
                st = ni["statistics"]
                out[ni["nid"]] = (st["send_count"], st["recv_count"])
    return out


def _changed(pre: dict[str, tuple[int, int]], post: dict[str, tuple[int, int]],
             nid: str) -> tuple[bool, bool]:
    """``ni_stat_changed`` for send_count and recv_count."""
    return pre[nid][0] != post[nid][0], pre[nid][1] != post[nid][1]


def test_sanity_215_lnetctl_ping_source_option(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp1 --if eth0")
    run(s, "net add --net tcp2 --if eth0")
    nids = _nids(s)
    nid1, nid2 = nids
    run(s, f"peer add --prim {nid1} --nid {nid2}")
    npings = 25
    for src in (nid1, nid2):
        dst = src
        pre = _ni_stats(s, nids)
        for _ in range(npings):
            run(s, f"ping {dst}")
        post = _ni_stats(s, nids)
        # no source: sends to either NID move the counts of both NIs (the MR self peer)
        for nid in nids:
            assert _changed(pre, post, nid) == (True, True), (nid, pre, post)
        pre = _ni_stats(s, nids)
        for _ in range(npings):
            run(s, f"ping --source {src} {dst}")
        post = _ni_stats(s, nids)
        # src == dst: only that NI's counts move
        for nid in nids:
            want = nid == src
            assert _changed(pre, post, nid) == (want, want), (nid, src, pre, post)
        npings *= 2
    fails(s, f"ping --source {nid1} {nid2}")
    fails(s, f"ping --source {nid2} {nid1}")


def _lat_sum(doc_text: str, key: str) -> int:
    """``sum_lat_field``: the sum of every ``KEY: N`` line of lnetctl's output."""
    total = 0
    for line in doc_text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == f"{key}:":
            total += int(parts[1])
    return total


def test_sanity_475_per_operation_latency_stats_populate_and_reset(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    nid = _nids(s)[0]
    run(s, "stats reset")
    for _ in range(10):
        run(s, f"ping {nid}")
    out = s.lnetctl(f"peer show -v 4 --nid {nid}").out
    assert _lat_sum(out, "get_rtt_samples") > 0, out
    assert _lat_sum(out, "get_rtt_max_nsec") > 0, out
    out = s.lnetctl("net show -v 4").out
    assert _lat_sum(out, "get_rtt_samples") > 0, out
    run(s, "stats reset")
    assert _lat_sum(s.lnetctl(f"peer show -v 4 --nid {nid}").out, "get_rtt_samples") == 0
    assert _lat_sum(s.lnetctl("net show -v 4").out, "get_rtt_samples") == 0


def test_sanity_232_setting_tos_value(s: Any) -> None:
    """The socklnd ``tos`` module parameter's default (-1, socklnd_modparams.c) is the NI's
    when ``--tos`` is not given (E6: the NI keeps its ToS)."""
    reinit(s)
    net = "tcp232"
    for tos in (None, -1, 104, 106):
        opt = "" if tos is None else f" --tos {tos}"
        run(s, f"net add --net {net} --if eth0{opt}")
        out = s.lnetctl(f"net show --net {net} -v 1").out
        assert f"tos: {-1 if tos is None else tos}" in out, out
        run(s, f"net del --net {net} --if eth0")
    fails(s, f"net add --net {net} --if eth0 --tos 300")
