"""sanity-lnet.sh tests 600-629: ``lnet_legacy2yaml`` (lustre/scripts/lnet_legacy2yaml)
converts legacy ``ip2nets=``/``routes=``/``networks=`` options into lnetctl import YAML, at
lustre-release c881f8ebcb. ``compare_yaml_files`` compares the parsed documents; 617 imports
the result on a node. The tool runs as sanity-lnet runs it, a command (``$LEGACY2YAML``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lutf.suite_sanity.sanity import export, import_text, reinit, run
from nodes.tools.legacy2yaml import convert

pytestmark = [pytest.mark.mininet, pytest.mark.topology("single.yaml")]
ROOT = Path(__file__).resolve().parents[3]


def l2y(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``$LEGACY2YAML ARGS``: the tool's ``convert`` in-process (the command's whole work;
    test 609 runs the command itself)."""
    rc, out, err = convert(list(args), stdin or None)
    return subprocess.CompletedProcess(["lnet_legacy2yaml", *args], rc, out, err)


def same(res: subprocess.CompletedProcess[str], expected: str) -> None:
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load(res.stdout) == yaml.safe_load(expected)


def fails(res: subprocess.CompletedProcess[str], rc: int, words: str) -> None:
    assert res.returncode == rc, res
    assert words.lower() in res.stderr.lower(), res.stderr


def files(tmp_path: Path, **named: str) -> dict[str, str]:
    out = {}
    for name, text in named.items():
        path = tmp_path / name
        path.write_text(text)
        out[name] = str(path)
    return out


R = "route:\n    - net: tcp0\n      gateway: 10.0.0.1@o2ib0\n"


def test_sanity_600_basic_ip2nets_conversion() -> None:
    same(l2y("tcp0(eth0,eth1) 10.0.0.*; o2ib0 192.168.[1-2].*"),
         "ip2nets:\n  - net-spec: tcp0\n    interfaces: {0: eth0, 1: eth1}\n"
         "    ip-range: {0: 10.0.0.*}\n  - net-spec: o2ib0\n"
         "    ip-range: {0: '192.168.[1-2].*'}\n")


def test_sanity_601_basic_routes_conversion() -> None:
    same(l2y("routes='tcp0 1 10.0.0.1@o2ib0'"), R + "      hop: 1\n")


def test_sanity_602_routes_with_priority() -> None:
    same(l2y("routes='tcp0 2 10.0.0.1@o2ib0:7'"), R + "      hop: 2\n      priority: 7\n")


def test_sanity_603_default_hop_flag() -> None:
    same(l2y("routes='tcp0 10.0.0.1@o2ib0'", "--default-hop"), R + "      hop: 1\n")


def test_sanity_604_default_hop_with_explicit_value() -> None:
    same(l2y("--default-hop", "3", "routes='tcp0 10.0.0.1@o2ib0'"), R + "      hop: 3\n")


def test_sanity_605_quote_leading_star_in_ip_pattern() -> None:
    res = l2y("tcp *.*.*.*")
    same(res, 'ip2nets:\n  - net-spec: tcp\n    ip-range: {0: "*.*.*.*"}\n')
    assert '"*.*.*.*"' in res.stdout


def test_sanity_606_file_inputs(tmp_path: Path) -> None:
    f = files(tmp_path, ip="tcp0 10.1.0.*\n", routes="tcp0 1 10.1.0.1@o2ib0:9\n")
    same(l2y("-i", f["ip"], "-r", f["routes"]),
         "ip2nets:\n  - net-spec: tcp0\n    ip-range: {0: 10.1.0.*}\n"
         "route:\n  - {net: tcp0, gateway: 10.1.0.1@o2ib0, hop: 1, priority: 9}\n")


def test_sanity_607_options_line_with_ip2nets_and_routes() -> None:
    same(l2y("options lnet 'ip2nets=\"tcp0 10.0.0.*\" routes=\"tcp0 1 10.0.0.2@o2ib0\"'"),
         "ip2nets:\n  - net-spec: tcp0\n    ip-range: {0: 10.0.0.*}\n"
         "route:\n  - {net: tcp0, gateway: 10.0.0.2@o2ib0, hop: 1}\n")


def test_sanity_608_error_on_invalid_rule_missing_ip_pattern() -> None:
    fails(l2y("tcp0"), 2, "error")


