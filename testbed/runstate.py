"""Run-time layout of testbeds on this machine: run directories, state file, event log.

Theory of operation (STYLE rule 9): everything a testbed creates is recorded in its run
directory *before* it is created, so that ``testbed clean`` can undo it after a ``kill -9`` of
any of our processes. Layout::

    RUNROOT/                       env LNET_TESTBED_RUNROOT, else /run/lnet-testbed for root,
                                   $XDG_RUNTIME_DIR/lnet-testbed or /tmp/lnet-testbed-$UID
                                   for anyone else (a sim testbed needs no root)
      by-netns/<inode> -> RUNDIR/nodes/NODE.sock   (written by node daemons)
      NAME/                        RUNDIR, mode 0700
        state.json                 backend, kernel names, pids, node -> host pid, created order
        ctl.sock                   the supervisor's (sim: the server's) ZeroMQ ROUTER
        supervisor.log
        events.jsonl               {"t": unix time, "kind": ..., ...} one per line
        nodes/NODE.sock, NODE.log  node daemons

The state file is replaced atomically (write to a temporary file, ``os.replace``) so a crash
never leaves half a JSON document. RUNROOT is read from the environment at each call, so a
test can point one testbed at a private root.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

ENV_RUNROOT = "LNET_TESTBED_RUNROOT"
ENV_NAME = "LNET_TESTBED"
ENV_RUNDIR = "LNET_TESTBED_RUNDIR"
DEFAULT_RUNROOT = "/run/lnet-testbed"
BY_NETNS = "by-netns"
STATE_FILE = "state.json"
EVENTS_FILE = "events.jsonl"
CTL_SOCK = "ctl.sock"
SUPERVISOR_LOG = "supervisor.log"
NODES_DIR = "nodes"


def runroot(root: str | Path | None = None) -> Path:
    """The directory holding every testbed's run directory: ``root``, else
    $LNET_TESTBED_RUNROOT, else /run/lnet-testbed for root and a directory of the user's own
    for anyone else ($XDG_RUNTIME_DIR/lnet-testbed, or /tmp/lnet-testbed-$UID)."""
    if root is not None:
        return Path(root)
    if os.environ.get(ENV_RUNROOT):
        return Path(os.environ[ENV_RUNROOT])
    if os.geteuid() == 0:
        return Path(DEFAULT_RUNROOT)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "lnet-testbed"
    return Path(f"/tmp/lnet-testbed-{os.geteuid()}")


def _own_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) if missing and refuse one that is not ours: in /tmp
    another user could have made it first, or a symlink to somewhere else."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PermissionError(f"{path} is not a directory owned by uid {os.geteuid()}")


def rundir(name: str, root: str | Path | None = None) -> Path:
    """RUNROOT/NAME. A name that is not a testbed's (``by-netns``, ``..``, ``a/b``) is a
    caller's bug here: every name a user gives is checked before (``base.check_name``)."""
    if name == BY_NETNS or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a testbed name: {name!r}")
    return runroot(root) / name


def by_netns_dir(root: str | Path | None = None) -> Path:
    return runroot(root) / BY_NETNS


def ctl_sock(rdir: Path) -> Path:
    return rdir / CTL_SOCK


def node_sock(rdir: Path, node: str) -> Path:
    return rdir / NODES_DIR / f"{node}.sock"


def node_log(rdir: Path, node: str) -> Path:
    return rdir / NODES_DIR / f"{node}.log"


def create_rundir(name: str, root: str | Path | None = None) -> Path:
    """Create RUNROOT/NAME (mode 0700) and its nodes/ directory; fail if it exists.

    Raises:
        FileExistsError: the testbed is up, or a leftover of it remains.
    """
    base = runroot(root)
    _own_dir(base)
    (base / BY_NETNS).mkdir(exist_ok=True)
    rdir = base / name
    rdir.mkdir(mode=0o700)  # atomic: two `up` of one name cannot both pass
    os.chmod(rdir, 0o700)
    (rdir / NODES_DIR).mkdir(mode=0o700)
    return rdir


