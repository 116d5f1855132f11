"""The engine's single decisions, injectable per engine: the test seam (issue 17).

Theory of operation: three choices carry most of LNet's Multi-Rail and Health behaviour:
which (local NI, peer NI) pair carries a message (``select.select_pathway``, spec §2), how far
one success or failure moves a health value (spec §3.1) and whether a failed message is sent
again (spec §3.3). ``Decisions`` names them; each engine gets its own instance
(``LNetEngine(decisions=...)``, default: the real ones), and the component that makes the
decision calls it. An exploration test replaces one field with a wrong decision (always the
first NI, decrement by 0, never resend) and checks that the invariants catch it. There is no
global state: two engines in one process may run different decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodes.lnet.ni import LNetNet, LNetNI
from nodes.lnet.nid import Net
from nodes.lnet.peer import PeerNI
from nodes.lnet.select import select_pathway
from nodes.lnet.tunables import LNET_MAX_HEALTH_VALUE

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg


def health_step(value: int, sensitivity: int, up: bool) -> int:
    """``lnet_inc_ni_healthv`` / ``lnet_dec_healthv_locked``: +-sensitivity in 0..1000."""
    if up:
        return min(LNET_MAX_HEALTH_VALUE, value + sensitivity)
    return max(0, value - sensitivity)


def resend(msg: Msg, decision: bool) -> bool:
    """``lnet_health_check``'s resend verdict, as LNet computed it."""
    return decision


@dataclass(frozen=True, slots=True, kw_only=True)
class Decisions:
    """One engine's decision functions (see the module doc)."""

    #: (local NI, peer NI) for a message, keyword-only like ``select.select_pathway``
    select_pathway: Callable[..., tuple[LNetNI, PeerNI]] = select_pathway
    #: (value, sensitivity, up) -> the new health value
    health_step: Callable[[int, int, bool], int] = health_step
    #: (message, LNet's verdict) -> resend it?
    resend: Callable[[Msg, bool], bool] = resend

    def pathway(self, lpni: PeerNI, src: LNetNI | None, nets: dict[Net, LNetNet], nmr: bool,
                md_cpt: int | None, numa_range: int, reserved: bool,
                is_response: bool) -> tuple[LNetNI, PeerNI]:
        """``select_pathway`` with these arguments: the real one called natively (a field
        holds a generic callable, called with keywords), a replaced one as given."""
        if self.select_pathway is select_pathway:
            return select_pathway(lpni=lpni, src=src, nets=nets, nmr=nmr, md_cpt=md_cpt,
                                  numa_range=numa_range, reserved=reserved,
                                  is_response=is_response)
        return self.select_pathway(lpni=lpni, src=src, nets=nets, nmr=nmr, md_cpt=md_cpt,
                                   numa_range=numa_range, reserved=reserved,
                                   is_response=is_response)

    def step(self, value: int, sensitivity: int, up: bool) -> int:
        """``health_step``: the real one called natively, a replaced one as given."""
        if self.health_step is health_step:
            return health_step(value, sensitivity, up)
        return self.health_step(value, sensitivity, up)
