"""sanity-lnet.sh test 305: ``lnetctl ping host@tcp`` resolves the host name first
(liblnetconfig ``lustre_lnet_parse_nid_range`` -> ``libcfs_strnid`` ->
``libcfs_ip_str2addr_size``: ``getaddrinfo`` for an address starting with a letter), at
lustre-release c881f8ebcb. ``hostname -s`` is the node's name and ``hostname -i`` its first
interface's address: the testbed's hosts view (``nodes/daemon/etchosts.py``) lists each node so,
and nothing else (the machine's resolver is never asked)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import fails, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


def test_sanity_305_resolve_hostname_before_lnetctl_ping(s: Any) -> None:
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    nid = s.lctl("list_nids").out.split()[0]
    run(s, f"ping {nid}")  # pinging self
    assert nid == "10.60.0.1@tcp"  # `hostname -i` is the NID's address: no skip
    res = run(s, "ping s@tcp")  # pinging own hostname
    reply = yaml.safe_load(res.out)["ping"][0]
    assert reply["primary nid"] == nid
    assert [n["nid"] for n in reply["peer_ni"]] == [nid]
    # a name the hosts view lacks is not an address: libcfs_strnid fails
    res = fails(s, "ping nosuchnode@tcp")
    assert 'descr: "Unable to parse nidlist: invalid NID in nidstr"' in res.err
