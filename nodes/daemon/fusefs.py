"""The node's ``/sys/module``: a FUSE file system the node daemon serves on its own loop.

Theory of operation: on Mininet every node has its own mount namespace (Mininet's ``mnexec
-n``: private propagation, its own sysfs on /sys), which the daemon joins (the fork server's
``setns``). There the daemon mounts this file system on ``/sys/module`` -- only there:
``mount_params`` refuses when its mount namespace is the one its starter named as the
machine's -- holding
``lnet/parameters`` and ``ksocklnd/parameters`` (``nodes/dlc/verbs/modparam_files.py``
``PARAMS``, handed over by the daemon's entry point as a ``ParamFiles``: this package imports
nothing of ``nodes/dlc``; a refusal is an ``OSError`` with the kernel's errno). A ``cat`` or an
``echo V >`` inside the node (``testbed exec NODE``, ``mnexec -a PID``) becomes a FUSE
request the daemon answers between its other work: a read prints the engine's value of the
moment, a write goes to the engine as ``lnetctl set`` does, and a refused write fails the
``write(2)`` with the kernel's errno (EINVAL; EACCES for a 0444 file or a new file), the
kernel's console line going to the node's log.

Why FUSE spoken directly on ``/dev/fuse`` (about 40 lines of the kernel's protocol,
``include/uapi/linux/fuse.h`` 7.31, no library): a tmpfs watched by inotify cannot fail a
write, so a bad value would be accepted and then reverted behind the writer's back, and
unknown files could be created; libfuse bindings (mfusepy, pyfuse3) run their own threads
or trio loop around a blocking ``fuse_main`` and need libfuse on every node machine, while
the engine lives on the daemon's asyncio loop: here the device is one more non-blocking
reader of that loop and every request is answered in one step, in order. Nothing in the
daemon ever opens its own mount (that would deadlock it). The mount dies with the namespace;
``close`` detaches it, and a daemon restarted in the same node detaches a dead one first.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno as E
import logging
import os
import stat
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("sysfs")

# opcodes (fuse.h enum fuse_opcode)
LOOKUP, FORGET, GETATTR, SETATTR = 1, 2, 3, 4
OPEN, READ, WRITE, STATFS, RELEASE, FLUSH, INIT = 14, 15, 16, 17, 18, 25, 26
OPENDIR, READDIR, RELEASEDIR, ACCESS, INTERRUPT, BATCH_FORGET = 27, 28, 29, 34, 36, 42
#: ops that make or remove names: sysfs refuses them (a shell's "cannot create": EACCES)
NAME_OPS = frozenset({5, 6, 8, 9, 10, 11, 12, 13, 35, 45})
NO_REPLY = frozenset({FORGET, INTERRUPT, BATCH_FORGET})
FUSE_ATOMIC_O_TRUNC = 1 << 3
FOPEN_DIRECT_IO = 1 << 0
IN_HEADER = struct.Struct("<IIQQIIIHH")
OUT_HEADER = struct.Struct("<IiQ")
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
MAX_WRITE = 65536
READ_SIZE = MAX_WRITE + 4096
MS_NOSUID, MS_NODEV, MS_NOEXEC, MNT_DETACH = 2, 4, 8, 2


class Param(Protocol):
    """One parameter file: ``/sys/module/MODULE/parameters/NAME``, its mode bits."""

    @property
    def module(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> int: ...


class ParamFiles(Protocol):
    """The files served (``modparam_files.ModParams``): a refused read or write raises
    ``OSError`` with the kernel's errno."""

    PARAMS: Sequence[Param]

    def read(self, param: Param) -> str: ...
    def write(self, param: Param, data: bytes) -> None: ...


@dataclass(slots=True)
class _Node:
    ino: int
    name: str
    children: dict[str, int]
    param: Param | None = None


