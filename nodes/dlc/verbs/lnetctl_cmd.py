"""``lnetctl`` verbs, served by the node daemon (spec §9.1).

Theory of operation: the ``lnetctl`` console script sends its argv (and, for ``import``, the
parsed file content); ``run`` dispatches it the way lib/libcfs/parser.c ``cfs_parser`` and
lnetctl.c's ``jt_<group>`` functions do -- the parser's own commands (``help``,
``--list-commands``, ``version``), then the command group, its ``check_cmd`` (help, too few
words), then the sub-command. Configuration verbs become typed DLC commands
(``nodes/dlc/parse.py``) carried out by ``nodes/dlc/apply.py``; read-only verbs are in
``lnetctl_show``, ``lnetctl_route``, ``lnetctl_ping``, ``lnetctl_config``, ``lnetctl_fault``.
The result is ``(rc, stdout, stderr)`` exactly as lnetctl prints them: YAML documents on
stdout, cYAML error blocks on stderr, the negative errno truncated to 8 bits as exit status.
An argv that execve would refuse is refused before any parsing (``nodes/limits.py``).
"""

from __future__ import annotations

import errno as E
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from nodes.dlc import commands as C
from nodes.dlc.apply import apply
from nodes.dlc.cmdline import Stop, check_cmd
from nodes.dlc.help import PARSER_COMMANDS, SUB, TOP, help_topic, list_commands, usage
from nodes.dlc.importfile import Content
from nodes.dlc.nidlist import HOSTS
from nodes.dlc.output import Result, error, exit_code
from nodes.dlc.parse import parse
from nodes.dlc.verbs import lnetctl_config, lnetctl_fault, lnetctl_ping, lnetctl_route, lnetctl_show
from nodes.echo import clip
from nodes.limits import argv_error

if TYPE_CHECKING:
    from nodes.dlc.runtime import Runtime as NodeRuntime

PROG = "lnetctl"
#: the version string ``lnetctl version`` prints (LUSTRE_VERSION_STRING of the release whose
#: lnetctl this front end follows)
VERSION = "2.17.0"
Verb = Callable[["NodeRuntime", list[str]], Awaitable[Result]]


def _invalid(word: str) -> Result:
    return 255, "", (f"{PROG}: '{clip(word)}' is not a valid command. See '{PROG} "
                     "--list-commands'.\n")


def _parser_command(word: str, rest: list[str]) -> Result:
    """parser.c ``override_cmdlist``."""
    if word in ("help", "--help"):
        return (0, usage(PROG), "") if not rest else (0, "", help_topic(PROG, rest))
    if word in ("version", "--version"):
        return 0, f"{PROG} {VERSION}\n", ""
    if word in ("list-commands", "--list-commands"):
        return 0, list_commands(), ""
    return 0, "", ""  # quit, exit, ignore_errors: nothing to do for one command


#: read-only sub-commands: (group, sub) -> handler of the words after the sub-command
SHOW: dict[tuple[str, str], Verb] = {
    ("net", "show"): lnetctl_show.net_show,
    ("peer", "show"): lnetctl_show.peer_show,
    ("peer", "list"): lnetctl_show.peer_list,
    ("stats", "show"): lambda rt, a: lnetctl_show.stats(rt, "show", a),
    ("stats", "reset"): lambda rt, a: lnetctl_show.stats(rt, "reset", a),
    ("global", "show"): lnetctl_show.global_show,
    ("debug", "recovery"): lnetctl_show.debug_recovery,
    ("debug", "peer"): lnetctl_show.debug_peer,
    ("debug", "nidlist"): lnetctl_show.debug_nidlist,
    ("route", "show"): lnetctl_route.route_show,
    ("routing", "show"): lnetctl_route.routing_show,
    ("udsp", "show"): lambda rt, a: lnetctl_config.run(rt, "udsp", ["show", *a]),
}
#: verbs that work with LNet down (the rest answer ENETDOWN, as the kernel does)
_WORKS_DOWN = ("lnet", "set", "global", "help")


