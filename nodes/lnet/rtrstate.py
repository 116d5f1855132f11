"""Route and gateway aliveness as transition tables (STYLE rule 2; spec §6.3/§6.4; seeds 001,
002: rtr-route-down, rtr-gw-down, rtr-gw-up, rtr-gw-down-on-fail, rtr-gw-asym).

Theory of operation. Three small machines, each a dict ``(state, input) -> (effect, next)``:

* ``LPNI``: a peer NI's ``lpni_ns_status`` as seen by a gateway user or a router. It moves on
  a message received from it (rx), on the LND's ``lnet_notify`` (notify_alive/notify_dead),
  on the NI status a gateway's ping reply carries for it, and on a failed router ping.
  ``notify_dead`` has the effect ``lnd_notify_peer_down`` (``lnd_notify_peer_down`` of struct
  lnet_lnd, router.c ``lnet_notify``).
* ``GATEWAY``: a gateway peer (``lp_alive`` + ``LNET_PEER_ROUTER_ENABLED``): unknown until its
  first router discovery, then alive / dead / disabled (RTE_DISABLED in its ping); an
  unsolicited message brings a dead gateway back (rtr-gw-up), a reset notification moves
  ``lp_alive`` (router.c: "reset flag indicates gateway peer went up or down").
* ``ROUTE``: a route's ``lr_alive`` from its gateway's ping reply: with
  avoid_asym_router_failure a single-hop route is down unless the gateway reports an UP NI on
  the remote net (rtr-gw-asym), a failed ping takes it down, notifications move it when
  discovery is disabled (``lnet_notify``).

Whether a route is *usable* (``RouteTable.route_alive``) combines them with health: gateway
alive and routing enabled, a peer NI on the route's local net that is UP with health at least
``MAX_HEALTH * router_sensitivity / 100`` (rtr-mr-sensitivity, rtr-route-down, rtr-gw-down),
and the route's own state. Every pair is defined; ``step`` raises ``RouterStateError`` for
an input a machine does not know (a bug in the caller, never wire input).
"""

from __future__ import annotations

from typing import Final

UP: Final = "up"
DOWN: Final = "down"
UNKNOWN: Final = "unknown"
ALIVE: Final = "alive"
DEAD: Final = "dead"
DISABLED: Final = "disabled"


class RouterStateError(Exception):
    """An input a router machine has no transition for (local protocol error)."""


Table = dict[tuple[str, str], tuple[str | None, str]]

#: peer NI aliveness (``lpni_ns_status``); effects are carried out by ``RouterAliveness``
LPNI_INPUTS: Final = ("rx", "notify_alive", "notify_dead", "ping_ni_up", "ping_ni_down",
                      "ping_failed")
LPNI: Final[Table] = {
    **{(s, "rx"): (None if s == UP else "log_up", UP) for s in (UP, DOWN)},
    **{(s, "notify_alive"): (None if s == UP else "log_up", UP) for s in (UP, DOWN)},
    # "Old news" when already down: no second LND call (router.c lpni_notified)
    (UP, "notify_dead"): ("lnd_notify_peer_down", DOWN),
    (DOWN, "notify_dead"): (None, DOWN),
    **{(s, "ping_ni_up"): (None, UP) for s in (UP, DOWN)},
    **{(s, "ping_ni_down"): (None, DOWN) for s in (UP, DOWN)},
    **{(s, "ping_failed"): (None, DOWN) for s in (UP, DOWN)},
}

#: gateway peer: lp_alive and LNET_PEER_ROUTER_ENABLED (spec §6.4)
GATEWAY_INPUTS: Final = ("ping_reply", "ping_reply_rte_disabled", "ping_failed", "rx",
                         "notify_alive_reset", "notify_dead_reset")
GATEWAY: Final[Table] = {
    **{(s, "ping_reply"): (None, ALIVE) for s in (UNKNOWN, ALIVE, DEAD, DISABLED)},
    **{(s, "ping_reply_rte_disabled"): ("log_rte_disabled", DISABLED)
       for s in (UNKNOWN, ALIVE, DEAD, DISABLED)},
    **{(s, "ping_failed"): (None, DEAD) for s in (UNKNOWN, ALIVE, DEAD, DISABLED)},
    # an unsolicited message proves a dead gateway alive (seed 001 gateway req 2, rtr-gw-up)
    (UNKNOWN, "rx"): (None, ALIVE), (ALIVE, "rx"): (None, ALIVE),
    (DEAD, "rx"): (None, ALIVE), (DISABLED, "rx"): (None, DISABLED),
    (UNKNOWN, "notify_alive_reset"): (None, ALIVE), (ALIVE, "notify_alive_reset"): (None, ALIVE),
    (DEAD, "notify_alive_reset"): (None, ALIVE),
    (DISABLED, "notify_alive_reset"): (None, DISABLED),
    **{(s, "notify_dead_reset"): (None, DEAD) for s in (UNKNOWN, ALIVE, DEAD)},
    (DISABLED, "notify_dead_reset"): (None, DISABLED),
}

#: a route's lr_alive (spec §6.3/§6.4, rtr-gw-asym)
ROUTE_INPUTS: Final = ("ping_remote_up", "ping_remote_down", "ping_no_asym", "ping_failed",
                       "notify_alive", "notify_dead")
ROUTE: Final[Table] = {
    **{(s, "ping_remote_up"): (None, UP) for s in (UP, DOWN)},
    **{(s, "ping_remote_down"): (None, DOWN) for s in (UP, DOWN)},
    **{(s, "ping_no_asym"): (None, UP) for s in (UP, DOWN)},
    **{(s, "ping_failed"): (None, DOWN) for s in (UP, DOWN)},
    **{(s, "notify_alive"): (None, UP) for s in (UP, DOWN)},
    **{(s, "notify_dead"): (None, DOWN) for s in (UP, DOWN)},
}

MACHINES: Final = {"lpni": (LPNI, LPNI_INPUTS), "gateway": (GATEWAY, GATEWAY_INPUTS),
                   "route": (ROUTE, ROUTE_INPUTS)}


def step(machine: str, state: str, event: str) -> tuple[str | None, str]:
    """One transition of ``machine``: returns (effect or None, next state).

    Raises:
        RouterStateError: no transition for (state, event).
    """
    table, _inputs = MACHINES[machine]
    try:
        return table[(state, event)]
    except KeyError:
        raise RouterStateError(f"{machine}: no transition from {state!r} on {event!r}") \
            from None
