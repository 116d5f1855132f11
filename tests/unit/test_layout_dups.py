"""Issue 29, ``duplicates`` on nodes/testbed/faults: what was written twice is written once.

Each test holds one merge in place (a second copy coming back fails it) or checks the shared
code's behaviour for every user it now serves. The pairs ``duplicates`` still lists, and why
they are not the same logic, are in issue 29's closing note.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from faults import prefilter, unit6
from nodes.limits import ARG_MAX
from testbed.base import Completed, NodeVerbs

ROOT = Path(__file__).resolve().parents[2]


def _defs(path: str, cls: str) -> set[str]:
    """The methods class ``cls`` of ``path`` defines itself."""
    tree = ast.parse((ROOT / path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    raise AssertionError(f"{path}: no class {cls}")


# -- one node-verb implementation for the request-backed node handles ---------------------------

class _Node(NodeVerbs):
    """A node whose daemon answers from a script: records every request."""

    def __init__(self, reply: dict[str, Any] | Exception) -> None:
        self.name, self.sent, self.reply = "n1", [], reply

    def _request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.sent.append((msg, timeout))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def test_verb_sends_argv_and_reads_the_reply() -> None:
    node = _Node({"rc": 3, "out": "o", "err": "e"})
    assert node.lnetctl("net", "show", timeout=7.0) == Completed(3, "o", "e")
    assert node.sent == [({"cmd": "lnetctl", "argv": ["net", "show"]}, 7.0)]


def test_verb_refuses_an_argv_beyond_arg_max_before_sending() -> None:
    node = _Node({"rc": 0})
    res = node.verb("lnetctl", ["x" * ARG_MAX])
    assert res.rc != 0 and "too long" in (res.out + res.err).lower() and node.sent == []


def test_burst_request_and_a_value_json_cannot_carry() -> None:
    node = _Node({"ok": True, "sent": 2})
    assert node.put("10.0.0.1@tcp", count=2, size=8, timeout=5.0, numa=1) == {"ok": True,
                                                                               "sent": 2}
    assert node.sent == [({"cmd": "put", "dst": "10.0.0.1@tcp", "count": 2, "size": 8,
                           "numa": 1}, 5.0)]
    node = _Node(TypeError("Object of type set is not JSON serializable"))
    res = node.get("10.0.0.1@tcp")
    assert res["ok"] is False and res["error"].startswith("get: bad argument:")


@pytest.mark.parametrize(("path", "cls"), [("testbed/mininet/client.py", "MininetNode"),
                                           ("testbed/vagrant/client.py", "VagrantNode")])
def test_daemon_backed_nodes_supply_only_their_channel(path: str, cls: str) -> None:
    """The Mininet and vagrant/hosts nodes differ in how a request reaches the daemon, not in
    what a verb or a burst sends: they define ``_request`` and none of the shared verbs."""
    own = _defs(path, cls)
    assert "_request" in own
    assert not own & {"verb", "_burst", "put", "get"}


# -- constants and small functions kept once ------------------------------------------------------

def test_prefilter_portal_offsets_are_the_stream_trackers() -> None:
    """lnet_hdr_nid16's PUT/GET ptl_index offsets: one definition (``unit6``)."""
    assert prefilter.PORTAL_OFF16 is unit6.PORTAL_OFF16
    for path in ("faults/prefilter.py", "faults/flowtrack.py"):
        assert "56 + 32" not in (ROOT / path).read_text(), path


def test_discovery_does_not_reexport_the_peer_state_bits() -> None:
    """The lp_state bits have one home, ``lpstate``; discovery imports only those it uses."""
    text = (ROOT / "nodes/lnet/discovery.py").read_text()
    assert "re-exported" not in text and "noqa: F401" not in text


def _source(path: str, qualname: str) -> str:
    """The source of ``qualname`` (``Class.method`` or ``function``) in ``path``, read from
    the file: the engine's modules may be compiled (mypyc), where ``inspect`` finds none."""
    body = ast.parse((ROOT / path).read_text()).body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(n for n in body if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part)
        body = node.body
    assert node is not None
    return ast.unparse(node)


