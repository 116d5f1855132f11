"""lnetctl's command tables and help output (issue 14 "Help"; lnetctl.c ``cmd_list`` and the
``*_cmds`` tables, lib/libcfs/parser.c).

Theory of operation: real lnetctl keeps one ``command_t`` table per command group; ``print_help``
prints ``"<group> <command>: <help>\\n"`` for one command or every command of the group
(``check_cmd`` on ``-h``/``--help``, and after a getopt error), ``cfs_parser_list`` prints the
parser's own commands then ``cmd_list`` in four columns of 20, ``cfs_parser_help`` answers
``help [CMD]``. The layout, command names and option names here are lnetctl's; the wording of
the help texts is ours (the project quotes no lnetctl text).
"""

from __future__ import annotations

from nodes.echo import clip

#: lib/libcfs/parser.c ``override_cmdlist``: commands every cfs_parser tool has
PARSER_COMMANDS = ("quit", "exit", "help", "--help", "version", "--version", "list-commands",
                   "--list-commands", "--ignore_errors", "ignore_errors")

#: lnetctl.c ``cmd_list``: top-level command -> its usage line
TOP: dict[str, str] = {
    "lnet": "lnet {configure | unconfigure} [--all|--large]",
    "route": "route {add | del | show | help}",
    "net": "net {add | del | show | set | help}",
    "routing": "routing {show | help}",
    "set": ("set {tiny_buffers | small_buffers | large_buffers | routing | numa_range"
            " | max_interfaces | discovery | drop_asym_route | retry_count"
            " | transaction_timeout | health_sensitivity | recovery_interval"
            " | router_sensitivity | response_tracking | recovery_limit}"),
    "import": "import FILE.yaml",
    "export": "export FILE.yaml",
    "stats": "stats {show | help}",
    "debug": "debug {recovery {local | peer} | peer}",
    "global": "global {show | help}",
    "peer": "peer {add | del | show | list | set | help}",
    "ping": "ping nid,[nid,...]",
    "discover": "discover nid[,nid,...]",
    "service-id": "Compute the InfiniBand service ID of Lustre\n",
    "udsp": "udsp {add | del | help}",
    "fault": "{drop | delay | help}",
    "setup-mrrouting": "set up the Linux routing tables of the NIs\n",
    "setup-sysctl": "set the Linux sysctls a large LNet system needs\n",
    "cpt-of-nid": "Compute the CPT of each NID\n usage:\n\tlnetctl cpt-of-nid nid[ nid ...]\n",
}


def _opts(*lines: str) -> str:
    return "".join(f"\t{line}\n" for line in lines)


