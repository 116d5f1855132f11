"""Send path: ``lnet_send`` -> select -> commit -> credits -> Transmit; and tx finalize.

Theory of operation (spec §1.5, §2, §3.3, §4.4): ``send`` resolves the destination peer NI
(creating a non-MR traffic peer if unknown), asks ``select.py`` for (NI, peer NI), commits
(round-robin stamps, per-attempt deadline ``now + lnd_timeout*(retry_count+1) + 1`` capped by
the caller's own transaction timeout, spec §3.4/003) and posts: peer NI credit, then NI
credit, else the message waits FIFO (seed 001). A message that waited past its deadline is
dropped with NETWORK_TIMEOUT (spec §1.5 step 1). Right before a ``Transmit`` the LNet fault
rules get their say (``fault.tx_hook``, spec §8).

``finalize_tx`` is ``lnet_finalize`` for a sent message: credits back (posting the next
waiter), health check (``health.py``), which may resend: the message is decommitted and sent
again with its original source/router parameters (full reselection); ``resend_count`` counts
resends whose selection succeeded, and a resend whose selection fails ends the message with
that error and no further resend (``lnet_resend_pending_msgs_locked``). Otherwise the stats are
decommitted (only on success) and the initiator's MD gets its event. Selection failures never
commit: no credits, no health, no resend (spec §2.8). Every message ends in exactly one final
MD event (spec §4.4).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from nodes.lnet import nistate
from nodes.lnet.actions import Action, Log, Transmit
from nodes.lnet.errors import ECANCELED, EHOSTUNREACH, ETIMEDOUT
from nodes.lnet.fault import tx_hook
from nodes.lnet.hdr import LNET_HDR_SIZE, LNET_RESERVED_PORTAL, MsgType
from nodes.lnet.health import health_check
from nodes.lnet.hstatus import HStatus
from nodes.lnet.router import RouteWait
from nodes.lnet.select import SelectError, find_local_ni, select_pathway

if TYPE_CHECKING:
    from nodes.lnet.engine import LNetEngine
    from nodes.lnet.msg import Msg
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import PeerNI


def _select(eng: LNetEngine, msg: Msg) -> tuple[LNetNI, PeerNI]:
    """Resolve the destination and run the pathway selection; raises SelectError."""
    assert msg.final_dst is not None
    dst = msg.final_dst
    src = find_local_ni(msg.src_nid_param, eng.local_nis()) if msg.src_nid_param else None
    lpni = eng.peers.find_lpni(dst)
    if lpni is None:
        lnet = eng.nets.get(dst.net)
        lpni = eng.peers.traffic_add(dst, lnet.tunables.peer_credits if lnet else 0)
    if eng.router.is_remote(lpni, src, msg):  # routed path (router.py, spec §2.6)
        return eng.router.find_routed_path(msg, lpni, src)
    nmr = not lpni.peer.multi_rail or msg.recovery or bool(msg.extra.get("forwarding"))
    return select_pathway(lpni=lpni, src=src, nets=eng.nets, nmr=nmr, md_cpt=msg.md_cpt,
                          numa_range=eng.tunables.numa_range,
                          reserved=msg.hdr.ptl_index == LNET_RESERVED_PORTAL
                          and msg.type in (MsgType.GET, MsgType.PUT),
                          is_response=msg.is_response)


def send(eng: LNetEngine, msg: Msg, now: float) -> list[Action]:
    """``lnet_send``: select, commit, post; selection errors finalize without resend."""
    assert msg.final_dst is not None
    dst = msg.final_dst
    if (dst.is_lo or eng.ni_by_nid(dst) is not None) and not msg.recovery:
        return send_loopback(eng, msg, now)
    # discovery gate (spec §2.2 step 5): wait on the peer's lp_dc_pendq if not up to date;
    # a router runs it for a forwarded message's final destination too (msg_routing)
    from nodes.lnet import discovery

    _hold_rsp_tracker(msg)
    if (waiting := discovery.gate(eng, msg, now)) is not None:
        return waiting
    logs = eng.router.mr_final_hop(msg) if msg.extra.get("forwarding") else []
    try:
        ni, lpni = _select(eng, msg)
    except SelectError as e:
        hs = HStatus.REMOTE_ERROR if e.errno == -EHOSTUNREACH else HStatus.LOCAL_ERROR
        return [*logs, Log(level="error", text=e.descr),
                *fail_unsent(eng, msg, now, e.errno, hs)]
    except RouteWait as w:  # gateway discovered on first use (seed 002)
        return logs + eng.router.park(msg, w, now)
    commit(eng, msg, ni, lpni, now)
    return logs + post_send(eng, msg, now)


def commit(eng: LNetEngine, msg: Msg, ni: LNetNI, lpni: PeerNI, now: float) -> None:
    """``lnet_handle_send``: RR stamps, deadline, header addressing (spec §2.7, §3.4)."""
    peer = lpni.peer
    peer.send_seq += 1
    lpni.peer_net.seq = lpni.seq = peer.send_seq
    eng.net_seq += 1
    ni.net.seq = ni.seq = eng.net_seq
    msg.txni, msg.txpeer = ni, lpni
    msg.tx_committed = True
    msg.committed_at = now
    msg.deadline = msg_deadline(eng, ni, now, msg)
    # routed: header dest = final destination; forwarded: the originator's src stays (§2.7)
    dest = msg.extra.pop("rt_dst", lpni.nid)
    src = msg.hdr.src_nid if msg.extra.get("forwarding") else ni.nid
    msg.hdr = replace(msg.hdr, src_nid=src, dest_nid=dest)  # type: ignore[arg-type]
    if msg.md is not None and msg.md.rsp_deadline is not None:
        msg.md.rsp_next_hop = lpni


def msg_deadline(eng: LNetEngine, ni: LNetNI, now: float, msg: Msg | None = None) -> float:
    """``get_msg_deadline`` (spec §3.4): per-attempt, LND timeout x (retry_count+1) + 1.

    Falls back to the transaction timeout when the NI's LND has none; a caller-given
    transaction timeout (003 "callers may specify a different transaction timeout") caps it.
    """
    lnd_timeout = ni.lnd_timeout
    if lnd_timeout:
        deadline = now + lnd_timeout * (eng.tunables.retry_count + 1) + 1
    else:
        deadline = now + eng.tunables.transaction_timeout
    if msg is not None and msg.md is not None and msg.md.user_deadline is not None:
        deadline = min(deadline, msg.md.user_deadline)
    return deadline


def _hold_rsp_tracker(msg: Msg) -> None:
    """Seed 003 hlth-lnt-timeout-after-send: the response tracker that ``LNetPut``/``LNetGet``
    attached does not run while the message waits (discovery, credits, delay rules); it is
    armed when the message is handed to the LND (docs/differences.md)."""
    md = msg.md
    if md is not None and md.rsp_deadline is not None and not md.rsp_armed \
            and not msg.is_response:
        md.rsp_deadline = math.inf


def _arm_rsp_tracker(eng: LNetEngine, msg: Msg, now: float) -> None:
    """First hand-off to the LND: deadline = now + transaction_timeout, once per MD (a resend
    keeps it, spec §3.4)."""
    md = msg.md
    if md is not None and md.rsp_deadline is not None and not md.rsp_armed \
            and not msg.is_response:
        md.rsp_armed = True
        md.rsp_deadline = now + eng.tunables.transaction_timeout
        heapq.heappush(eng._timers, (md.rsp_deadline, md.handle))


def post_send(eng: LNetEngine, msg: Msg, now: float) -> list[Action]:
    """``lnet_post_send_locked``: peer credit then NI credit, else wait FIFO (spec §1.5)."""
    ni, lpni = msg.txni, msg.txpeer
    assert ni is not None and lpni is not None
    if msg.md is not None and msg.md.unlinked and not msg.is_response:
        return finalize_tx(eng, msg, now, -ECANCELED, HStatus.LOCAL_ABORTED, no_resend=True)
    if not msg.peer_credit:
        msg.peer_credit = True
        lpni.tx_credits -= 1
        lpni.txqnob += msg.nob + LNET_HDR_SIZE
        lpni.min_tx_credits = min(lpni.min_tx_credits, lpni.tx_credits)
        if lpni.tx_credits < 0:
            msg.queued = True
            lpni.txq.append(msg)
            return []
    if not msg.ni_credit:
        msg.ni_credit = True
        ni.tx_credits -= 1
        ni.min_tx_credits = min(ni.min_tx_credits, ni.tx_credits)
        if ni.tx_credits < 0:
            msg.queued = True
            ni.txq.append(msg)
            return []
    if eng.router.next_hop_dead(msg, lpni):
        # a router does not send to a peer NI marked down (spec §1.5 step 1, seed 002)
        eng.counters.bump("drop_count")
        eng.counters.bump("drop_length", msg.nob)
        ni.stats.dropped.bump(msg.type)
        lpni.stats.dropped.bump(msg.type)
        return finalize_tx(eng, msg, now, -EHOSTUNREACH, HStatus.REMOTE_DROPPED)
    if msg.queued and now > msg.deadline and not msg.extra.get("forwarding"):
        # (routers never drop on deadline, spec §3.4)
        # a message that waited past its deadline is dropped (spec §1.5 step 1)
        eng.counters.bump("drop_count")
        eng.counters.bump("drop_length", msg.nob)
        ni.stats.dropped.bump(msg.type)
        lpni.stats.dropped.bump(msg.type)
        return finalize_tx(eng, msg, now, -ETIMEDOUT, HStatus.NETWORK_TIMEOUT)
    msg.queued = False
    if (held := tx_hook(eng, msg, now)) is not None:  # LNet delay/error rules, spec §8
        return held
    _arm_rsp_tracker(eng, msg, now)
    msg.tx_id = eng.new_id()
    eng.txs[msg.tx_id] = msg
    return [Transmit(tx_id=msg.tx_id, ni=ni.nid, lpni=lpni.nid, hdr=msg.hdr,
                     payload=msg.payload)]


def return_credits(eng: LNetEngine, msg: Msg, now: float) -> list[Action]:
    """``lnet_return_tx_credits_locked``: give back credits, post the next waiter."""
    actions: list[Action] = []
    ni, lpni = msg.txni, msg.txpeer
    if msg.ni_credit and ni is not None:
        msg.ni_credit = False
        if msg in ni.txq:
            ni.txq.remove(msg)
        ni.tx_credits += 1
        if ni.tx_credits <= 0 and ni.txq:
            actions += post_send(eng, ni.txq.popleft(), now)
    if msg.peer_credit and lpni is not None:
        msg.peer_credit = False
        if msg in lpni.txq:
            lpni.txq.remove(msg)
        lpni.tx_credits += 1
        lpni.txqnob -= msg.nob + LNET_HDR_SIZE
        if lpni.tx_credits <= 0 and lpni.txq:
            actions += post_send(eng, lpni.txq.popleft(), now)
    return actions


def send_loopback(eng: LNetEngine, msg: Msg, now: float) -> list[Action]:
    """Messages to one of our own NIDs go through the loopback NI, without credits."""
    from nodes.lnet.events import MessageReceived
    from nodes.lnet.nid import LO_NET

    assert msg.final_dst is not None
    ni = eng.ni_by_nid(msg.final_dst) or eng.nets[LO_NET].nis[0]
    msg.hdr = replace(msg.hdr, src_nid=ni.nid, dest_nid=ni.nid)
    msg.txni = ni
    actions = eng.on_receive(MessageReceived(ni=ni.nid, peer_nid=ni.nid, hdr=msg.hdr,
                                             payload=msg.payload), now, loopback=True)
    return actions + finalize_tx(eng, msg, now, 0, HStatus.OK)


def _resend(eng: LNetEngine, msg: Msg, now: float) -> list[Action]:
    """``lnet_resend_msg_locked`` + ``lnet_resend_pending_msgs_locked`` (spec §3.3).

    dbg-115: one error line names the local NID whose send failed (and its peer NI and
    hstatus) and the local/remote NID pair the message is switched to (real LNet has only
    D_NET debug lines here; the seed asks for an error)."""
    failed = (f"{msg.type.name} to {msg.final_dst}: send from {msg.txni.nid if msg.txni else '?'}"
              f" to {msg.txpeer.nid if msg.txpeer else '?'} failed ({msg.hstatus.name})")
    msg.retry_count += 1
    msg.tx_committed = False
    msg.queued = False
    logs: list[Action] = []
    if msg.extra.get("forwarding"):
        # the target becomes the header's dest_nid (the peer NI last tried) and the MR
        # forwarding decision is made again for it (lnet_resend_msg_locked -> lnet_send)
        msg.final_dst = msg.hdr.dest_nid
        logs = eng.router.mr_final_hop(msg)
    try:
        ni, lpni = _select(eng, msg)
    except SelectError as e:
        return [*logs, Log(level="error", text=f"{failed}; cannot resend: Error sending "
                                               f"{msg.type.name} to {msg.final_dst}: "
                                               f"{e.errno}"),
                *fail_unsent(eng, msg, now, e.errno, HStatus.LOCAL_ERROR)]
    except RouteWait as w:
        return logs + eng.router.park(msg, w, now)
    eng.counters.bump("resend_count")
    commit(eng, msg, ni, lpni, now)
    return [*logs, Log(level="error", text=f"{failed}; resending from {ni.nid} to {lpni.nid} "
                                           f"(try {msg.retry_count + 1})"),
            *post_send(eng, msg, now)]


def finalize_tx(eng: LNetEngine, msg: Msg, now: float, rc: int, hstatus: HStatus, *,
                no_resend: bool = False) -> list[Action]:
    """``lnet_finalize`` of a sent message: credits, health, maybe resend, stats, events."""
    msg.hstatus = hstatus
    msg.no_resend = msg.no_resend or no_resend
    actions = return_credits(eng, msg, now)
    ni, lpni = msg.txni, msg.txpeer
    if lpni is not None and hstatus != HStatus.OK:
        eng.router.tx_failed(lpni, hstatus)  # LND peer-down notification (seed 002)
    if msg.tx_committed and ni is not None and lpni is not None and not ni.is_lo:
        resend, logs = health_check(eng, msg, now)
        # dbg-110: a status moved by this health change is logged with its cause (spec §3.1)
        actions += logs + nistate.log_status(eng, ni, hstatus.name)
        if resend:
            return actions + _resend(eng, msg, now)
    msg.tx_committed = False
    if msg.extra.get("forwarding"):  # router buffer and credit back (spec §1.5)
        actions += eng.router.return_rx_credits(msg, now)
    if rc == 0:
        # lnet_msg_decommit_tx: only successful sends are counted
        eng.counters.bump("send_count")
        if msg.type == MsgType.PUT:
            eng.counters.bump("send_length", msg.nob)
        for st in (ni.stats if ni else None, lpni.stats if lpni else None):
            if st is None:
                continue
            st.sent.bump(msg.type)
            if (msg.type == MsgType.PUT and msg.retry_count == 0 and msg.md is not None
                    and not msg.is_response):
                st.put_egress.add(int((now - msg.committed_at) * 1e9))
    eng.counters.msg_free()
    if msg.md is None or msg.is_response:
        return actions
    md = msg.md
    if rc != 0 or md.threshold <= 1:
        return actions + eng.md_final(md, "SEND", rc, source=ni.nid if ni else None)
    md.threshold -= 1
    return actions + eng.md_event(md, "SEND", 0, source=ni.nid if ni else None)


def fail_unsent(eng: LNetEngine, msg: Msg, now: float, rc: int,
                hstatus: HStatus) -> list[Action]:
    """Selection failed: never committed, so no credits, no health, no resend (§2.8)."""
    msg.hstatus = hstatus
    msg.no_resend = True
    eng.counters.msg_free()
    if msg.extra.get("forwarding"):  # a router simply frees it (spec §2.8)
        return eng.router.return_rx_credits(msg, now)
    if msg.md is None or msg.is_response:
        return []
    return eng.md_final(msg.md, "SEND", rc)
