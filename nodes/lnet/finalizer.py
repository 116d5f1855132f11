"""``lnet_finalize``'s container: a finalization that starts while another one runs waits
for it, instead of running inside it.

Theory of operation: lib-msg.c ``lnet_finalize`` puts a message on its CPT's
``msc_finalizing`` list and returns at once when a finalizer is already at work on that
container; the finalizer's loop takes the message next. So finalizing one message never
recurses into finalizing the next, however long the chain: returning a message's credits
posts the next waiter (``lnet_return_tx_credits_locked``), which may be dropped for having
waited past its deadline (``lnet_post_send_locked``), which finalizes it, which returns its
credits, and so on down a queue of hundreds. Here that chain once ran deeper than Python's
stack (explore on mr-routers.yaml, seeds 225, 503, 843 and 962: RecursionError in
``finalize_tx``). The jobs run in the order they were queued, the first one first.

A job is the arguments of the sender's ``_finalize_tx``, called on the sender directly (a
native call in the compiled engine: a bound method and ``*args`` per message were a generic
call that boxed every argument, issue 13's lst ping profile).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from nodes.lnet.actions import Action
from nodes.lnet.hstatus import HStatus

if TYPE_CHECKING:
    from nodes.lnet.msg import Msg
    from nodes.lnet.send import Sender

#: ``_finalize_tx``'s arguments: message, now, rc, hstatus, no_resend
Job = tuple["Msg", float, int, HStatus, bool]


class FinalizeContainer:
    """One engine's container: ``pending`` is not None while a finalizer runs."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: deque[Job] | None = None

    def finalize(self, sender: Sender, msg: Msg, now: float, rc: int, hstatus: HStatus,
                 no_resend: bool) -> list[Action]:
        """``sender._finalize_tx(...)`` now if no finalizer runs (and then every job queued
        meanwhile, in order), else queued for the running one; the actions of every job it
        ran."""
        if self.pending is not None:
            self.pending.append((msg, now, rc, hstatus, no_resend))
            return []
        self.pending = pending = deque[Job]()
        try:
            actions = sender._finalize_tx(msg, now, rc, hstatus, no_resend)
            while pending:
                m, t, r, h, n = pending.popleft()
                actions += sender._finalize_tx(m, t, r, h, n)
        finally:
            self.pending = None
        return actions
