"""lnetctl's command line as real lnetctl reads it (issue 14 "Parsing", "Error YAML", "Help";
issue 11 items 2 and 10), through the daemon's verb path on the sim backend.

Each test names the lnetctl.c / liblnetconfig.c / api-ni.c function whose behaviour it pins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodes.limits import ARG_MAX
from testbed.sim import SimTestbed

TOPO = """
name: parse
networks:
  lan0: {lnet: tcp, subnet: 10.40.0.0/24}
nodes:
  a: {interfaces: [lan0]}
  b: {interfaces: [lan0]}
"""


@pytest.fixture
def tb(tmp_path: Path) -> SimTestbed:
    topo = tmp_path / "parse.yaml"
    topo.write_text(TOPO)
    return SimTestbed.up(topo, seed=3)


def _peers(node: Any) -> dict[str, list[str]]:
    out = node.lnetctl("peer", "show").out
    doc = yaml.safe_load(out) if out else {"peer": []}
    return {p["primary nid"]: [n["nid"] for n in p["peer ni"]] for p in doc["peer"]}


def test_long_option_prefixes_as_getopt_long(tb: SimTestbed) -> None:
    """glibc ``getopt_long``: ``--prim`` is ``--prim_nid`` (sanity-lnet 7, 105), ``--ni`` is
    ``--nid`` (28), ``--prio`` is ``--priority`` (401); an ambiguous prefix is glibc's error
    and, as ``jt_add_ni`` does on '?', the help on stdout and exit 0."""
    a = tb.node("a")
    assert a.lnetctl("peer", "add", "--prim", "1.1.1.1@tcp", "--ni", "7.7.7.7@tcp").rc == 0
    assert _peers(a)["1.1.1.1@tcp"] == ["1.1.1.1@tcp", "7.7.7.7@tcp"]
    assert a.lnetctl("udsp", "add", "--dst", "tcp", "--prio", "1").rc == 0
    assert a.lnetctl("peer", "add", "--prim-nid", "2.2.2.2@tcp").rc == 0  # help, exit 0
    assert "2.2.2.2@tcp" not in _peers(a)
    res = a.lnetctl("net", "add", "--n", "tcp1", "--if", "eth0")
    assert res.rc == 0 and res.err == ("add: option '--n' is ambiguous; possibilities: "
                                       "'--net' '--nid' '--numa'\n")
    assert res.out.startswith("net add: ") and "\t--peer-buffer-credits: " in res.out


def test_short_options_and_equals(tb: SimTestbed) -> None:
    """``jt_add_route``'s ``-n -g -c -p`` (sanity-lnet 111) and ``--opt=value``."""
    a = tb.node("a")
    assert a.lnetctl("route", "add", "-n", "tcp5", "-g", "10.40.0.2@tcp", "-c", "2",
                     "-p", "3").rc == 0
    assert a.lnetctl("route", "add", "--net=tcp6", "--gateway=10.40.0.2@tcp").rc == 0
    routes = {r["net"]: r for r in yaml.safe_load(a.lnetctl("route", "show", "-v").out)["route"]}
    assert (routes["tcp5"]["hop"], routes["tcp5"]["priority"]) == (2, 3)
    assert "tcp6" in routes


def test_verbose_takes_the_next_word_only_if_it_is_a_number(tb: SimTestbed) -> None:
    """``jt_show_net``: ``-v 2`` is level 2, ``-v --net tcp`` level 1; 20,000 ``-v`` parse
    (linear) and give level 1 (issue 11 item 2)."""
    a = tb.node("a")
    v2 = yaml.safe_load(a.lnetctl("net", "show", "-v", "2").out)["net"][1]["local NI(s)"][0]
    v1 = yaml.safe_load(a.lnetctl("net", "show", "-v", "--net", "tcp").out)
    assert "health stats" in v2 and "health stats" not in v1["net"][0]["local NI(s)"][0]
    many = a.lnetctl("net", "show", *["-v"] * 20000)
    assert many.rc == 0 and "statistics:" in many.out and "health stats" not in many.out


