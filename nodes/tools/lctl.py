"""``lctl``: the network subset of Lustre's lctl (list_nids, ping), via the node daemon."""

from __future__ import annotations

import sys

from nodes.tools.remote import forward


def main() -> int:
    return forward("lctl", sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
