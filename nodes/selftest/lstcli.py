"""``lst``: the LNet selftest console's command line (lnet/utils/lst.c ``main``, ``lst_cmdlist``
and libcfs's ``cfs_parser``), independent of where the console runs.

Theory of operation: ``LstTool.main(argv)`` finds the command by its exact name (as
``cfs_parser_findargcmd``), runs it, and prints the command's usage line when it returns
``CMD_HELP``; ``help``, ``--help``, ``help CMD`` and ``--list-commands`` are cfs_parser's.
The return value is lst's (exit status modulo 256). The tool only knows an ``LstIO``: the
``lst`` console script gives it the node daemon's control socket and the wall clock
(``nodes/tools/lst.py``), the daemon's ``lst`` verb and the simulator give it the node's
console directly, with the runtime's clock (virtual on the sim).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nodes.echo import clip
from nodes.selftest.lstbase import CMD_HELP, USAGE
from nodes.selftest.lstbatch import BatchCmds
from nodes.selftest.lstgroup import GroupCmds
from nodes.selftest.lststat import StatCmds

#: cfs_parser's own commands, listed before lst's (``override_cmdlist``)
_OVERRIDE = ("quit", "exit", "help", "--help", "version", "--version", "list-commands",
             "--list-commands", "--ignore_errors", "ignore_errors")
#: lst_cmdlist order
COMMANDS = ("new_session", "end_session", "show_session", "ping", "add_group", "del_group",
            "update_group", "list_group", "stat", "show_error", "add_batch", "run", "stop",
            "list_batch", "query", "add_test")
_METHOD = {"run": "run", "stop": "stop", "query": "query"}


class LstTool(GroupCmds, BatchCmds, StatCmds):
    """One ``lst`` invocation."""

    async def main(self, argv: list[str]) -> int:
        """``lst ARGV...`` (without the program name)."""
        if not argv or argv[0] in ("help", "--help"):
            return self._help(argv[1:])
        cmd = argv[0]
        if cmd in ("--list-commands", "list-commands"):
            self._list_commands()
            return 0
        if cmd in ("quit", "exit", "--ignore_errors", "ignore_errors"):
            return 0
        if cmd in ("version", "--version"):
            self.out("lst 2.15.90 (lnet-testbed)\n")
            return 0
        if cmd not in COMMANDS:
            self.err(f"lst: '{clip(cmd)}' is not a valid command. See 'lst --list-commands'.\n")
            return -1
        fn: Callable[[list[str]], Awaitable[int]] = getattr(self, _METHOD.get(cmd, cmd))
        rc = await fn(argv[1:])
        if rc == CMD_HELP:
            self.out(USAGE[cmd] + "\n")
        return rc

    def _help(self, args: list[str]) -> int:
        """``cfs_parser_help``."""
        if not args:
            self.out("usage: lst [COMMAND] [OPTIONS]... [ARGS]\n"
                     "Without any parameters, interactive mode is invoked\n"
                     "Try 'lst help <COMMAND>', or 'lst --list-commands' for a list of "
                     "commands.\n")
            return 0
        line = "".join(args)
        names = list(_OVERRIDE) + list(COMMANDS)
        found = [n for n in names if n.lower().startswith(line.lower())]
        exact = [n for n in found if n.lower() == line.lower()]
        if not found:
            self.err(f"lst: '{clip(line)}' is not a valid command. See 'lst --list-commands'.\n")
        elif exact or len(found) == 1:
            name = (exact or found)[0]
            text = USAGE.get(name) or _OVERRIDE_HELP.get(name, "")
            self.err(f"{line}: {text}\n")
        else:
            self.err(f"Ambiguous command '{line}'\nOptions: " + "".join(f"{n} " for n in found)
                     + "\n")
        return 0

    def _list_commands(self) -> None:
        """``cfs_parser_list_commands``: four columns of 20."""
        names = list(_OVERRIDE) + list(COMMANDS)
        line, col, offset = "", 0, 0
        for name in names:
            cell = f"{name:<{19 - offset}} "
            line += cell
            offset = max(0, offset + len(cell) - 20)
            col += 1
            if col >= 4:
                self.out(line + "\n")
                line, col, offset = "", 0, 0
        if col:
            self.out(line + "\n")


_OVERRIDE_HELP = {"quit": "quit", "exit": "exit",
                  "help": "provide useful information about a command",
                  "--help": "provide useful information about a command",
                  "version": "show program version", "--version": "show program version",
                  "list-commands": "list available commands",
                  "--list-commands": "list available commands",
                  "--ignore_errors": "ignore errors that occur during script processing",
                  "ignore_errors": "ignore errors that occur during script processing"}
