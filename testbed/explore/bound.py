"""The liveness bound: how long after the faults heal LNet may take to be whole again.

Theory of operation (issue 17 "liveness phase"): once every fault is removed, real LNet
promises to come back by itself, but only as fast as its own timers allow. ``liveness_bound``
is the ONE function that says how long, from the tunables in effect (spec §0, §3.4-3.5, §6.4);
every liveness violation prints its ``Bound`` with the parts it was made of:

* ``settle``: what was in flight at the heal ends by itself: a message's deadline
  (``lnd_timeout * (retry_count + 1) + 1``, ``get_msg_deadline``), a response tracker
  (``transaction_timeout``, ``lnet_finalize_expired_responses``), a message an LNet delay rule
  still holds (``MAX_RULE_LATENCY``, the swarm's cap); failures arriving then lower health
  once more;
* ``backoff``: a NI that kept failing is pinged again at most ``max_recovery_ping_interval``
  after its last ping (the recovery backoff cap, ``lnet_get_next_recovery_ping``), plus one
  monitor tick; paid twice: the first ping after the heal succeeds, but its own next ping
  was set when it was sent, from the ping count before its reply reset it
  (``lnet_recover_local_nis``/``_peer_nis`` increment the count and set ``next_ping`` at the
  send; ``lnet_health_check``'s reset leaves ``next_ping`` alone), so the climb starts only
  after a second wait of up to the cap (explore seed 289);
* ``climb``: from 0, ``ceil(1000 / health_sensitivity)`` successful recovery pings, each
  ``2**1`` s after the one before (a reply resets ``ping_count``, the ping sets it to 1) and
  aligned to the 1 s monitor tick: 3 s per step;
* ``routes``: a gateway marked down is pinged again within ``alive_router_check_interval``;
  that ping may wait ``router_ping_timeout``; a router learns that its NIs are alive again from
  the pings it receives (``router_ping_timeout + alive_router_check_interval`` of silence set
  them down, spec §6.4), which the next check reports: ``3 * interval + 2 * timeout``.

Recovery and the router checker run side by side: ``total = settle + max(2 * backoff +
climb, routes) + SLACK``. With ``health_sensitivity`` 0 nothing is ever queued for recovery
(``backoff`` and ``climb`` are 0).

The expected end state at ``total`` (checked by ``testbed.explore.liveness``): every local NI
at health 1000; every peer NI at 1000 except those LNet no longer recovers: never heard from
(``lpni_last_alive == 0``: not eligible, spec §3.5, §11.7) and, with ``recovery_limit`` > 0,
silent for longer than the limit ("aged out", ``lnet_peer_ni_add_to_recoveryq_locked``): such
a peer NI stays below 1000, off the recovery queue, until a message from it arrives; with
``health_sensitivity`` 0 no health value ever moves (``lnet_dec_healthv_locked`` and
``lnet_inc_healthv`` add 0; spec §3.1) and ``retry_count`` is 0; every route up; every new
message completes (with ``recovery_limit`` > 0 the second of two: a router drops what it
forwards to an aged-out peer NI still below 1000).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE, Tunables

#: the longest latency of an LNet delay rule the swarm draws (seconds)
MAX_RULE_LATENCY = 5
#: per recovery step: the 2 s interval plus the 1 s monitor tick it may wait for
STEP = 3
#: driver latency, a discovery round, the probes' own round trips
SLACK = 5


@dataclass(frozen=True)
class Bound:
    """The liveness bound and what it is made of (seconds)."""

    settle: int
    backoff: int
    climb: int
    routes: int
    slack: int = SLACK

    @property
    def total(self) -> int:
        return self.settle + max(2 * self.backoff + self.climb, self.routes) + self.slack

    def render(self) -> str:
        return (f"bound {self.total} s = settle {self.settle} + max(2 x recovery backoff cap "
                f"{self.backoff} + climb {self.climb}, routes {self.routes}) + slack "
                f"{self.slack}")


def liveness_bound(tunables: Mapping[str, int]) -> Bound:
    """The time after the heal within which LNet must be whole again (module doc).

    ``tunables``: the values in effect (missing names take LNet's defaults, spec §0).
    """
    d = Tunables()
    tt = int(tunables.get("transaction_timeout", d.transaction_timeout))
    rc = int(tunables.get("retry_count", d.retry_count))
    sens = int(tunables.get("health_sensitivity", d.health_sensitivity))
    cap = int(tunables.get("max_recovery_ping_interval", d.max_recovery_ping_interval))
    check = int(tunables.get("alive_router_check_interval", d.alive_router_check_interval))
    ping_to = int(tunables.get("router_ping_timeout", d.router_ping_timeout))
    lnd = max((tt - 1) // (rc + 1), 1)
    settle = max(lnd * (rc + 1) + 1, tt) + MAX_RULE_LATENCY
    if sens > 0:
        backoff, climb = cap + 1, math.ceil(LNET_MAX_HEALTH_VALUE / sens) * STEP
    else:
        backoff = climb = 0
    routes = 3 * max(check, 0) + 2 * ping_to
    return Bound(settle, backoff, climb, routes)
