"""sanity-lnet.sh tests 1-13, 19-26, 28, 99a: ``lnetctl peer add|del|list`` with NIDs, NID
ranges and lists, checked against ``lnetctl export --backup`` (lustre-release c881f8ebcb).

Each test starts as sanity-lnet's does, with ``reinit_dlc`` (LNet unconfigured and configured
again on node ``s``), and compares the export with the YAML sanity-lnet expects (parsed, as
``verify_compare_yaml`` does)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import expect, fails, peer_doc, reinit, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]


def _add(s: Any, prim: str, nids: str | None, want: list[str]) -> None:
    """``compare_peer_add PRIM NIDS`` after ``reinit_dlc``."""
    base = reinit(s)
    run(s, f"peer add --prim_nid {prim}" + (f" --nid {nids}" if nids else ""))
    expect(s, base, peer=peer_doc((prim, want)))


def _del(s: Any, base: dict[str, Any], prim: str, nids: str | None, **want: Any) -> None:
    """``compare_peer_del PRIM NIDS``."""
    run(s, f"peer del --prim_nid {prim}" + (f" --nid {nids}" if nids else ""))
    expect(s, base, **want)


def test_sanity_1_add_peer_single_nid_tcp(s: Any) -> None:
    _add(s, "1.1.1.1@tcp", None, [])


def test_sanity_2_add_peer_single_nid_o2ib(s: Any) -> None:
    _add(s, "2.2.2.2@o2ib", None, [])


def test_sanity_3_add_peer_tcp_primary_o2ib_secondary(s: Any) -> None:
    _add(s, "3.3.3.3@tcp", "3.3.3.3@o2ib", ["3.3.3.3@o2ib"])


def test_sanity_4_add_peer_with_nidrange_tcp(s: Any) -> None:
    """``4.4.4.[1-3]@tcp``; a range overlapping the primary adds nothing twice."""
    want = ["4.4.4.1@tcp", "4.4.4.2@tcp", "4.4.4.3@tcp"]
    _add(s, "4.4.4.4@tcp", "4.4.4.[1-3]@tcp", want)
    run(s, "peer add --prim_nid 4.4.4.4@tcp --nid 4.4.4.[1-4]@tcp")
    expect(s, {"global": reinit_base(s)}, peer=peer_doc(("4.4.4.4@tcp", want)))


def reinit_base(s: Any) -> Any:
    """The base global block, read without reconfiguring (``append_global_yaml``)."""
    return yaml.safe_load(s.lnetctl("global show").out)["global"]


def test_sanity_5_add_peer_with_nidrange_o2ib(s: Any) -> None:
    """Ranges, overlap with the primary, and lists ``[1,2,3-4]``."""
    want = [f"5.5.5.{i}@o2ib" for i in (1, 2, 3, 4)]
    _add(s, "5.5.5.5@o2ib", "5.5.5.[1-4]@o2ib", want)
    for nids in ("5.5.5.[1-4]@o2ib", "5.5.5.[1,2,3-4]@o2ib"):
        run(s, f"peer add --prim_nid 5.5.5.5@o2ib --nid {nids}")
        expect(s, {"global": reinit_base(s)}, peer=peer_doc(("5.5.5.5@o2ib", want)))


def test_sanity_6_add_peer_with_multiple_nidranges(s: Any) -> None:
    """Strides, two bracket groups (leftmost outermost), numeric gni/kfi/bxi3f ranges."""
    want = ["6.6.6.0@tcp", "6.6.6.2@tcp", "6.6.6.4@tcp", "6.6.7.0@tcp", "6.6.7.2@tcp",
            "6.6.7.4@tcp", "6.6.1.0@o2ib", "6.6.1.3@o2ib", "6.6.1.6@o2ib", "6.6.3.0@o2ib",
            "6.6.3.3@o2ib", "6.6.3.6@o2ib", "6@gni", "10@gni", "6@kfi", "10@kfi", "6@bxi3f",
            "10@bxi3f"]
    _add(s, "6.6.6.6@tcp", "6.6.[6-7].[0-4/2]@tcp,6.6.[1-4/2].[0-6/3]@o2ib,[6-12/4]@gni,"
         "[6-12/4]@kfi,[6-12/4]@bxi3f", want)


def test_sanity_7_various_peer_delete_tests(s: Any) -> None:
    """Delete single- and multi-NID peers of every NID kind; ``--prim`` (a getopt prefix);
    the primary listed among ``--nid`` deletes the whole peer."""
    base = reinit(s)
    for add in ("7.7.7.7@tcp", "7.7.7.7@o2ib", "7.7.7.7@tcp --nid 7.7.7.[8-12]@tcp",
                "7.7.7.7@o2ib --nid 7.7.7.[8-12]@o2ib",
                "7.7.7.7@tcp --nid 7.7.7.[9-12]@tcp,7.7.7.[13-15]@o2ib",
                "7@gni", "7@gni --nid [8-12]@gni", "7@kfi", "7@kfi --nid [8-12]@kfi",
                "7@bxi3f", "7@bxi3f --nid [8-12]@bxi3f",
                "7@gni --nid [8-12]@gni,7.7.7.[1-4]@tcp,7.7.7.[5-9]@o2ib,[1-5]@kfi,"
                "[3-7]@bxi3f"):
        run(s, f"peer add --prim_nid {add}")
        _del(s, base, add.split()[0], None)
    run(s, "peer add --prim 1.1.1.1@tcp --nid 1.1.1.1@tcp,2.2.2.2@tcp,3.3.3.3@tcp,4.4.4.4@tcp")
    _del(s, base, "1.1.1.1@tcp", "1.1.1.1@tcp,2.2.2.2@tcp,3.3.3.3@tcp,4.4.4.4@tcp")


def _del_case(s: Any, prim: str, add: str, delete: str, left: list[str]) -> None:
    base = reinit(s)
    run(s, f"peer add --prim_nid {prim} --nid {add}")
    _del(s, base, prim, delete, peer=peer_doc((prim, left)))


def test_sanity_8_delete_single_secondary_nid_tcp(s: Any) -> None:
    _del_case(s, "8.8.8.8@tcp", "8.8.8.[10-15]@tcp", "8.8.8.13@tcp",
              [f"8.8.8.{i}@tcp" for i in (10, 11, 12, 14, 15)])


def test_sanity_9_delete_all_secondary_nids_tcp(s: Any) -> None:
    _del_case(s, "9.9.9.9@tcp", "9.9.9.[11-16]@tcp", "9.9.9.[11-16]@tcp", [])


def test_sanity_10_delete_single_secondary_nid(s: Any) -> None:
    _del_case(s, "10.10.10.10@tcp", "10.10.10.[12-16]@tcp", "10.10.10.14@tcp",
              [f"10.10.10.{i}@tcp" for i in (12, 13, 15, 16)])


def test_sanity_11_delete_all_secondary_nids(s: Any) -> None:
    _del_case(s, "11.11.11.11@tcp", "11.11.11.[13-17]@tcp", "11.11.11.[13-17]@tcp", [])


def test_sanity_12_delete_a_secondary_nid_tcp_and_o2ib(s: Any) -> None:
    _del_case(s, "12.12.12.12@o2ib",
              "[13-14/1].[13-15/2].13.13@o2ib,[15-16/3].[17-19/4].[1].[5-20/5]@tcp",
              "13.15.13.13@o2ib,15.17.1.15@tcp",
              ["13.13.13.13@o2ib", "14.13.13.13@o2ib", "14.15.13.13@o2ib", "15.17.1.5@tcp",
               "15.17.1.10@tcp", "15.17.1.20@tcp"])


def test_sanity_13_delete_all_secondary_nids_tcp_and_o2ib(s: Any) -> None:
    nids = "[14-15].[1-2/1].[1].[100-254/10]@tcp,14.14.[254].14@o2ib"
    _del_case(s, "13.13.13.13@o2ib", nids, nids, [])


def test_sanity_19_add_peer_single_nid_gni(s: Any) -> None:
    _add(s, "19@gni", None, [])


def test_sanity_20_add_peer_gni_primary_tcp_o2ib_secondary(s: Any) -> None:
    _add(s, "20@gni", "20.20.20.20@tcp,20.20.20.20@o2ib",
         ["20.20.20.20@tcp", "20.20.20.20@o2ib"])


def test_sanity_21_add_peer_with_nidrange_gni(s: Any) -> None:
    want = ["22@gni", "23@gni", "24@gni", "25@gni"]
    _add(s, "21@gni", "[22-25]@gni", want)
    run(s, "peer add --prim_nid 21@gni --nid [21-25]@gni")
    expect(s, {"global": reinit_base(s)}, peer=peer_doc(("21@gni", want)))


def test_sanity_22_delete_single_secondary_nid_gni(s: Any) -> None:
    _del_case(s, "22@gni", "[24-29]@gni", "26@gni",
              ["24@gni", "25@gni", "27@gni", "28@gni", "29@gni"])


def test_sanity_23_delete_all_secondary_nids_gni(s: Any) -> None:
    _del_case(s, "23@gni", "[25-29]@gni", "[25-29]@gni", [])


def test_sanity_24_delete_a_secondary_nid_tcp_o2ib_gni(s: Any) -> None:
    _del_case(s, "24@gni",
              "[13-14/1].[13-15/2].13.13@o2ib,[15-16/3].[17-19/4].[1].[5-20/5]@tcp,"
              "[5-12/6]@gni", "5@gni,13.15.13.13@o2ib,15.17.1.15@tcp",
              ["11@gni", "13.13.13.13@o2ib", "14.13.13.13@o2ib", "14.15.13.13@o2ib",
               "15.17.1.5@tcp", "15.17.1.10@tcp", "15.17.1.20@tcp"])


def test_sanity_25_delete_all_secondary_nids_tcp_gni_o2ib(s: Any) -> None:
    nids = "[26-27].[4-10/3].26.26@tcp,26.26.26.26@o2ib,[30-35]@gni"
    _del_case(s, "25@gni", nids, nids, [])


def test_sanity_26_delete_peer_with_primary_nid_locked(s: Any) -> None:
    """``--lock_prim`` sets LNET_PEER_LOCK_PRIMARY (bit 20, ``peer show -v 4``); ``peer del``
    without ``--force`` keeps the peer, with it removes it."""
    reinit(s)
    run(s, "peer add --prim_nid 1.1.1.1@tcp --lock_prim")
    shown = yaml.safe_load(s.lnetctl("peer show -v 4 --nid 1.1.1.1@tcp").out)
    assert shown["peer"][0]["peer state"] & (1 << 20)
    run(s, "peer del --prim_nid 1.1.1.1@tcp")
    assert "1.1.1.1@tcp" in s.lnetctl("peer show --nid 1.1.1.1@tcp").out
    run(s, "peer del --prim_nid 1.1.1.1@tcp --force")
    fails(s, "peer show --nid 1.1.1.1@tcp")


def test_sanity_28_peer_list(s: Any) -> None:
    """``peer add --ni`` (a prefix of ``--nid``); ``peer list`` prints two ``- nid:``."""
    reinit(s)
    run(s, "peer add --prim_nid 1.1.1.1@tcp --ni 7.7.7.7@tcp")
    run(s, "peer add --prim_nid 1.1.1.2@tcp --nid 7.7.7.8@tcp")
    listed = run(s, "peer list").out
    assert sum(1 for line in listed.splitlines() if line.lstrip().startswith("- nid:")) == 2


def test_sanity_99a_invalid_inputs_to_lnetctl_peer(s: Any) -> None:
    """Bad primary NIDs, a missing ``--prim_nid``, bad NID strings and ranges, more than
    LNET_MAX_NIDS_PER_PEER NIDs, a net type that does not exist, a non-local gateway: every
    command fails."""
    reinit(s)
    for cmd in ("peer add --prim_nid foobar", "peer del --prim_nid foobar",
                "peer del --prim_nid 1.1.1.1@o2ib", "peer del --nid 1.1.1.1@tcp",
                "peer add --nid 1.1.1.1@tcp", "peer add",
                "peer add --prim_nid 1.1.1.1@tcp --nid foobar",
                "peer add --prim_nid 1.1.1.1@tcp --nid 1.1.1.[2-255]@tcp",
                "peer add --prim_nid 1@foo", "peer add --prim_nid 1@tcp",
                "peer add --prim_nid 1@o2ib", "peer add --prim_nid 1.1.1.1@gni"):
        fails(s, cmd)
    for nidstr in ("[2-1]@gni", "[a-f/x]@gni", "256.256.256.256@tcp", "1.1.1.1.[2-5/f]@tcp",
                   "1.]2[.3.4@o2ib", "1.[2-4,[5-6],7-8].1.1@tcp", "foobar"):
        fails(s, f"peer add --prim_nid 1.1.1.1@tcp --nid {nidstr}")
    fails(s, "route add --net tcp --gateway 1@gni")
