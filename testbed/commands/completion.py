"""``testbed completion bash|zsh|tcsh``: a shell completion script for ``testbed`` (issue 18).

Theory of operation: shtab turns the argparse parser into a static script (subcommands,
options, choices), so a tab press runs no Python; what changes at run time is completed by
shell functions in the preamble: ``-n`` by the testbeds in the run root (as
``runstate.runroot`` picks it), a topology by the files here and the built-in names.
Install: ``testbed completion bash > ~/.local/share/bash-completion/completions/testbed``
(zsh: a file named ``_testbed`` on ``$fpath``).
"""

from __future__ import annotations

import argparse
import sys

from testbed.commands.common import Named

SHELLS = ("bash", "zsh", "tcsh")
#: ``action.complete`` of ``-n NAME`` (testbed.cli)
TESTBED_NAMES = {"bash": "_shtab_testbed_names", "zsh": "_shtab_testbed_names_zsh"}

_BASH = r"""
_shtab_testbed_runroot() {
  if [ -n "${LNET_TESTBED_RUNROOT:-}" ]; then echo "$LNET_TESTBED_RUNROOT"
  elif [ "$(id -u)" = 0 ]; then echo /run/lnet-testbed
  elif [ -d "${XDG_RUNTIME_DIR:-}" ]; then echo "$XDG_RUNTIME_DIR/lnet-testbed"
  else echo "/tmp/lnet-testbed-$(id -u)"; fi
}
_shtab_testbed_names() {
  local root; root="$(_shtab_testbed_runroot)"
  compgen -W "$(cd "$root" 2>/dev/null && for d in */; do
    [ "$d" = by-netns/ ] || echo "${d%/}"; done)" -- "$1"
}
_shtab_testbed_topologies() {
  compgen -W "BUILTIN" -- "$1"
  compgen -f -- "$1"
}
"""
_ZSH = r"""
_shtab_testbed_names_zsh() {
  local root=${LNET_TESTBED_RUNROOT:-}
  if [[ -z $root ]]; then
    if [[ $EUID = 0 ]]; then root=/run/lnet-testbed
    elif [[ -d ${XDG_RUNTIME_DIR:-} ]]; then root=$XDG_RUNTIME_DIR/lnet-testbed
    else root=/tmp/lnet-testbed-$EUID; fi
  fi
  local -a names; names=(${root}/*(N/:t)); names=(${names:#by-netns})
  compadd -a names
}
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell``."""
    import shtab

    from testbed.plan import builtin_names

    preamble = {"bash": _BASH.replace("BUILTIN", " ".join(builtin_names())),
                "zsh": _ZSH}.get(shell, "")
    return str(shtab.complete(parser, shell=shell, preamble=preamble))


def cmd_completion(args: argparse.Namespace) -> int:
    """The script of the whole ``testbed`` parser (``args.parser``, set by testbed.cli)."""
    sys.stdout.write(script(args.parser, args.shell))
    return 0


def register(sub: argparse._SubParsersAction, named: Named) -> None:  # type: ignore[type-arg]
    text = "print a shell completion script (bash, zsh, tcsh)"
    sp = sub.add_parser("completion", help=text, description=text + ": e.g. `testbed "
                        "completion bash > ~/.local/share/bash-completion/completions/testbed`")
    sp.add_argument("shell", choices=SHELLS)
    sp.set_defaults(func=cmd_completion)
