"""The one control-server loop (``testbed/ctlserver.py``, issue 29 item 3) on its own: a
handler table served on ``ctl.sock``, bad requests and handler bugs answered in one line,
coroutine handlers awaited, the tick run between requests, ``stop`` after the reply left."""

from __future__ import annotations

import asyncio
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from test_ctl_hostile import _send as ask  # (tests/unit: one raw REQ, its reply)

from testbed import runstate
from testbed.ctlserver import CtlServer, one_line


class Refused(Exception):
    """A backend's own refusal (as the sim server's TestbedError)."""


def serve(tmp_path: Path, concurrent: bool) -> tuple[CtlServer, threading.Thread, Path, list[str]]:
    ticks: list[str] = []

    async def slow_echo(msg: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"ok": True, "echo": msg.get("x")}

    def boom(msg: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("two\nlines")

    def refuse(msg: dict[str, Any]) -> dict[str, Any]:
        raise Refused("no such node 'x'")

    def tick() -> float:
        ticks.append("t")
        return 0.05

    handlers: dict[str, Any] = {"status": lambda msg: {"ok": True, "name": "t"},
                                "echo": slow_echo, "boom": boom, "refuse": refuse}
    server = CtlServer(tmp_path, handlers, concurrent=concurrent, tick=tick,
                       refusals=(Refused,))
    handlers["down"] = lambda msg: (server.stop(), {"ok": True})[1]
    server.handlers = handlers
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    sock = runstate.ctl_sock(tmp_path)
    for _ in range(200):
        if sock.exists():
            break
        threading.Event().wait(0.01)
    return server, thread, sock, ticks


@pytest.mark.parametrize("concurrent", [False, True], ids=["one-at-a-time", "tasks"])
def test_handler_table_served_and_refusals_in_one_line(tmp_path: Path,
                                                       concurrent: bool) -> None:
    server, thread, sock, ticks = serve(tmp_path, concurrent)
    assert ask(sock, b'{"cmd": "status"}') == {"ok": True, "name": "t"}
    # (read once the server answers: the file exists from bind, its mode from the chmod after)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and server.skipped == 0
    assert ask(sock, b'{"cmd": "echo", "x": 5}') == {"ok": True, "echo": 5}
    assert ask(sock, b'{"cmd": "nope"}') == {"ok": False, "error": "unknown request 'nope'"}
    assert ask(sock, b"[1]") == {"ok": False,
                                 "error": "request must be a JSON object, not a list"}
    assert ask(sock, b'{"cmd": "link", "node": 1, "iface": "e", "state": "up"}') == {
        "ok": False, "error": "link: field 'node' must be a string, not an integer"}
    assert ask(sock, b'{"cmd": "refuse"}') == {"ok": False, "error": "no such node 'x'"}
    assert ask(sock, b'{"cmd": "boom"}') == {
        "ok": False, "error": "internal error: RuntimeError: two lines"}
    assert thread.is_alive() and ticks  # the tick ran between requests (one-at-a-time too)
    assert ask(sock, b'{"cmd": "down"}') == {"ok": True}
    thread.join(10)
    assert not thread.is_alive()


def test_one_line_collapses_newlines() -> None:
    assert one_line("a\nb\r\nc") == "a b c" and one_line("plain") == "plain"