def _down(word: str, sub: str | None) -> Result:
    action = sub if sub in ("add", "del", "set", "show") else "manage"
    return error(action, word, -E.ENETDOWN, "LNet is not configured: Network is down")


async def _group(rt: NodeRuntime, word: str, rest: list[str]) -> Result:
    """``jt_<group>``: ``check_cmd`` then ``cfs_parser`` on the sub-command table."""
    check_cmd(word, None, rest, 2)
    sub, args = rest[0], rest[1:]
    if sub in PARSER_COMMANDS:
        return _parser_command(sub, args)
    if word == "fault":
        if sub not in ("drop", "delay"):
            return _invalid(sub)
        if not rt.engine.configured:
            return _down("fault", None)
        return await lnetctl_fault.run(rt, rest)
    if sub not in SUB.get(word, {}):
        return _invalid(sub)
    handler = SHOW.get((word, sub))
    if handler is not None:
        if not rt.engine.configured and word not in _WORKS_DOWN:
            return _down(word, sub)
        return await handler(rt, args)
    parsed = parse(word, sub, args)
    if parsed is None:  # pragma: no cover - every SUB entry is a show verb or parses
        return _invalid(sub)
    if isinstance(parsed, C.Command):
        return await apply(rt, parsed)
    return parsed


async def run(rt: NodeRuntime, argv: list[str], content: Content | None = None) -> Result:
    """Execute one lnetctl command line (without the program name). ``content`` is the
    parsed input of ``import`` read by the caller (``nodes/dlc/importfile.py``)."""
    bad = argv_error(PROG, argv)
    if bad is not None:
        return exit_code(-E.E2BIG), "", bad + "\n"
    if not argv:
        return 0, usage(PROG), ""  # interactive mode is the lnetctl client's
    word, rest = argv[0], argv[1:]
    # host names in NIDs resolve (libcfs_strnid) against this node's hosts view
    hosts = HOSTS.set(rt.host.resolve_host)
    try:
        if word in PARSER_COMMANDS:
            return _parser_command(word, rest)
        if word not in TOP:
            return _invalid(word)
        if word == "set":
            parsed = parse("set", None, rest)
            assert parsed is not None
            return await apply(rt, parsed) if isinstance(parsed, C.Command) else parsed
        if word in SUB or word == "fault":
            return await _group(rt, word, rest)
        if word in ("import", "export"):
            return await lnetctl_config.run(rt, word, rest, content)
        if not rt.engine.configured and word in ("ping", "discover"):
            return _down(word, None) if word == "discover" else error(
                "manage", "ping", -E.ENETDOWN, "LNet is not configured: Network is down")
        if word == "ping":
            return await lnetctl_ping.ping(rt, rest)
        if word == "discover":
            return await lnetctl_ping.discover(rt, rest)
        if word == "cpt-of-nid":
            return await lnetctl_show.cpt_of_nid(rt, rest)
        return _unsupported(word)
    except Stop as stop:
        return stop.result
    finally:
        HOSTS.reset(hosts)


def _unsupported(word: str) -> Result:
    """``setup-mrrouting``/``setup-sysctl`` run the host scripts ``/usr/sbin/ksocklnd-config``
    and ``lnet-sysctl-config`` (liblnetconfig.c ``lustre_lnet_setup_mrrouting``,
    ``lustre_lnet_setup_sysctl``); a node here has neither (its routing tables and sysctls
    are the host's: docs/sanity-lnet.md tests 250, 260), so they fail as they do on a host
    without them. ``service-id`` reads the ko2iblnd ``service`` parameter: no o2iblnd here."""
    script = {"setup-mrrouting": "ksocklnd-config", "setup-sysctl": "lnet-sysctl-config"}
    if word in script:
        return error("manage", word, -E.ENOENT,
                     f"failed to execute {script[word]} : No such file or directory")
    return exit_code(-E.ENOENT), "", ""
