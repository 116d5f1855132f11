"""``lnetctl``: the DLC command-line tool, talking to this namespace's node daemon."""

from __future__ import annotations

import sys

from nodes.tools.remote import forward


def main() -> int:
    return forward("lnetctl", sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