#: the sub-command tables (lnetctl.c ``lnet_cmds``, ``route_cmds``, ...): group -> sub -> help
SUB: dict[str, dict[str, str]] = {
    "lnet": {
        "configure": "bring LNet up\n" + _opts(
            "--all: also configure the NIs given as module parameters",
            "--large: use large (IPv6-capable) NIDs"),
        "unconfigure": "bring LNet down\n",
    },
    "route": {
        "add": "add a route to a remote net\n" + _opts(
            "--net: the remote net (e.g. tcp1)",
            "--gateway: the router's NID (e.g. 192.168.1.2@tcp)",
            "--hop|hop-count: hops to the remote net (1..255)",
            "--priority: route priority, 0 is preferred",
            "--health_sensitivity: how much a gateway failure lowers its health (>= 1)"),
        "del": "delete a route\n" + _opts(
            "--net: the remote net (e.g. tcp1)",
            "--gateway: the router's NID (e.g. 192.168.1.2@tcp)"),
        "show": "list the routes\n" + _opts(
            "--net: only routes to this net",
            "--gateway: only routes through this gateway",
            "--hop|hop-count: only routes with this hop count",
            "--priority: only routes with this priority",
            "--verbose: show each route's details"),
    },
    "net": {
        "add": "configure a local network interface (NI)\n" + _opts(
            "--net: the LNet net (e.g. tcp0)",
            "--if: the network interface(s) (e.g. eth0)",
            "--nid: bring the NI up on the address of this NID",
            "--ip2net: choose nets by IP address patterns",
            "--peer-timeout: seconds before a silent peer is declared dead",
            "--peer-credits: messages in flight per peer",
            "--peer-buffer-credits: router buffer credits per peer",
            "--credits: messages in flight on the NI",
            "--cpt: the CPU partitions the NI uses (e.g. [0,1])",
            "--conns-per-peer: connections per peer",
            "--skip-mr-route-setup: leave the Linux routes of the NI alone",
            "--auth-key: network authorization key (kfilnd)",
            "--traffic-class: traffic class (kfilnd)",
            "--tos: IP Type of Service of the NI's connections"),
        "del": "remove a local network interface (NI)\n" + _opts(
            "--net: the LNet net (e.g. tcp0)",
            "--nid: remove the NI with the address of this NID",
            "--if: the network interface(s) (e.g. eth0)"),
        "show": "list the local networks\n" + _opts(
            "--net: only this net (e.g. tcp0)",
            "--verbose: more detail; an argument of 2 or more adds statistics"),
        "set": "change a parameter of local NIs\n" + _opts(
            "--nid: the NI to change",
            "--net: the net to change (e.g. tcp, o2ib, kfi)",
            "--lnd-timeout: LND timeout in seconds of the --net NIs",
            "--health: the health value to set",
            "--conns-per-peer: connections per peer",
            "--all: change every local NI"),
    },
    "routing": {"show": "show router buffers and the routing state\n"},
    "stats": {"show": "show the LNet counters\n", "reset": "zero the LNet counters\n"},
    "debug": {
        "recovery": "list a recovery queue\n" + _opts(
            "--local : the local NI recovery queue",
            "--peer : the peer NI recovery queue"),
        "peer": "dump a peer's state to the debug log\n" + _opts("--nid: the peer's NID"),
        "nidlist": "show how a NID list parses\n",
    },
    "global": {"show": "show the global LNet settings\n"},
    "set": {
        "tiny_buffers": "router buffers for messages without payload\n"
                        "\tVALUE must be greater than 0\n",
        "small_buffers": "router buffers for one-page messages\n"
                         "\tVALUE must be greater than 0\n",
        "large_buffers": "router buffers for large messages\n"
                         "\tVALUE must be greater than 0\n",
        "routing": "turn routing on or off\n\t0 - off\n\t1 - on\n",
        "numa_range": "NUMA distance still considered near when choosing an NI\n"
                      "\tVALUE must be at least 0\n",
        "max_interfaces": "default maximum number of interfaces\n"
                          "\tValue must be greater than 16\n",
        "discovery": "turn peer discovery on or off\n\t0 - off\n\t1 - on (default)\n",
        "drop_asym_route": "accept or drop messages on asymmetric routes\n"
                           "\t0 - accept (default)\n\t1 - drop\n",
        "retry_count": "resends of a failed message\n\t0 - no resends\n"
                       "\t>0 - number of resends\n",
        "transaction_timeout": "time a message and its response may take\n"
                               "\t>0 - seconds\n",
        "health_sensitivity": "health lost per failure\n\t0 - no health tracking\n"
                              "\t>0 - at most 1000\n",
        "recovery_interval": "seconds between recovery pings (at least 1)\n"
                             "\t>0 - seconds\n",
        "router_sensitivity": "router NI health needed to use a route, in %\n"
                              "\t100 - fully healthy only\n\t<100 - less healthy too\n",
        "response_tracking": "which messages track their response\n"
                             "\t0 - only pings and pushes\n\t1 - GETs\n\t2 - PUTs\n"
                             "\t3 - PUTs and GETs (default)\n",
        "recovery_limit": "how long to keep recovering an unhealthy interface\n"
                          "\t0 - forever (default)\n\t>0 - seconds\n",
        "max_recovery_ping_interval": "longest interval between recovery pings\n"
                                      "\t>0 - seconds\n",
    },
    "peer": {
        "add": "add a peer or peer NIDs\n" + _opts(
            "--prim_nid: the peer's primary NID",
            "--nid: NIDs (lists and ranges) of the peer",
            "--non_mr: the peer is not Multi-Rail",
            "--ip2nets: NID ranges of the peer",
            "--lock_prim: lock the primary NID"),
        "del": "delete a peer or peer NIDs\n" + _opts(
            "--prim_nid: the peer's primary NID",
            "--nid: NIDs to remove; without it the peer is removed",
            "--ip2nets: NID ranges of the peer",
            "--force: remove a peer whose primary NID is locked"),
        "show": "show peers\n" + _opts(
            "--nid: only the peer with this NID",
            "--verbose: more detail; an argument of 2 or more adds statistics"),
        "list": "list the peers' primary NIDs\n",
        "set": "change a parameter of peer NIs\n" + _opts(
            "--nid: the peer NI to change",
            "--health: the health value to set",
            "--all: change every peer NI",
            "--state: the peer state bits (for tests and debugging only)").rstrip("\n"),
    },
    "udsp": {
        "add": "add a selection policy (UDSP)\n" + _opts(
            "--src nid|net: local NID or net to match (ip2nets syntax)",
            "--dst nid:     remote NID to match (ip2nets syntax)",
            "--rte nid:     router NID to match (ip2nets syntax)",
            "--priority p:  priority p >= 0; 0 is preferred",
            "--idx n:       put the rule at position n (default: last)"),
        "del": "delete selection policies\n" + _opts(
            "--all:   every rule", "--idx n: the rule at position n"),
        "show": "show selection policies\n" + _opts(
            "--idx n: only the rule at position n (default: every rule)"),
    },
}

