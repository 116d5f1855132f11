"""Kernel object names for one testbed: short, owner-tagged, collision-checked.

Theory of operation (STYLE rules 9 and 12): Linux interface names hold at most 15 characters
(IFNAMSIZ 16 with the NUL), far too few for a testbed name plus a segment and a node. So every
kernel object carries ``tb`` + a 6-hex hash of the testbed name, plus indexes:

* bridge of segment *i*: ``tb{h}s{i}``
* switch-side veth of node *j* on segment *i*: ``tb{h}s{i}p{j}``

The port name must *contain* the bridge name: Mininet's ``LinuxBridge.start`` only attaches the
interfaces whose name contains its own. Inside a node the other end is called eth0, eth1, ...
as on a real host; only the root-namespace side needs to be unique.

The state file maps the hash back to the long name. ``KERNEL_NAME_RE`` lets ``testbed clean``
find our objects; a hash collision (or a leftover) is refused before anything is created,
because ``LinuxBridge.start`` would otherwise ``brctl delbr`` somebody else's bridge.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

#: Longest usable interface name (IFNAMSIZ - 1).
IFNAMSIZ_MAX = 15

#: Our kernel objects, and nothing else: group 1 is the testbed hash.
KERNEL_NAME_RE = re.compile(r"^tb([0-9a-f]{6})s[0-9]+(?:p[0-9]+)?$")

SYS_CLASS_NET = Path("/sys/class/net")


class NameCollision(Exception):
    """A kernel name this testbed needs is already taken."""


def short_hash(testbed: str) -> str:
    """Six hex digits of sha1 over the testbed name (the tag of all its kernel objects)."""
    return hashlib.sha1(testbed.encode()).hexdigest()[:6]


def _checked(name: str) -> str:
    if len(name) > IFNAMSIZ_MAX:
        raise ValueError(f"interface name {name!r} is longer than {IFNAMSIZ_MAX} characters")
    return name


def bridge_name(testbed: str, segment_index: int) -> str:
    """Name of the Linux bridge emulating segment number ``segment_index``."""
    return _checked(f"tb{short_hash(testbed)}s{segment_index}")


def port_name(testbed: str, segment_index: int, node_index: int) -> str:
    """Name of the root-namespace veth end of node ``node_index`` on segment ``segment_index``."""
    return _checked(f"tb{short_hash(testbed)}s{segment_index}p{node_index}")


def hash_of(kernel_name: str) -> str | None:
    """The testbed hash a kernel interface name carries, or None if it is not one of ours."""
    m = KERNEL_NAME_RE.match(kernel_name)
    return m.group(1) if m else None


def is_bridge(kernel_name: str) -> bool:
    return KERNEL_NAME_RE.match(kernel_name) is not None and "p" not in kernel_name[2 + 6 :]


def existing_interfaces(sys_class_net: Path = SYS_CLASS_NET) -> list[str]:
    """Interface names present in the root network namespace (as seen from here)."""
    try:
        return sorted(p.name for p in sys_class_net.iterdir())
    except OSError:
        return []


def ours(hashes: Iterable[str] | None = None, sys_class_net: Path = SYS_CLASS_NET) -> list[str]:
    """Our interfaces present now; only those with one of ``hashes`` if given."""
    wanted = set(hashes) if hashes is not None else None
    found = []
    for name in existing_interfaces(sys_class_net):
        h = hash_of(name)
        if h is not None and (wanted is None or h in wanted):
            found.append(name)
    return found


def check_free(testbed: str, sys_class_net: Path = SYS_CLASS_NET) -> None:
    """Refuse to build ``testbed`` if any interface carrying its hash already exists.

    Raises:
        NameCollision: naming the interface and what to do about it.
    """
    taken = ours([short_hash(testbed)], sys_class_net)
    if taken:
        raise NameCollision(
            f"interface {taken[0]} already exists: a leftover of an earlier testbed "
            f"{testbed} (remove it with `testbed down -n {testbed}`), or another testbed's "
            "whose name has the same hash (choose another name)"
        )
