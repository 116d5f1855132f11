"""One PUT/GET burst's bookkeeping, sans-I/O: the one burst implementation (issue 29 item 3).

Theory of operation: ``testbed traffic``, ``NodeHandle.put/get`` and the pytest ``Traffic``
helper all end in a burst of ``count`` LNet PUTs (ACKed) or GETs (answered with a REPLY of
``size`` bytes) to lnet_selftest's bulk portal (52), at most :data:`MAX_INFLIGHT` in flight;
each message succeeds when its final event is the ACK/REPLY with status 0 (spec §4.4). The
node daemon runs it on its loop (``nodes/daemon/control.py``), the simulator on its fabric
(``testbed/sim/node.py``). What a burst *is* lives here, once: which message starts next
(:meth:`Burst.start`, the engine's ``put``/``get``), what a final MD event counts
(:meth:`Burst.final`), when it is over, and the totals of its reply and ``traffic_end``
event (:meth:`Burst.end`). How time moves while it runs (an event loop, the virtual clock)
is the caller's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.echo import shown
from nodes.lnet.errors import LNetConfigError
from nodes.lnet.hdr import LNET_MTU
from nodes.lnet.nid import NID
from nodes.selftest.wire import SRPC_RDMA_PORTAL as BULK_PORTAL  # lnet_selftest's bulk portal

if TYPE_CHECKING:
    from nodes.lnet.actions import MDEvent

#: PUTs or GETs of one burst in flight at once.
MAX_INFLIGHT = 64


def burst_args(req: dict[str, Any]) -> tuple[NID, int, int, NID | None, int | None] | str:
    """Check a ``put``/``get`` request's arguments: (dst, count, size, src, numa), or a
    one-line error naming the bad argument (the daemon's verb and the sim's node)."""
    try:
        dst = NID.parse(str(req.get("dst", "")))
    except LNetConfigError as e:
        return f"dst: {e.descr}"
    try:
        src = NID.parse(str(req["src"])) if req.get("src") else None
    except LNetConfigError as e:
        return f"src: {e.descr}"
    count, size = req.get("count", 1), req.get("size", 4096)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 1_000_000:
        return f"count must be an integer 1..1000000, not {shown(count)}"
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= LNET_MTU:
        return f"size must be an integer 0..{LNET_MTU}, not {shown(size)}"
    numa = req.get("numa")  # NUMA node of the message memory (snd-020, emulated)
    if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int) or numa < 0):
        return f"numa must be a NUMA node number >= 0, not {shown(numa)}"
    return dst, count, size, src, numa


class Burst:
    """``count`` PUTs or GETs of ``size`` bytes to ``dst`` from one engine (module doc)."""

    def __init__(self, engine: Any, op: str, dst: NID, count: int, size: int,
                 src: NID | None = None, numa: int | None = None) -> None:
        self.engine, self.op, self.dst, self.count, self.size = engine, op, dst, count, size
        self.src, self.numa = src, numa
        self.want = "ACK" if op == "put" else "REPLY"
        self.payload = bytes(size) if op == "put" else b""
        self.started = 0  # messages handed to the engine
        self.inflight = 0  # started, final event not yet seen
        self.done = 0  # final events seen
        self.ok = 0  # of which the ACK/REPLY with status 0
        self.errors: dict[str, int] = {}  # failures by "KIND:status"

    def room(self) -> bool:
        """Another message may start now (messages left, fewer than 64 in flight)."""
        return self.started < self.count and self.inflight < MAX_INFLIGHT

    def start(self, now: float) -> tuple[int, list[Any]]:
        """The next message: the engine's ``(md_handle, actions)``; the caller watches the
        handle (final event to :meth:`final`) and carries the actions out."""
        self.started += 1
        self.inflight += 1
        started: tuple[int, list[Any]]
        if self.op == "put":
            started = self.engine.put(now, self.dst, payload=self.payload, portal=BULK_PORTAL,
                                      src=self.src, numa=self.numa)
        else:
            started = self.engine.get(now, self.dst, length=self.size, portal=BULK_PORTAL,
                                      src=self.src, numa=self.numa)
        return started

    def final(self, ev: MDEvent) -> bool:
        """Count ``ev`` if it is a message's final event (``unlinked``); True if it was."""
        if not ev.unlinked:
            return False
        self.inflight -= 1
        self.done += 1
        if ev.kind != self.want or ev.status != 0:
            key = f"{ev.kind}:{ev.status}"
            self.errors[key] = self.errors.get(key, 0) + 1
        else:
            self.ok += 1
        return True

    @property
    def finished(self) -> bool:
        return self.done >= self.count

    def end(self, sent: int | None = None) -> dict[str, Any]:
        """The fields of the ``traffic_end`` event and of the reply (docs/events.md §1.6):
        messages started (``sent``: all of them unless cut short), completed, failed,
        failures by final event kind and status."""
        return {"op": self.op, "dst": str(self.dst),
                "sent": self.count if sent is None else sent, "completed": self.ok,
                "failed": sum(self.errors.values()), "errors": dict(self.errors)}

    def reply(self) -> dict[str, Any]:
        """A finished burst's reply."""
        end = self.end()
        return {"ok": True, **{k: end[k] for k in ("sent", "completed", "failed", "errors")}}