PING_HELP = ("ping nid[,nid,...]\n\t --source: the local NID to send from\n"
             "\t --timeout: seconds to wait for the reply\n\t --help: this help\n")
DISCOVER_HELP = ("discover nid[,nid,...]\n\t --force: discover again even if up to date\n"
                 "\t --help: this help\n")
IMPORT_HELP = ("import FILE\nimport < FILE : import a file\n"
               "\t--add: add the configuration\n\t--del: delete the configuration\n"
               "\t--show: show the configuration\n\t--exec: run the ping/discover entries\n"
               "\t--old-api: use the ioctl interface (for tests)\n\t--help: this help\n"
               "Without one of these, --add is assumed\n")
EXPORT_HELP = ("export > FILE.yaml : export the configuration\n"
               "\t--backup: only what is needed to configure a node again\n"
               "\t--help: this help\n")


def print_help(group: str, sub: str | None = None) -> str:
    """lnetctl.c ``print_help``: one command's help, or every command of ``group``."""
    table = SUB.get(group, {})
    if sub is not None and sub in table:
        return f"{group} {sub}: {table[sub]}\n"
    return "".join(f"{group} {name}: {text}\n" for name, text in table.items())


def list_commands(names: tuple[str, ...] = PARSER_COMMANDS + tuple(TOP)) -> str:
    """parser.c ``cfs_parser_list_commands(cmds, 80, 4)``: ``%-19s `` per name, four a line."""
    lines, row = [], ""
    for i, name in enumerate(names, 1):
        row += f"{name:<19} " if len(name) < 19 else f"{name} "
        if i % 4 == 0:
            lines.append(row)
            row = ""
    if row:
        lines.append(row)
    return "".join(line + "\n" for line in lines)


def usage(prog: str) -> str:
    """parser.c ``cfs_parser_help`` without a topic."""
    return (f"usage: {prog} [COMMAND] [OPTIONS]... [ARGS]\n"
            "Without any parameters, interactive mode is invoked\n"
            f"Try '{prog} help <COMMAND>', or '{prog} --list-commands' for a list of "
            "commands.\n")


def help_topic(prog: str, words: list[str]) -> str:
    """``help WORDS`` on stderr (parser.c ``cfs_parser_help``): the words are joined without
    spaces and looked up in the top-level table (a prefix of one command is enough)."""
    line = "".join(words)
    names = list(PARSER_COMMANDS) + list(TOP)
    exact = [n for n in names if n.lower() == line.lower()]
    found = exact or [n for n in names if n.lower().startswith(line.lower())]
    if len(found) > 1:
        return (f"Ambiguous command '{clip(line)}'\nOptions: " + "".join(f"{n} " for n in found)
                + "\n")
    if not found:
        return (f"{prog}: '{clip(line)}' is not a valid command. See '{prog} --list-commands'.\n")
    name = found[0]
    return f"{line}: {TOP.get(name, 'provide useful information about a command')}\n"
