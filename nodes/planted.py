"""Planted bugs: named wrong decisions for testing the testers (issue 17, test-only).

Theory of operation: ``testbed explore`` must prove that it finds rare-path bugs, so three
wrong decisions are planted through the engine's ``Decisions`` seam (``decisions.py``), each
reachable only under a particular fault interleaving. ``new_engine(name, ...)`` builds an
``LNetEngine`` whose decisions are the real ones except the named one; ``name`` None or ""
gives the real engine. The node daemon (``nodes/daemon/runtime.py``) and the simulator
(``testbed/sim/runtime.py``) read the name from the environment variable ``PLANTED_ENV`` when
they build a node's engine (``from_environ``), so a test switches a bug on for either backend
by setting it before bring-up. Nothing here is used unless that variable is set.

The bugs (``PLANTED``):

* ``fatal-ni-by-health`` (selection, spec §2.4): the local NI choice ranks health *before*
  the link state, so a fatal (link down) NI wins over a usable sibling whose health is lower.
  Reachable only when one rail lost health (failures not yet recovered) and then the other
  rail's link went down while the node sends with a free NI choice. ``testbed check``'s
  ``fatal_ni`` invariant catches it.
* ``resend-extra`` (resend verdict, spec §3.3): a message whose last allowed attempt failed
  with REMOTE_DROPPED from a local NI that is itself unhealthy is sent once more (off by one
  in the exhaustion test on that branch). Reachable only when a local failure has lowered the
  sending NI's health and, before it recovers, every attempt of one message to a Multi-Rail
  peer is dropped remotely (the peer's NIs refuse or are unreachable). The ``resend``
  invariant catches it.
* ``health-cap-stuck`` (health step, spec §3.1): an increment that would pass 1000 leaves the
  value where it was instead of capping it. Reachable only with a ``health_sensitivity`` that
  does not divide 1000 and a value floored at 0 first (a long failure streak), so the climb
  back overshoots; the value then never returns to 1000 and the liveness phase catches it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from nodes.lnet.decisions import Decisions, health_step, resend
from nodes.lnet.engine import LNetEngine
from nodes.lnet.hstatus import HStatus
from nodes.lnet.select import select_pathway
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE, Tunables

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI

#: the environment variable naming the planted bug of every engine a runtime builds
PLANTED_ENV = "LNET_TESTBED_PLANTED_BUG"


def _fatal_ni_by_health(**kw: Any) -> tuple[LNetNI, PeerNI]:
    """``select_pathway`` with health ranked before the fatal state (free NI choice only)."""
    ni, lpni = select_pathway(**kw)
    if kw.get("src") is not None:
        return ni, lpni
    rival = min(ni.net.nis, key=lambda n: (-n.healthv, int(n.fatal_error), n.seq))
    if rival.fatal_error and rival.healthv > ni.healthv:
        return rival, lpni
    return ni, lpni


def _health_cap_stuck(value: int, sensitivity: int, up: bool) -> int:
    """``health_step`` whose increment past 1000 is dropped instead of capped."""
    if up and value + sensitivity > LNET_MAX_HEALTH_VALUE:
        return value
    return health_step(value, sensitivity, up)


def _resend_extra(tunables: Callable[[], Tunables]) -> Callable[[Msg, bool], bool]:
    """``resend`` that allows one resend past ``retry_count`` after REMOTE_DROPPED from an
    unhealthy local NI."""

    def decide(msg: Msg, decision: bool) -> bool:
        if decision:
            return resend(msg, decision)
        lpni, ni = msg.txpeer, msg.txni
        return (msg.hstatus is HStatus.REMOTE_DROPPED and lpni is not None
                and lpni.peer.nnis > 1 and not msg.recovery and not msg.no_resend
                and ni is not None and ni.healthv < LNET_MAX_HEALTH_VALUE
                and msg.retry_count == tunables().retry_count)

    return decide


def _decisions(name: str, tunables: Callable[[], Tunables]) -> Decisions:
    if name == "fatal-ni-by-health":
        return Decisions(select_pathway=_fatal_ni_by_health)
    if name == "resend-extra":
        return Decisions(resend=_resend_extra(tunables))
    if name == "health-cap-stuck":
        return Decisions(health_step=_health_cap_stuck)
    raise ValueError(f"unknown planted bug {name!r} (known: {', '.join(PLANTED)})")


#: name -> one line on what is wrong
PLANTED = {
    "fatal-ni-by-health": "selection ranks NI health before the link state (spec §2.4)",
    "resend-extra": "one resend past retry_count after REMOTE_DROPPED from an unhealthy NI "
                    "(spec §3.3)",
    "health-cap-stuck": "an increment past 1000 is dropped, not capped (spec §3.1)",
}


def check_name(name: str | None) -> str | None:
    """``name`` if it names a planted bug (None/"" for none); else ValueError, one line."""
    if not name:
        return None
    if name not in PLANTED:
        raise ValueError(f"unknown planted bug {name!r} (known: {', '.join(PLANTED)})")
    return name


def from_environ(environ: Mapping[str, str]) -> str | None:
    """The planted bug named by ``PLANTED_ENV`` in ``environ`` (None if unset or empty)."""
    return check_name(environ.get(PLANTED_ENV))


def new_engine(name: str | None, **kw: Any) -> LNetEngine:
    """An ``LNetEngine(**kw)`` with the planted bug ``name`` (None: the real engine)."""
    if not name:
        return LNetEngine(**kw)
    made: list[LNetEngine] = []
    engine = LNetEngine(decisions=_decisions(name, lambda: made[0].tunables), **kw)
    made.append(engine)
    return engine
