"""``testbed ui [-n NAME] [--port P] [--bind ADDR]``: the live web view of a running testbed
(testbed/ui/, issue 31).

Serves until interrupted; prints the URL to open (with the token when one is needed) as its
first line. Bound to 127.0.0.1 unless ``--bind`` says otherwise; any address that is not
loopback gets a token (``--token``, else a fresh random one), never an open page.
"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import sys

from testbed.commands.common import CliError, Named, pick

DEFAULT_PORT = 8470


def is_loopback(addr: str) -> bool:
    """``addr`` (a literal address or ``localhost``) only reaches this machine."""
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return False


def cmd_ui(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port: must be 0..65535, not {args.port}")
    if not 0.05 <= args.period <= 10:
        raise CliError(f"--period: must be 0.05..10 seconds, not {args.period:g}")
    if args.token is not None and len(args.token) < 16:
        raise CliError("--token: give at least 16 characters")
    loopback = is_loopback(args.bind)
    token = args.token if args.token else (None if loopback else secrets.token_urlsafe(24))
    from testbed.ui.feed import Feed
    from testbed.ui.server import make_app

    tb = pick(args.name)
    feed = Feed(tb, tb.rundir)  # type: ignore[attr-defined]
    app = make_app(feed, token=token, loopback=loopback, period=args.period)
    return _serve(app, args.bind, args.port, token, tb.name)


def _serve(app: object, bind: str, port: int, token: str | None, name: str) -> int:
    import asyncio

    from aiohttp import web

    async def go() -> None:
        runner = web.AppRunner(app)  # type: ignore[arg-type]
        await runner.setup()
        site = web.TCPSite(runner, bind.strip("[]"), port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise CliError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        real_port = sock.getsockname()[1]
        host = f"[{bind}]" if ":" in bind.strip("[]") else bind
        url = f"http://{host}:{real_port}/" + (f"?token={token}" if token else "")
        print(f"testbed {name}: live view at {url}", flush=True)
        print("(Ctrl-C to stop)", file=sys.stderr, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        return 0
    return 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    sp = named("ui", "serve a live web view of a testbed: topology, health, credits, "
               "message rates, routes, faults, event timeline")
    sp.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help=f"TCP port (default {DEFAULT_PORT}; 0: any free port)")
    sp.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                    help="address to listen on (default 127.0.0.1; any other than loopback "
                    "requires a token)")
    sp.add_argument("--token", default=None,
                    help="access token (default: none on loopback, a random one elsewhere)")
    sp.add_argument("--period", type=float, default=0.25, metavar="SECONDS",
                    help="how often the page is updated (default 0.25)")
    sp.set_defaults(func=cmd_ui)
