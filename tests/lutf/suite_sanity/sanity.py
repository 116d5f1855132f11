"""What sanity-lnet.sh's helper functions do, for the ported tests (suite_sanity).

``reinit`` is ``reinit_dlc`` (LNet unconfigured and configured again, then the base YAML of
``define_global_yaml``); ``export`` is ``$LNETCTL export --backup`` parsed;
``compare_yaml_files`` compares parsed YAML as ``verify_compare_yaml`` does; ``peer_doc`` builds
the ``peer:`` entries sanity-lnet writes into its expected files.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import yaml


def run(node: Any, cmd: str) -> Any:
    """``do_lnetctl CMD``: must succeed."""
    res = node.lnetctl(cmd)
    assert res.rc == 0, f"lnetctl {cmd}: rc {res.rc}: {res.out}{res.err}"
    return res


def fails(node: Any, cmd: str) -> Any:
    """``do_lnetctl CMD && error "Command should have failed"``."""
    res = node.lnetctl(cmd)
    assert res.rc != 0, f"lnetctl {cmd} should have failed: {res.out}"
    assert "Traceback" not in res.err
    return res


def export(node: Any) -> dict[str, Any]:
    res = run(node, "export --backup")
    return yaml.safe_load(res.out) or {}


def reinit(node: Any) -> dict[str, Any]:
    """``reinit_dlc``: returns ``define_global_yaml``'s document (the global block)."""
    run(node, "lnet unconfigure")
    run(node, "lnet configure")
    base = export(node)
    assert list(base) == ["global"], base
    return base


def peer_doc(*peers: tuple[str, list[str]], mr: bool = True) -> list[dict[str, Any]]:
    """``peer:`` entries: (primary, other NIDs) each, the primary listed first."""
    return [{"primary nid": prim, "Multi-Rail": mr,
             "peer ni": [{"nid": n} for n in [prim, *others]]} for prim, others in peers]


def expect(node: Any, base: dict[str, Any], **sections: Any) -> None:
    """``compare_yaml_files``: the export equals the expected sections plus the base."""
    want = {k.replace("_", " "): v for k, v in sections.items()}
    want.update(base)
    assert export(node) == want


def import_text(node: Any, text: str, *opts: str) -> Any:
    """``do_lnetctl import [OPTS] < FILE``: real lnetctl reads stdin itself; the testbed's verb
    path takes a FILE read on the caller's side, so a temporary file stands for stdin."""
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="sanity-lnet-")
    try:
        os.write(fd, text.encode())
        os.close(fd)
        os.chmod(path, 0o644)
        return node.lnetctl("import", *opts, path)
    finally:
        os.unlink(path)


#: setup_router_test's REMOTE_NET (``${NETTYPE}1``)
REMOTE_NET = "tcp1"


def gateways(node: Any) -> list[str]:
    """``validate_gateway_nids``: the export's gateways, each a valid NID."""
    from nodes.lnet.nid import NID

    gws = [r["gateway"] for r in export(node).get("route", [])]
    for gw in gws:
        NID.parse(gw)  # validate_nid
    return gws


def route_states(node: Any) -> tuple[str, str, str]:
    """``check_route_aliveness``'s three views of the routes' state: ``lctl show_route``
    (field 7), ``lnetctl route show -v`` (``state``) and ``lctl get_param -n routes``
    (field 4 of the route lines), each the sorted unique values joined by spaces."""
    lctl = sorted({line.split()[6] for line in node.lctl("show_route").out.splitlines()
                   if len(line.split()) > 6})
    shown = yaml.safe_load(node.lnetctl("route show -v").out or "{}") or {}
    lnetctl = sorted({r["state"] for r in shown.get("route", [])})
    debugfs = sorted({line.split()[3] for line in node.lctl("get_param -n routes").out
                      .splitlines() if "tcp" in line and len(line.split()) > 3})
    return " ".join(lctl), " ".join(lnetctl), " ".join(debugfs)


def ni_status(node: Any, net: str) -> str:
    """``check_router_ni_status``: the status of the node's NI on ``net``."""
    out = node.lnetctl(f"net show --net {net}").out
    return " ".join(line.split()[-1] for line in out.splitlines() if "status:" in line)
