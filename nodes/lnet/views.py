"""What lnetctl prints: dicts with the keys, nesting and order of real lnetctl (spec §9).

Theory of operation: pure functions from engine state to ordered dicts; ``nodes/tools/yamlfmt``
turns them into lnetctl-style YAML. Verbosity follows spec §9.2 (``net show``: 0 base, 1 adds
statistics/tunables, 2 adds per-type and health stats (seed 004's ``-v 3`` shows the same);
``peer show``: 1 credits, 2 stats and health stats, 3 state). ``debug recovery`` lists the
recovery queues (spec §3.5).

``testbed_stats`` is the testbed-only view of seed 003's DESIRED statistics that real lnetctl
does not have (printed by ``lctl testbed_stats``, never by lnetctl, docs/differences.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.lnet.errors import ENOENT, LNetConfigError
from nodes.lnet.nid import NID, Net
from nodes.lnet.router import Router, lpni_state
from nodes.lnet.udsp import lpni_info, ni_info

if TYPE_CHECKING:
    from nodes.lnet.counters import GlobalCounters
    from nodes.lnet.nets import LocalNets
    from nodes.lnet.ni import LNetNI
    from nodes.lnet.peer import Peer, PeerNI, PeerTable
    from nodes.lnet.recovery import Recovery
    from nodes.lnet.tunables import Tunables


def _cpt_str(cpts: tuple[int, ...]) -> str:
    return "[" + ",".join(str(c) for c in cpts) + "]"


def ni_view(ni: LNetNI, verbose: int) -> dict[str, Any]:
    out: dict[str, Any] = {"nid": str(ni.nid), "status": ni.status_str}
    if not ni.is_lo:
        out["interfaces"] = {0: ni.interface}
    if verbose >= 1:
        out["statistics"] = ni.stats.statistics()
    if verbose >= 4:
        # spec §7.4, after statistics as lnetctl does; 0@lo too (api-ni.c
        # lnet_net_show_dump sends every NI's udsp info; sanity-lnet 404 counts them)
        out["udsp info"] = ni_info(ni)
    if verbose >= 2:
        out["sent_stats"] = ni.stats.sent.show()
        out["received_stats"] = ni.stats.received.show()
        out["dropped_stats"] = ni.stats.dropped.show()
        h = ni.hstats
        out["health stats"] = {
            "fatal_error": int(ni.fatal_error), "health value": ni.healthv,
            "interrupts": h.interrupts, "dropped": h.dropped, "aborted": h.aborted,
            "no route": h.no_route, "timeouts": h.timeouts, "error": h.error,
            "ping_count": ni.ping_count, "next_ping": int(ni.next_ping),
        }
    if verbose >= 1:
        t = ni.net.tunables
        out["tunables"] = {"peer_timeout": t.peer_timeout, "peer_credits": t.peer_credits,
                           "peer_buffer_credits": t.peer_buffer_credits, "credits": t.credits}
        if not ni.is_lo:  # an o2ib NI's first (lustre_o2iblnd_show_tun's order)
            out["lnd tunables"] = {**ni.lnd_o2ib, "conns_per_peer": ni.conns_per_peer,
                                   "timeout": ni.lnd_timeout, "tos": ni.tos}
        out["dev cpt"] = ni.dev_cpt
        out["CPT"] = _cpt_str(ni.cpts)
    return out


class Views:
    """What lnetctl prints, read from the components of one engine (never written)."""

    def __init__(self, local: LocalNets, peers: PeerTable, counters: GlobalCounters,
                 tunables: Tunables, recovery: Recovery, router: Router) -> None:
        self.local = local
        self.peers = peers
        self.counters = counters
        self.tunables = tunables
        self.recovery = recovery
        self.router = router

    def net_show(self, net: str | None = None, verbose: int = 0) -> dict[str, Any]:
        nets = list(self.local.nets.values())
        if net is not None:
            want = Net.parse(net)
            nets = [n for n in nets if n.net == want]
            if not nets:
                raise LNetConfigError(-ENOENT, "cannot get networks: No such file or directory")
        return {"net": [{"net type": str(n.net),
                         "local NI(s)": [ni_view(ni, verbose) for ni in n.nis]} for n in nets]}


    def lpni_view(self, lpni: PeerNI, verbose: int) -> dict[str, Any]:
        out: dict[str, Any] = {"nid": str(lpni.nid)}
        if verbose >= 4:
            out["udsp info"] = lpni_info(lpni)  # spec §7.4: between nid and state
        out["state"] = lpni_state(self.router, lpni)  # up/down for gateways and on routers (§9.2)
        if verbose >= 1:
            out.update({
                "max_ni_tx_credits": lpni.max_tx_credits,
                "available_tx_credits": lpni.tx_credits,
                "min_tx_credits": lpni.min_tx_credits,
                "tx_q_num_of_buf": lpni.txqnob,
                "available_rtr_credits": lpni.rtr_credits,
                "min_rtr_credits": lpni.min_rtr_credits,
                "refcount": 1 + len(lpni.txq),
                "statistics": lpni.stats.statistics(),
            })
        if verbose >= 2:
            h = lpni.hstats
            out["sent_stats"] = lpni.stats.sent.show()
            out["received_stats"] = lpni.stats.received.show()
            out["dropped_stats"] = lpni.stats.dropped.show()
            out["health stats"] = {"health value": lpni.healthv, "dropped": h.dropped,
                                   "timeout": h.timeout, "error": h.error,
                                   "network timeout": h.network_timeout,
                                   "ping_count": lpni.ping_count, "next_ping": int(lpni.next_ping)}
        return out


    def peer_view(self, peer: Peer, verbose: int) -> dict[str, Any]:
        out: dict[str, Any] = {"primary nid": str(peer.primary_nid), "Multi-Rail": peer.multi_rail}
        if verbose >= 3:
            out["peer state"] = peer.state
        out["peer ni"] = [self.lpni_view(lpni, verbose) for lpni in peer.lpnis]
        return out


    def peer_show(self, nid: str | None = None, verbose: int = 0) -> dict[str, Any]:
        peers = self.peers.walk()  # the per-CPT peer tables' order (lnet_peer_ni_show_start)
        if nid is not None:
            peer = self.peers.find_peer(NID.parse(nid))
            if peer is None:
                raise LNetConfigError(-ENOENT, "cannot get peer information: No such file or "
                                               "directory")
            peers = [peer]
        return {"peer": [self.peer_view(p, verbose) for p in peers]}


    def stats_show(self) -> dict[str, Any]:
        return {"statistics": self.counters.show()}


    def global_show(self) -> dict[str, Any]:
        return {"global": self.tunables.global_show()}


    def recovery_show(self, local: bool = True) -> dict[str, Any]:
        """``lnetctl debug recovery --local|--peer`` (spec §9.3): the queue's NIDs in order;
        an empty queue prints nothing (empty dict)."""
        queue = [x.nid for x in self.recovery.ni_queue] if local \
            else [x.nid for x in self.recovery.lpni_queue]
        if not queue:
            return {}
        title = "Local NI recovery" if local else "Peer NI recovery"
        return {title: {f"nid-{i}": str(nid) for i, nid in enumerate(queue)}}


    def testbed_stats(self, nid: str | None = None) -> dict[str, Any]:
        """``lctl testbed_stats [NID]``: per local NI the link down/up events
        (hlth-stt-ni-down-events, hlth-stt-ni-up-events), its NETWORK_TIMEOUT count
        (hlth-stt-network-timeout-resends) and send times; per peer NI the average
        time to send a message (hlth-stt-avg-send-time) and to complete a PUT->ACK / GET->REPLY
        transaction (hlth-stt-avg-transaction-time), in nanoseconds, lnetctl's latency key style.
        ``nid`` limits the view to that local NI or peer NI; unknown -> -ENOENT."""
        want = NID.parse(nid) if nid is not None else None
        nis = [ni for ni in self.local.local_nis() if want is None or ni.nid == want]
        lpnis = [lp for lp in self.peers.by_nid.values() if want is None or lp.nid == want]
        if want is not None and not nis and not lpnis:
            raise LNetConfigError(-ENOENT, f"no local NI or peer NI {want}")
        return {"testbed stats": {
            "local NI(s)": [{"nid": str(ni.nid), **ni.link_events.show(),
                             "network timeout": ni.hstats.network_timeout,
                             **ni.stats.testbed_stats(transaction=False)} for ni in nis],
            "peer NI(s)": [{"nid": str(lp.nid), "primary nid": str(lp.peer.primary_nid),
                            **lp.stats.testbed_stats(transaction=True)} for lp in lpnis],
        }}


    def render(self, what: str, **kw: Any) -> dict[str, Any]:
        """The view ``what`` (``net``, ``peer``, ``stats``, ``global``, ``recovery``,
        ``testbed``) with its keyword arguments."""
        fn = {"net": self.net_show, "peer": self.peer_show, "stats": self.stats_show,
              "global": self.global_show, "recovery": self.recovery_show,
              "testbed": self.testbed_stats}[what]
        return fn(**kw)