def build_tree(files: Sequence[Param]) -> dict[int, _Node]:
    """Inodes of /sys/module: 1 the root, a directory per module (in the order ``files``
    names them) and its ``parameters``."""
    nodes = {1: _Node(1, "", {})}

    def add(parent: int, name: str, param: Param | None = None) -> int:
        ino = len(nodes) + 1
        nodes[ino] = _Node(ino, name, {}, param)
        nodes[parent].children[name] = ino
        return ino

    for module in dict.fromkeys(p.module for p in files):
        params = add(add(1, module), "parameters")
        for p in files:
            if p.module == module:
                add(params, p.name, p)
    return nodes


class ParamFS:
    """One node's FUSE session on ``/sys/module`` (see the module docstring)."""

    def __init__(self, params: ParamFiles, target: str) -> None:
        self.params = params
        self.target = target
        self.nodes = build_tree(params.PARAMS)
        self.fd = -1
        self.handles: dict[int, bytes] = {}
        self.next_fh = 1
        self.mounted_at = int(time.time())

    # -- mounting ---------------------------------------------------------------------------
    def mount(self, loop: asyncio.AbstractEventLoop) -> None:
        """Mount and serve on ``loop``; OSError when the mount is refused."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.umount2(self.target.encode(), MNT_DETACH)  # a dead daemon's mount, if any
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        opts = (f"fd={self.fd},rootmode=40755,user_id=0,group_id=0,allow_other,"
                "default_permissions").encode()
        if libc.mount(b"lnet", self.target.encode(), b"fuse.lnet",
                      MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            self.fd = -1
            raise OSError(err, f"mount fuse on {self.target}: {os.strerror(err)}")
        loop.add_reader(self.fd, self._readable)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Unmount (lazily: an open file keeps it until closed) and stop serving."""
        if self.fd < 0:
            return
        if loop is not None:
            loop.remove_reader(self.fd)
        ctypes.CDLL(None).umount2(self.target.encode(), MNT_DETACH)
        os.close(self.fd)
        self.fd = -1

    # -- the protocol -----------------------------------------------------------------------
    def _readable(self) -> None:
        while self.fd >= 0:
            try:
                req = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (E.EINTR, E.ENOENT):  # interrupted, or a request withdrawn
                    continue
                log.warning("sysfs: /dev/fuse: %s; no longer serving %s", e.strerror,
                            self.target)
                asyncio.get_running_loop().remove_reader(self.fd)
                os.close(self.fd)
                self.fd = -1
                return
            self.serve(req)

    def serve(self, req: bytes) -> None:
        """Answer one request (its reply written to the device, none for a forget)."""
        _len, op, unique, ino, _uid, _gid, _pid, _ext, _pad = IN_HEADER.unpack_from(req)
        if op in NO_REPLY:
            return
        try:
            body = self._answer(op, ino, req[IN_HEADER.size:])
        except OSError as e:  # a refusal: the kernel's errno
            self._reply(unique, -(e.errno or E.EIO), b"")
        except (struct.error, ValueError, LookupError) as e:  # never leave a caller hanging
            log.error("sysfs: request %d (opcode %d) refused: %r", unique, op, e)
            self._reply(unique, -E.EIO, b"")
        else:
            self._reply(unique, 0, body)

    def _reply(self, unique: int, error: int, body: bytes) -> None:
        try:
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), error, unique) + body)
        except OSError as e:  # ENOENT: the request was interrupted meanwhile
            if e.errno != E.ENOENT:
                log.warning("sysfs: reply: %s", e.strerror)

    def _answer(self, op: int, ino: int, body: bytes) -> bytes:
        node = self.nodes.get(ino)
        if op == INIT:
            _major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
            return struct.pack("<IIIIHHIIHHI28x", 7, min(minor, 31), readahead,
                               FUSE_ATOMIC_O_TRUNC, 16, 12, MAX_WRITE, 1, 0, 0, 0)
        if node is None:
            raise OSError(E.ENOENT, "stale inode")
        if op == LOOKUP:
            child = node.children.get(body.split(b"\0", 1)[0].decode("utf-8", "replace"))
            if child is None:
                raise OSError(E.ENOENT, "no such file")
            return struct.pack("<QQQQII", child, 0, 3600, 0, 0, 0) + self._attr(child)
        if op in (GETATTR, SETATTR):  # a chmod/truncate changes nothing
            return struct.pack("<QII", 0, 0, 0) + self._attr(ino)
        if op == OPEN:
            return self._open(node, struct.unpack_from("<I", body)[0])
        if op == READ:
            fh, offset, size = struct.unpack_from("<QQI", body)
            if offset == 0 or fh not in self.handles:  # sysfs: the text made at offset 0
                self.handles[fh] = self._text(node)
            return self.handles[fh][offset:offset + size]
        if op == WRITE:
            _fh, _offset, size = struct.unpack_from("<QQI", body)
            return self._write(node, body[40:40 + size])
        if op == RELEASE:
            self.handles.pop(struct.unpack_from("<Q", body)[0], None)
            return b""
        if op in (FLUSH, RELEASEDIR, ACCESS):
            return b""
        if op == OPENDIR:
            return struct.pack("<QII", 0, 0, 0)
        if op == READDIR:
            _fh, offset, size = struct.unpack_from("<QQI", body)
            return self._readdir(node, offset, size)
        if op == STATFS:
            return struct.pack("<QQQQQIIII24x", 0, 0, 0, 0, 0, 4096, 255, 4096, 0)
        if op in NAME_OPS:
            raise OSError(E.EACCES, "sysfs makes no names")
        raise OSError(E.ENOSYS, "not implemented")

    def _attr(self, ino: int) -> bytes:
        node = self.nodes[ino]
        if node.param is None:
            mode, nlink, size = stat.S_IFDIR | 0o755, 2, 0
        else:
            mode, nlink, size = stat.S_IFREG | node.param.mode, 1, 4096
        t = self.mounted_at
        return ATTR.pack(ino, size, 0, t, t, t, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)

    def _open(self, node: _Node, flags: int) -> bytes:
        if node.param is None:
            raise OSError(E.EISDIR, "a directory")
        if flags & os.O_ACCMODE != os.O_RDONLY and not node.param.mode & 0o200:
            raise OSError(E.EACCES, "read-only")
        fh, self.next_fh = self.next_fh, self.next_fh + 1
        return struct.pack("<QII", fh, FOPEN_DIRECT_IO, 0)

    def _text(self, node: _Node) -> bytes:
        assert node.param is not None
        return self.params.read(node.param).encode()

    def _write(self, node: _Node, data: bytes) -> bytes:
        if node.param is None:
            raise OSError(E.EISDIR, "a directory")
        try:
            self.params.write(node.param, data)
        except OSError as e:
            log.error("LNetError: %s/%s: %s", node.param.module, node.param.name, e.strerror)
            raise
        return struct.pack("<II", len(data), 0)

    def _readdir(self, node: _Node, offset: int, size: int) -> bytes:
        out = b""
        names = list(node.children.items())
        for index in range(offset, len(names)):
            name, child = names[index]
            raw = name.encode()
            kind = 8 if self.nodes[child].param is not None else 4  # DT_REG / DT_DIR
            entry = struct.pack("<QQII", child, index + 1, len(raw), kind) + raw
            entry += b"\0" * (-len(entry) % 8)
            if len(out) + len(entry) > size:
                break
            out += entry
        return out


def mount_namespace() -> int:
    """This process's mount namespace (the inode of /proc/self/ns/mnt; 0 if unknown)."""
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return 0


def mount_params(params: ParamFiles, target: str, loop: asyncio.AbstractEventLoop,
                 machine_ns: int) -> ParamFS | None:
    """Serve ``params`` on ``target`` (/sys/module) in this node's own mount namespace; None
    (one line in the log) when it is ``machine_ns`` (the starter's: the machine's), no
    /dev/fuse, or the mount is refused."""
    own = mount_namespace()
    if own == 0 or own == machine_ns:
        log.warning("sysfs: not mounting /sys/module: this process is in the machine's "
                    "mount namespace")
        return None
    fs = ParamFS(params, target)
    try:
        fs.mount(loop)
    except OSError as e:
        log.warning("sysfs: /sys/module/{lnet,ksocklnd}/parameters not served: %s",
                    e.strerror or e)
        return None
    return fs


__all__ = ["ParamFS", "ParamFiles", "build_tree", "mount_namespace", "mount_params"]
