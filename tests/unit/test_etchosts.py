"""nodes/daemon/etchosts and host-name NIDs in nidlist.expand_nids (libcfs_strnid's
getaddrinfo, AF_INET, against the testbed's hosts view)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.daemon import etchosts
from nodes.dlc.nidlist import NidListError, expand_nids

TEXT = ("# comment\n2001:db8::5\toss1\n10.0.0.5\toss1.lab oss1 # primary\n"
        "10.0.0.6\tmds1\n")


@pytest.mark.parametrize(("name", "ip"), [("oss1", "10.0.0.5"), ("OSS1.lab", "10.0.0.5"),
                                          ("mds1", "10.0.0.6"), ("primary", None),
                                          ("nosuch", None)])
def test_lookup_takes_the_first_ipv4_line_naming_the_host(name: str, ip: str | None) -> None:
    assert etchosts.lookup_text(TEXT, name) == ip


def test_hosts_file_round_trip_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / etchosts.FILE
    path.write_text(etchosts.hosts_text([("s", "10.60.0.1"), ("o", "10.60.0.2")]))
    assert etchosts.lookup_file(path, "o") == "10.60.0.2"
    assert etchosts.lookup_file(tmp_path / "absent", "o") is None


def test_expand_nids_resolves_host_names_on_ip_nets_only() -> None:
    def hosts(name: str) -> str | None:
        return etchosts.lookup_text(TEXT, name)

    assert list(map(str, expand_nids("oss1@tcp1,mds1@o2ib", resolve=hosts))) == [
        "10.0.0.5@tcp1", "10.0.0.6@o2ib"]
    for bad in ("oss1@tcp", "nosuch@tcp", "oss1@gni", "1oss@tcp"):
        with pytest.raises(NidListError, match="invalid NID in nidstr"):
            expand_nids(bad, resolve=hosts if bad != "oss1@tcp" else None)


def test_nid_or_host_uses_the_running_commands_hosts_view() -> None:
    from nodes.dlc.nidlist import HOSTS, nid_or_host

    assert nid_or_host("oss1@tcp") is None  # no hosts view: not a NID
    token = HOSTS.set(lambda name: etchosts.lookup_text(TEXT, name))
    try:
        assert str(nid_or_host("oss1@tcp")) == "10.0.0.5@tcp"
        assert str(nid_or_host("10.1.1.1@tcp")) == "10.1.1.1@tcp"
        assert list(map(str, expand_nids("mds1@tcp"))) == ["10.0.0.6@tcp"]
    finally:
        HOSTS.reset(token)