def test_argv_beyond_execve_limits_is_refused_before_parsing(tb: SimTestbed) -> None:
    """An argv execve(2) would refuse (ARG_MAX with pointers) is one line, E2BIG."""
    res = tb.node("a").lnetctl("net", "show", *["-v"] * (ARG_MAX // 10))
    assert res.rc == 256 - 7 and res.out == "" and res.err.count("\n") == 1
    assert "Argument list too long" in res.err


def test_nid_ranges_in_peer_and_route_verbs(tb: SimTestbed) -> None:
    """``lustre_lnet_parse_nid_range``: ranges, strides, lists, numeric NIDs, several groups
    leftmost-outermost (sanity-lnet 4-6, 12); peer del with a range (9); route add with a
    gateway range (101) and del (103); more than LNET_MAX_NIDS_PER_PEER refused (99a)."""
    a = tb.node("a")
    assert a.lnetctl("peer", "add", "--prim_nid", "6.6.6.6@tcp", "--nid",
                     "6.6.[6-7].[0-4/2]@tcp,5.5.5.[1,3-4]@o2ib,[6-12/4]@gni").rc == 0
    assert _peers(a)["6.6.6.6@tcp"] == [
        "6.6.6.6@tcp", "6.6.6.0@tcp", "6.6.6.2@tcp", "6.6.6.4@tcp", "6.6.7.0@tcp",
        "6.6.7.2@tcp", "6.6.7.4@tcp", "5.5.5.1@o2ib", "5.5.5.3@o2ib", "5.5.5.4@o2ib",
        "6@gni", "10@gni"]
    assert a.lnetctl("peer", "del", "--prim_nid", "6.6.6.6@tcp", "--nid",
                     "6.6.[6-7].[0-4/2]@tcp").rc == 0
    assert _peers(a)["6.6.6.6@tcp"] == ["6.6.6.6@tcp", "5.5.5.1@o2ib", "5.5.5.3@o2ib",
                                        "5.5.5.4@o2ib", "6@gni", "10@gni"]
    res = a.lnetctl("peer", "add", "--prim_nid", "1.1.1.1@tcp", "--nid", "1.1.1.[2-255]@tcp")
    assert res.rc != 0 and "more NIDs than allowed" in res.err
    res = a.lnetctl("peer", "add", "--prim_nid", "1.1.1.1@tcp", "--nid", "[2-1]@gni")
    assert res.rc != 0 and "wrong order" in yaml.safe_load(res.err)["add"][0]["peer"]["descr"]
    assert a.lnetctl("route", "add", "--net", "tcp9", "--gateway", "10.40.0.[2-4]@tcp").rc == 0
    gws = sorted(r["gateway"] for r in yaml.safe_load(a.lnetctl("route", "show").out)["route"])
    assert gws == ["10.40.0.2@tcp", "10.40.0.3@tcp", "10.40.0.4@tcp"]
    assert a.lnetctl("route", "del", "--net", "tcp9", "--gateway",
                     "10.40.0.[2-4/2]@tcp").rc == 0
    gws = [r["gateway"] for r in yaml.safe_load(a.lnetctl("route", "show").out)["route"]]
    assert gws == ["10.40.0.3@tcp"]


def test_route_numbers_are_c_ints_checked_by_the_kernel(tb: SimTestbed) -> None:
    """``jt_add_route`` parses a long and passes an int (``yaml_lnet_route``);
    ``lnet_genl_parse_route`` refuses a negative priority and hops outside 1..255."""
    a = tb.node("a")
    assert a.lnetctl("route", "add", "--net", "tcp2", "--gateway", "10.40.0.2@tcp",
                     "--priority", "99999999999").rc == 0
    shown = yaml.safe_load(a.lnetctl("route", "show", "-v", "--net", "tcp2").out)["route"][0]
    assert shown["priority"] == 99999999999 % 2**32  # 1215752191, as gcc truncates
    res = a.lnetctl("route", "add", "--net", "tcp3", "--gateway", "10.40.0.2@tcp",
                    "--priority", "2147483648")
    err = yaml.safe_load(res.err)["add"][0]["route"]
    assert res.rc == 234 and err == {"errno": -22,
                                     "descr": "invalid priority, must not be negative"}
    res = a.lnetctl("route", "add", "--net", "tcp3", "--gateway", "10.40.0.2@tcp",
                    "--hop", "256")
    assert res.rc == 234 and "between 1 and 255" in res.err


def test_ping_timeout_as_the_kernel_reads_it(tb: SimTestbed) -> None:
    """``jt_ping`` sends 1000*atol(T) ms; the kernel keeps 0 < T < 180000 ms, else waits
    DEFAULT_PEER_TIMEOUT (api-ni.c ``lnet_genl_ping_prerun``): ``--timeout -5`` of a
    NID that drops everything is a 180 s wait, not -110 at once; ``--timeout 3`` is 3 s."""
    a = tb.node("a")
    fab = tb.fabric
    b_nid = tb.node("b").nids[0]
    assert tb.node("b").lctl("net_drop_add", "-s", "*", "-d", "*", "-r", "1").rc == 0
    assert a.lnetctl("set", "transaction_timeout", "300").rc == 0  # the ping bounds the wait
    for arg, wait in (("-5", 180.0), ("3", 3.0)):
        t0 = fab.now
        res = a.lnetctl("ping", "--timeout", arg, b_nid)
        assert res.rc != 0, res
        assert wait - 0.5 <= fab.now - t0 <= wait + 0.5, (arg, fab.now - t0)


def test_ping_errors_are_one_yaml_block_with_quoted_descr(tb: SimTestbed) -> None:
    """cYAML_build_error appends to one ``manage:`` sequence; liblnetconfig quotes descr, so
    ``failed to ping NID: why`` (a ``: `` inside) stays YAML."""
    res = tb.node("a").lnetctl("ping", "9.9.9.9@tcp", "9.9.9.8@tcp")
    doc = yaml.safe_load(res.err)
    assert [list(e) for e in doc["manage"]] == [["ping"], ["ping"]]
    assert doc["manage"][0]["ping"]["descr"].startswith("failed to ping 9.9.9.9@tcp: ")
    assert '    - ping:\n          errno: ' in res.err and 'descr: "failed to ping' in res.err


def test_list_commands_and_help_per_command(tb: SimTestbed) -> None:
    """parser.c ``cfs_parser_list``: every command group, four columns of 20; ``ping --help``
    (``jt_ping``: exit 0), ``net add --help`` (``check_cmd``: exit 1), ``help net`` on stderr,
    ``net set -h`` lists ``--lnd-timeout:`` (sanity-lnet 241)."""
    a = tb.node("a")
    listed = a.lnetctl("--list-commands")
    names = listed.out.split()
    for group in ("lnet", "route", "net", "routing", "set", "import", "export", "stats",
                  "debug", "global", "peer", "ping", "discover", "udsp", "fault",
                  "setup-mrrouting", "cpt-of-nid"):
        assert group in names
    assert listed.out.splitlines()[0] == "".join(f"{n:<19} " for n in
                                                 ("quit", "exit", "help", "--help"))
    ping = a.lnetctl("ping", "--help")
    assert ping.rc == 0 and ping.out.startswith("ping nid[,nid,...]\n")
    assert "--source:" in ping.out and "--timeout:" in ping.out
    add = a.lnetctl("net", "add", "--help")
    assert add.rc == 1 and add.out.startswith("net add: ")
    for opt in ("--net", "--if", "--nid", "--ip2net", "--peer-timeout", "--peer-credits",
                "--peer-buffer-credits", "--credits", "--cpt", "--conns-per-peer", "--tos"):
        assert f"\t{opt}: " in add.out
    assert "--lnd-timeout:" in a.lnetctl("net", "set", "-h").out
    assert a.lnetctl("help", "net").err == "net: net {add | del | show | set | help}\n"