def test_shared_helpers_serve_both_callers() -> None:
    """Each pair of callers goes through one helper (a copy coming back drops the call)."""
    def calls(path: str, qualname: str, name: str) -> bool:
        return f"{name}(" in _source(path, qualname)

    show, rec = "nodes/dlc/verbs/lnetctl_show.py", "nodes/lnet/recovery.py"
    dcs, con = "nodes/lnet/dc_state.py", "nodes/selftest/console.py"
    assert calls(show, "net_show", "_show") and calls(show, "peer_show", "_show")
    assert calls(rec, "Recovery._recover_local", "self._due")
    assert calls(rec, "Recovery._recover_peers", "self._due")
    assert calls(dcs, "_ping_failed_evt", "_requeue_failed")
    assert calls(dcs, "_push_failed_evt", "_requeue_failed")
    assert calls(con, "Console.op_debug", "self._query")
    assert calls(con, "Console.op_stat", "self._query")


def test_ui_feed_asks_the_backend_registry() -> None:
    """``testbed ui``'s feed branches on the registry's capabilities, not on names."""
    tree = ast.parse((ROOT / "testbed/ui/feed.py").read_text())
    names = {"mininet", "sim", "vagrant", "hosts"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            consts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
            assert not consts & names, ast.unparse(node)


# -- modules split by responsibility ------------------------------------------------------------

def test_the_lnet_header_codec_is_apart_from_the_socklnd_framing() -> None:
    """``lnet_hdr_nid4`` is LNet's header, carried by both LNDs: its codec is
    ``nodes/lnd/lnethdr.py``; ``wire.py`` keeps the socklnd's connreq, hello and ksock_msg, and
    the o2iblnd does not reach into the socklnd's codec for the header."""
    from nodes.lnd import lnethdr, wire

    own = {n.name for n in ast.parse((ROOT / "nodes/lnd/wire.py").read_text()).body
           if isinstance(n, ast.FunctionDef)}
    assert not own & {"pack_hdr", "unpack_hdr", "bad_frame", "swab32"}
    assert {"pack_hello", "unpack_msg", "pack_connreq"} <= own
    assert wire.unpack_hdr is lnethdr.unpack_hdr  # (wire's frames use it, not a copy)
    msg = (ROOT / "nodes/o2ib/msg.py").read_text()
    assert "from nodes.lnd import lnethdr" in msg and "wire." not in msg


def test_resources_leave_the_interposer_process_to_nfqproc() -> None:
    """``faults/resources.py`` holds the typed changes; signalling, reaping and reading an
    interposer process is ``faults/nfqproc.py``'s (one place, one command-line check)."""
    text = (ROOT / "faults/resources.py").read_text()
    for word in ("waitpid", "SIGUSR1", "SIGTERM", "SIGKILL", "/cmdline", "json.loads"):
        assert word not in text, word  # (SIGSTOP/SIGCONT are StoppedProcess's own change)


def test_a_fresh_counter_read_signals_only_an_interposer(tmp_path: Path) -> None:
    """``read_counters(fresh=True)`` sends SIGUSR1 only to a process whose command line is an
    interposer: this test process's own pid in the file must not be signalled (SIGUSR1 would
    end it), and what the file says comes back as it is; a half-written file reads as {}."""
    import json
    import os

    from faults import nfqproc

    path = tmp_path / "c.json"
    data = {"pid": os.getpid(), "writes": 3, "t": 0.0, "matched": 7}
    path.write_text(json.dumps(data))
    assert not nfqproc.is_interposer(os.getpid())
    assert nfqproc.read_counters(path, fresh=True) == data
    path.write_text('{"pid": 1, "wri')
    assert nfqproc.read_counters(path) == {}
    assert nfqproc.read_counters(tmp_path / "absent.json") == {}


def test_the_checkers_state_and_its_invariants_are_apart() -> None:
    """``check_state.py`` is the state followed through a log; the health and route_down
    invariants that read it are ``check_health.py`` and ``check_route.py``."""
    from testbed.observe import check_health, check_route, check_state

    classes = {n.name for n in ast.parse((ROOT / "testbed/observe/check_state.py").read_text()
                                         ).body if isinstance(n, ast.ClassDef)}
    assert classes == {"NodeState", "Tracker"}
    assert check_health.HealthCheck.handle and check_route.RouteCheck.evidence
    assert check_route.Tracker is check_state.Tracker


def test_lnetctl_argv_checks_use_the_engines_non_raising_parsers() -> None:
    """``parse.py``'s "is this a net / NID" is ``nid.parse_net``/``parse_nid``, not a second
    try/except around ``Net.parse``/``NID.parse``."""
    from nodes.dlc import parse
    from nodes.lnet import nid

    assert parse._net is nid.parse_net and parse._nid is nid.parse_nid
    assert "except LNetConfigError" not in (ROOT / "nodes/dlc/parse.py").read_text()
