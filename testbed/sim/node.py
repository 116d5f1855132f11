"""A simulated node's handle: the node daemon's verbs, run in-process on the virtual clock.

Theory of operation: ``averb`` and ``aburst`` are the daemon's ``lnetctl``/``lctl`` and
``put``/``get`` control verbs (``nodes/daemon/control.py``) as coroutines over the node's
``SimRuntime``. Unpaced (the in-process testbed, a server at ``--speed 0``) they never
suspend: a blocking verb advances virtual time itself until its MDs complete, and the sync
API (``verb``, ``put``, ``get``) drives them with ``run_sync`` under the testbed's lock (a
``Traffic`` thread and the test's own verbs interleave between verbs, never inside the
fabric). Paced (a server at ``--speed`` > 0) the server awaits them while its pacing task
moves the clock. ``exec`` runs an lnetctl/lctl command line, or reads and writes the node's
/sys/module parameter files (``sysfs_exec.py``), and refuses anything else: there is no
namespace, no shell, no other program in the simulator.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nodes.burst import Burst, burst_args
from nodes.dlc import request as frontend
from nodes.dlc.verbs import lctl_cmd, lnetctl_cmd, lst_verb
from nodes.dlc.verbs.modparam_files import ModParams
from nodes.echo import shown
from nodes.lnet.actions import MDEvent
from testbed import shellwords
from testbed.base import Completed, NodeVerbs, TestbedError
from testbed.bringup import completed
from testbed.plan import ImportFile, Step
from testbed.plan import request as step_request
from testbed.sim import sysfs_exec
from testbed.sim.runtime import SimRuntime, run_sync

if TYPE_CHECKING:
    from testbed.sim.inproc import SimTestbed

MODULES = {"lnetctl": lnetctl_cmd, "lctl": lctl_cmd, "lst": lst_verb}


def exec_words(argv: Sequence[str]) -> tuple[str, list[str]]:
    """``testbed exec`` on the sim: ``(verb, argv)`` of one lnetctl/lctl/lst command line (argv,
    one string, or ``sh -c STRING``), or of a ``cat``/``echo``/``ls`` on /sys/module
    (``sysfs_exec``).

    Raises:
        TestbedError: anything else, with the one-line reason.
    """
    words = list(argv)
    if len(words) == 3 and words[0] in ("sh", "bash") and words[1] == "-c":
        words = [words[2]]
    if len(words) == 1:
        try:
            words = shellwords.split(words[0])
        except ValueError as exc:
            raise TestbedError(f"sim backend: exec: cannot parse {shown(words[0])}: {exc}"
                               ) from None
    env = []  # `[env] LST_SESSION=1 lst ...`: lst's environment, handed to the lst verb
    while words and (words[0] == "env" or ("=" in words[0]
                     and words[0].split("=", 1)[0].isidentifier())):
        env += [] if words[0] == "env" else [words[0]]
        words = words[1:]
    if env and words and os.path.basename(words[0]) == "lst":
        words = [words[0], *env, *words[1:]]
    if not env and sysfs_exec.is_sysfs(words):  # a node's /sys/module parameter files
        return sysfs_exec.VERB, words
    if not words or os.path.basename(words[0]) not in MODULES or any(
            w in (";", "&&", "||", "|", ">", "<") for w in words):
        line = " ".join(words) or "(nothing)"
        raise TestbedError(f"sim backend: exec runs one lnetctl, lctl or lst command (or cat, "
                           f"echo, ls on /sys/module/*/parameters), not "
                           f"{shown(line)} "
                           "(the simulator has no namespaces, shells or other programs)")
    return os.path.basename(words[0]), words[1:]


class SimNodeHandle(NodeVerbs):
    """``NodeHandle`` of a simulated node: verbs run in-process on the virtual clock."""

    def __init__(self, testbed: SimTestbed, rt: SimRuntime) -> None:
        self.testbed = testbed
        self.name = rt.name
        self.rt = rt
        self.pid = self.host_pid = os.getpid()
        self.sock = ""
        self.nids = list(rt.plan.nids)
        self._modparams: ModParams | None = None

    def __repr__(self) -> str:
        return f"<SimNodeHandle {self.testbed.name}/{self.name}>"

    # -- verbs ----------------------------------------------------------------------------------
    async def averb(self, cmd: str, argv: Sequence[str]) -> Completed:
        """Daemon verb ``cmd`` with ``argv`` exactly as given (the daemon's dispatch)."""
        if cmd == sysfs_exec.VERB:  # cat/echo/ls on /sys/module (sysfs_exec.py)
            self.testbed.check_alive(self.name)
            done = sysfs_exec.run(self.modparams(), argv)
            self.testbed.fabric.flush(self.name)
            return done
        module = MODULES.get(cmd)
        if module is None:
            raise TestbedError(f"node {self.name}: unknown verb {cmd!r}")
        self.testbed.check_alive(self.name)
        rc, out, err = await module.run(self.rt, list(argv))
        self.rt.driver.sync_lnd_timeouts()  # `set transaction_timeout|retry_count` moves them
        self.testbed.fabric.flush(self.name)  # health notices of direct engine calls
        return Completed(rc, out, err)

    def modparams(self) -> ModParams:
        """This node's /sys/module parameter files, over its current runtime (a restarted or
        reloaded node's files start again from its module parameters)."""
        if self._modparams is None or self._modparams.rt is not self.rt:
            self._modparams = ModParams(self.rt, self.rt.plan.module_params)
        return self._modparams

    def verb(self, cmd: str, argv: Sequence[str], timeout: float = 60.0) -> Completed:
        with self.testbed.lock:
            return run_sync(self.averb(cmd, argv))  # type: ignore[no-any-return]

    async def asend(self, step: Step) -> Completed:
        """One configuration step, handed to the daemon's own front end in-process: a typed
        command as it is (``nodes.dlc.request.apply_command``, the reply a daemon gives: no
        request built, nothing serialised or parsed again), a raw ``lnet:`` block as the
        ``lnetctl import FILE`` argv a daemon gets (``testbed.plan.request``)."""
        self.testbed.check_alive(self.name)
        if isinstance(step, ImportFile):
            reply = await frontend.handle(self.rt, step_request(step))
        else:
            reply = await frontend.apply_command(self.rt, step)
        self.rt.driver.sync_lnd_timeouts()  # `set transaction_timeout|retry_count` moves them
        self.testbed.fabric.flush(self.name)
        return completed(reply)

    def send(self, step: Step) -> Completed:
        with self.testbed.lock:
            return run_sync(self.asend(step))  # type: ignore[no-any-return]

    def exec(self, argv: Sequence[str], *, input: str | None = None,
             timeout: float = 60.0) -> Completed:
        """One ``lnetctl``/``lctl`` command line (see ``exec_words``)."""
        cmd, words = exec_words(argv)
        return self.verb(cmd, words, timeout)

    def log(self) -> str:
        """``NodeHandle.log``: this node's engine console lines, at virtual times (the fabric
        keeps no level)."""
        return "".join(f"{t:.6f} {name} lnet: {text}\n"
                       for t, name, text in self.testbed.fabric.log if name == self.name)

    # -- traffic --------------------------------------------------------------------------------
    def put(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            src: str | None = None, numa: int | None = None) -> dict[str, Any]:
        """A burst of PUTs to the bulk portal, 64 in flight, like the daemon's ``put`` verb."""
        with self.testbed.lock:
            return run_sync(self.aburst("put", dst, count, size, src, numa))  # type: ignore

    def get(self, dst: str, count: int = 1, size: int = 0, timeout: float = 120.0,
            src: str | None = None, numa: int | None = None) -> dict[str, Any]:
        """A burst of GETs of ``size`` bytes from the bulk portal, like the daemon's ``get``
        verb (each succeeds on its REPLY)."""
        with self.testbed.lock:
            return run_sync(self.aburst("get", dst, count, size, src, numa))  # type: ignore

    async def aburst(self, op: str, dst: str, count: int, size: int, src: str | None = None,
                     numa: int | None = None) -> dict[str, Any]:
        """``count`` PUTs (ACKed) or GETs (REPLY of ``size`` bytes), at most 64 in flight;
        each succeeds when its final event is the ACK/REPLY with status 0 (spec §4.4)."""
        self.testbed.check_alive(self.name)
        parsed = burst_args({"dst": self.resolve_nid(dst), "count": count, "size": size,
                             "src": src, "numa": numa})
        if isinstance(parsed, str):
            return {"ok": False, "error": parsed}
        dnid, count, size, snid, numa = parsed
        rt, fab = self.rt, self.testbed.fabric
        burst = Burst(rt.engine, op, dnid, count, size, snid, numa)  # (nodes/burst.py)
        paced = self.testbed.paced
        finished: asyncio.Future[None] | None = (
            asyncio.get_running_loop().create_future() if paced else None)

        def on_event(ev: MDEvent) -> None:
            if burst.final(ev) and finished is not None:  # refill outside the dispatch
                asyncio.get_running_loop().call_soon(refill)

        def refill() -> None:
            while burst.room():
                handle, actions = burst.start(fab.now)
                rt.driver.watch(handle, on_event)
                rt.execute(actions)
            if finished is not None and burst.finished and not finished.done():
                finished.set_result(None)

        # workload events in the event log, as the daemon's verb writes them (docs/events.md)
        fab.record("traffic_start", self.name, op=op, dst=str(dnid), count=count, size=size)
        try:
            refill()
            if finished is not None:
                self.testbed.kick()
                await finished
            while not burst.finished:
                if not fab.step():
                    raise TestbedError(f"sim: node {self.name}: {op.upper()}s can never "
                                       "complete")
                refill()
                await self.testbed.share()
        except BaseException as exc:
            fab.record("traffic_end", self.name, **burst.end(burst.started),
                       error=str(exc) if isinstance(exc, TestbedError) else repr(exc))
            raise
        fab.record("traffic_end", self.name, **burst.end())
        return burst.reply()