def test_sanity_609_error_on_no_input() -> None:
    res = subprocess.run([sys.executable, "-m", "nodes.tools.legacy2yaml"], input="",
                         capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    fails(res, 1, "no ip2nets, routes, or networks data")


def test_sanity_610_multiple_files_and_inline_check_order(tmp_path: Path) -> None:
    f = files(tmp_path, ip1="tcp0 10.0.0.*\n", ip2="o2ib0 192.168.0.*\n",
              r1="tcp0 1 10.0.0.1@o2ib0\n")
    same(l2y("-i", f["ip1"], "-i", f["ip2"], "-r", f["r1"],
             "routes='o2ib0 1 192.168.0.1@tcp0'"),
         "ip2nets:\n  - {net-spec: tcp0, ip-range: {0: 10.0.0.*}}\n"
         "  - {net-spec: o2ib0, ip-range: {0: 192.168.0.*}}\n"
         "route:\n  - {net: tcp0, gateway: 10.0.0.1@o2ib0, hop: 1}\n"
         "  - {net: o2ib0, gateway: 192.168.0.1@tcp0, hop: 1}\n")


def test_sanity_611_invalid_hopcount() -> None:
    fails(l2y("routes='tcp0 0 10.0.0.1@o2ib0'"), 2, "hopcount")


def test_sanity_612_malformed_ip_pattern() -> None:
    res = l2y("tcp0 10.0.0")
    assert res.returncode == 2 and "invalid ip pattern" in res.stderr.lower(), res


def test_sanity_613_multiple_ip_patterns_in_single_rule() -> None:
    same(l2y("tcp0 10.0.0.* 10.0.1.*"),
         "ip2nets:\n  - {net-spec: tcp0, ip-range: {0: 10.0.0.*, 1: 10.0.1.*}}\n")


def test_sanity_614_interfaces_with_multiple_ip_ranges() -> None:
    same(l2y("tcp0(eth0,eth1) 10.0.0.* 10.0.1.*"),
         "ip2nets:\n  - {net-spec: tcp0, interfaces: {0: eth0, 1: eth1},"
         " ip-range: {0: 10.0.0.*, 1: 10.0.1.*}}\n")


MODPROBE_615 = """# Modprobe configuration file for LNet
options lnet ip2nets="tcp0(eth0) 10.1.0.*"

# Routes configuration
options lnet routes="tcp0 1 10.1.0.1@o2ib0:9"

# Line continuation test
options lnet \\
  ip2nets="o2ib0 192.168.1.*"
"""


def test_sanity_615_modprobe_configuration_file_input(tmp_path: Path) -> None:
    f = files(tmp_path, conf=MODPROBE_615)
    same(l2y("-m", f["conf"]),
         "ip2nets:\n  - {net-spec: tcp0, interfaces: {0: eth0}, ip-range: {0: 10.1.0.*}}\n"
         "  - {net-spec: o2ib0, ip-range: {0: 192.168.1.*}}\n"
         "route:\n  - {net: tcp0, gateway: 10.1.0.1@o2ib0, hop: 1, priority: 9}\n")


def test_sanity_616_modprobe_file_with_ip2nets_file(tmp_path: Path) -> None:
    f = files(tmp_path, conf='options lnet ip2nets="tcp0 10.0.0.*"\n'
                             'options lnet routes="tcp0 1 10.0.0.1@o2ib0"\n',
              ip="o2ib0 192.168.0.*\n")
    same(l2y("-m", f["conf"], "-i", f["ip"]),
         "ip2nets:\n  - {net-spec: tcp0, ip-range: {0: 10.0.0.*}}\n"
         "  - {net-spec: o2ib0, ip-range: {0: 192.168.0.*}}\n" + R + "      hop: 1\n")


def test_sanity_617_round_trip_from_lnet_to_modprobe_to_yaml(module_topology: Any,
                                                             tmp_path: Path) -> None:
    s = module_topology.node("s")
    reinit(s)
    run(s, "net add --net tcp --if eth0")
    expected = export(s)
    f = files(tmp_path, conf='options lnet ip2nets="tcp(eth0) 10.60.0.*"\n')
    res = l2y("-m", f["conf"])
    assert res.returncode == 0, res.stderr
    reinit(s)
    assert import_text(s, res.stdout).rc == 0
    assert export(s) == expected


ALT = "route:\n  - {net: tcp7, gateway: '10.3.3.[6-12]@tcp', hop: 8, priority: 20}\n"


def test_sanity_618_alternative_route_format(tmp_path: Path) -> None:
    f = files(tmp_path, r="tcp7: { gateway: 10.3.3.[6-12]@tcp, priority: 20, hop: 8 }\n")
    same(l2y("-r", f["r"]), ALT)


def test_sanity_619_alternative_format_routes_from_file(tmp_path: Path) -> None:
    f = files(tmp_path, r="""# Alternative route format examples
tcp1: { gateway: 10.1.1.2@tcp0, priority: 3 }  # High priority route
# This is a comment line
tcp4: { gateway: 10.3.3.4@tcp }
tcp6: { gateway: 10.3.3.6@tcp, hop: 2, priority: 5 }
tcp7: { gateway: 10.3.3.[6-12]@tcp, priority: 20, hop: 8 }
""")
    same(l2y("-r", f["r"]),
         "route:\n  - {net: tcp1, gateway: 10.1.1.2@tcp0, priority: 3}\n"
         "  - {net: tcp4, gateway: 10.3.3.4@tcp}\n"
         "  - {net: tcp6, gateway: 10.3.3.6@tcp, hop: 2, priority: 5}\n"
         "  - {net: tcp7, gateway: '10.3.3.[6-12]@tcp', hop: 8, priority: 20}\n")


def test_sanity_620_mixed_legacy_and_alternative_route_formats(tmp_path: Path) -> None:
    f = files(tmp_path, r="""# Mixed route formats
tcp1: { gateway: 10.1.1.2@tcp0, priority: 3 }
tcp0 1 10.2.2.3@tcp1
tcp6: { gateway: 10.3.3.6@tcp, hop: 2, priority: 5 }
tcp2 2 10.4.4.5@tcp0:7
""")
    same(l2y("-r", f["r"]),
         "route:\n  - {net: tcp1, gateway: 10.1.1.2@tcp0, priority: 3}\n"
         "  - {net: tcp0, gateway: 10.2.2.3@tcp1, hop: 1}\n"
         "  - {net: tcp6, gateway: 10.3.3.6@tcp, hop: 2, priority: 5}\n"
         "  - {net: tcp2, gateway: 10.4.4.5@tcp0, hop: 2, priority: 7}\n")


def test_sanity_621_alternative_format_invalid_hopcount(tmp_path: Path) -> None:
    f = files(tmp_path, r="tcp0: { gateway: 10.0.0.1@o2ib0, hop: 0 }\n")
    res = l2y("-r", f["r"])
    assert res.returncode == 2 and "hopcount" in res.stderr and "out of range" in res.stderr


def test_sanity_622_alternative_format_with_default_hop(tmp_path: Path) -> None:
    f = files(tmp_path, r="tcp5: { gateway: 10.5.5.5@tcp0 }\n")
    same(l2y("-r", f["r"], "--default-hop", "3"),
         "route:\n  - {net: tcp5, gateway: 10.5.5.5@tcp0, hop: 3}\n")


def test_sanity_623_basic_networks_conversion() -> None:
    same(l2y("options lnet networks=tcp"), "net:\n  - net type: tcp\n")


def test_sanity_624_networks_with_interfaces() -> None:
    same(l2y("options lnet networks=tcp0(eth0)"),
         "net:\n  - {net type: tcp0, local NI(s): [{interfaces: {0: eth0}}]}\n")


def test_sanity_625_multiple_networks() -> None:
    same(l2y("options lnet networks=tcp0(eth0),o2ib(ib0)"),
         "net:\n  - {net type: tcp0, local NI(s): [{interfaces: {0: eth0}}]}\n"
         "  - {net type: o2ib, local NI(s): [{interfaces: {0: ib0}}]}\n")


def test_sanity_626_mixed_networks_ip2nets_and_routes(tmp_path: Path) -> None:
    f = files(tmp_path, conf="options lnet networks=tcp0(eth0),o2ib(ib0)\n"
                             'options lnet ip2nets="tcp1(eth1) 192.168.1.*"\n'
                             'options lnet routes="tcp0 1 10.0.0.1@o2ib0"\n')
    same(l2y("-m", f["conf"]),
         "net:\n  - {net type: tcp0, local NI(s): [{interfaces: {0: eth0}}]}\n"
         "  - {net type: o2ib, local NI(s): [{interfaces: {0: ib0}}]}\n"
         "ip2nets:\n  - {net-spec: tcp1, interfaces: {0: eth1}, ip-range: {0: 192.168.1.*}}\n"
         + R + "      hop: 1\n")


def test_sanity_627_invalid_networks_format() -> None:
    fails(l2y("options lnet networks=tcp0(eth0"), 2, "Invalid network specification")


def test_sanity_628_missing_delimiter_error() -> None:
    fails(l2y("tcp0(eth0) 10.0.0.* tcp1(eth1) 192.168.1.*"), 2,
          "Multiple network rules must be separated")


def test_sanity_629_multiple_gateways_error() -> None:
    fails(l2y('options lnet routes="tcp0 1 10.0.0.1@o2ib0 10.0.0.2@o2ib0"'), 2,
          "multiple gateway specifications found")