def read_state(rdir: Path) -> dict[str, Any]:
    """The state of the testbed in ``rdir`` ({} if there is none or it is unreadable)."""
    try:
        data = json.loads((rdir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state(rdir: Path, state: dict[str, Any]) -> None:
    """Replace ``rdir``/state.json atomically with ``state``."""
    tmp = rdir / f".{STATE_FILE}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, rdir / STATE_FILE)


def append_event(rdir: Path, kind: str, **fields: Any) -> dict[str, Any]:
    """Append one event ``{"t": now, "kind": kind, **fields}`` to events.jsonl."""
    event: dict[str, Any] = {"t": time.time(), "kind": kind, **fields}
    line = json.dumps(event, sort_keys=True) + "\n"
    fd = os.open(rdir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return event


def read_events(rdir: Path) -> list[dict[str, Any]]:
    """Every event logged so far (unparsable lines are skipped)."""
    events = []
    try:
        lines = (rdir / EVENTS_FILE).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def list_testbeds(root: str | Path | None = None) -> list[str]:
    """Names of the testbeds that have a run directory under RUNROOT (up or leftover)."""
    base = runroot(root)
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    return [p.name for p in entries if p.is_dir() and p.name != BY_NETNS]


def netns_links(rdir: Path, root: str | Path | None = None) -> list[Path]:
    """by-netns symlinks that point into ``rdir`` (the daemons of that testbed)."""
    prefix = str(rdir.resolve() if rdir.exists() else rdir) + os.sep
    raw_prefix = str(rdir) + os.sep
    found = []
    try:
        entries = sorted(by_netns_dir(root).iterdir())
    except OSError:
        return []
    for link in entries:
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target.startswith((prefix, raw_prefix)):
            found.append(link)
    return found


def pid_alive(pid: int | None) -> bool:
    """True if process ``pid`` exists and is not a zombie."""
    if not pid or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # state is the field after the parenthesised command name
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def process_tag(pid: int) -> str | None:
    """The LNET_TESTBED value in a process's environment, or None."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{ENV_NAME}=".encode()
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def tagged_pids(name: str | None = None) -> dict[int, str]:
    """Live processes carrying LNET_TESTBED (=``name`` if given): pid -> testbed name."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        tag = process_tag(pid)
        if tag is None or (name is not None and tag != name):
            continue
        if pid_alive(pid):
            found[pid] = tag
    return found


def process_uid(pid: int) -> int | None:
    """The uid a live process runs as (None: no such process)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def access_problem(path: Path) -> str | None:
    """Why this user cannot look into ``path`` (a run root or run directory), or None.

    A user other than root meets root's testbeds only through LNET_TESTBED_RUNROOT; their
    directories are 0700, so "not running" would be a lie: say whose they are (issue 18).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    if os.access(path, os.R_OK | os.X_OK):
        return None
    return (f"{path} belongs to uid {st.st_uid} and cannot be read as uid {os.geteuid()} "
            f"(run as {'root' if st.st_uid == 0 else f'uid {st.st_uid} or root'})")


def unreadable_hint(root: str | Path | None = None) -> str:
    """A note for a user who sees no testbed: their run root is unreadable, or root's
    testbeds live in a run root they do not look at."""
    base = runroot(root)
    problem = access_problem(base)
    if problem is not None:
        return f"; {problem}"
    default = Path(DEFAULT_RUNROOT)
    if os.geteuid() != 0 and base != default and default.is_dir():
        return (f"; root's testbeds, if any, are under {default}, not visible as uid "
                f"{os.geteuid()}")
    return ""


def supervisor_alive(name: str, state: dict[str, Any]) -> bool:
    """Is the supervisor recorded in ``state`` still running (and still ours, not a reused pid)?"""
    pid = state.get("supervisor_pid")
    return isinstance(pid, int) and pid_alive(pid) and process_tag(pid) == name
