"""``lctl``: the network subset of Lustre's lctl, via the node daemon.

``lctl dk FILE`` writes the debug log into FILE here, as lctl does, and prints the summary
line; without arguments commands are read from stdin, one per line.
"""

from __future__ import annotations

import sys

from nodes.dlc.verbs.lnetctl_export import write_export
from nodes.tools.remote import call, emit, interactive


def run(argv: list[str]) -> int:
    if argv and argv[0] in ("dk", "debug_kernel") and len(argv) > 1 \
            and not argv[1].isdigit():
        rc, out, err = call("lctl", argv[:1])
        if rc == 0:
            *lines, summary = out.splitlines(keepends=True) or [""]
            why = write_export(argv[1], "".join(lines))
            if why is not None:
                return emit((1, "", why.replace("lnetctl export", "lctl dk")))
            out = summary
        return emit((rc, out, err))
    return emit(call("lctl", argv))


def main() -> int:
    if not sys.argv[1:]:
        return interactive("lctl", run)
    return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
