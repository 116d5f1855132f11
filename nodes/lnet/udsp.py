"""UDSP: User Defined Selection Policies (spec §7; cfg-095..165; udsp.c, liblnetconfig_udsp.c).

Theory of operation: a node holds one ordered list of rules (cfg-105: one UDSP per system,
cfg-100: made of rules), ``ln_udsp_list``. A rule has up to three NID-range descriptors
(``nidrange.NIDRange``: ``src`` local, ``dst`` remote, ``rte`` router) and an action, either a
priority (lower is better, cfg-125/150; a lone ``src`` or ``dst`` without one gets 0, the
highest, cfg-155) or "preferred list". Rules do nothing at selection time: they are *applied*
to constructs, writing the fields that ``select.py`` (and the router's route choice) compare
(spec §7.2):

    src only  net form   -> LNetNet.sel_priority      NID form -> LNetNI.sel_priority
    dst only  net form   -> PeerNet.sel_priority      NID form -> PeerNI.sel_priority
    dst + src            -> PeerNI.pref_nids = every local NI matching src  (cfg-120/130..140)
    dst + rte            -> PeerNI.rtr_pref_nids += primary NIDs of gateways matching rte
    rte only, or a priority on a pair: stored, shown, no effect ("Bad UDSP policy")

Order (spec §7.3): on ``add`` every rule is re-applied walking the list from the last index to
the first, so the lowest index is written last and wins. New constructs get the rules applied
when they are created, with the kernel's per-construct callbacks (``LocalNets.add`` calls
``on_net``/``on_ni``, the peer table calls ``on_lpn``/``on_lpni``); as in udsp.c a new peer NI
is matched by NID only, so a pair rule whose ``dst`` is a whole net reaches only peer NIs that
existed when it was applied. ``delete`` reverts only the deleted rule's targets (priority back
to UINT_MAX, preferred lists cleared) and does not re-apply the others (spec §11.12);
``--all`` reverts every rule's targets (udsp.c ``lnet_udsp_destroy(false)``).
Gateways are the peers that routes use (``Peer.rtr_refcount > 0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from nodes.lnet.errors import EALREADY, EINVAL, ENOENT, LNetConfigError
from nodes.lnet.nidrange import NIDRange, parse_nidrange

if TYPE_CHECKING:
    from nodes.lnet.nets import LocalNets
    from nodes.lnet.ni import LNetNet, LNetNI
    from nodes.lnet.peer import PeerNet, PeerNI, PeerTable

#: LNET_MAX_SELECTION_PRIORITY: the priority of every construct no rule touched (spec §0)
UINT_MAX: Final = 0xFFFF_FFFF
PRIORITY: Final = "priority"
PREF: Final = "pref"


@dataclass(eq=False, slots=True)
class UDSP:
    """``struct lnet_udsp``: one rule. ``action`` is PRIORITY or PREF (preferred list)."""

    src: NIDRange | None
    dst: NIDRange | None
    rte: NIDRange | None
    action: str
    priority: int = 0

    def same_criteria(self, other: UDSP) -> bool:
        """``lnet_udsp_equal``: the three descriptors are equal."""
        return (self.src, self.dst, self.rte) == (other.src, other.dst, other.rte)

    def show(self, idx: int) -> dict[str, Any]:
        """One ``udsp show`` item (spec §7.4): absent criteria omitted, no action for lists."""
        out: dict[str, Any] = {"idx": idx}
        for key in ("src", "dst", "rte"):
            value = getattr(self, key)
            if value is not None:
                out[key] = str(value)
        if self.action == PRIORITY:
            out["action"] = {"priority": self.priority}
        return out


class UDSPTable:
    """``ln_udsp_list``: the node's rules in index order, applied to the node's local nets and
    NIs (``local``) and peer table (``peers``)."""

    def __init__(self, local: LocalNets | None = None, peers: PeerTable | None = None) -> None:
        self.rules: list[UDSP] = []
        self.local = local
        self.peers = peers

    def add(self, rule: UDSP, idx: int | None = None) -> None:
        """``lnet_udsp_add_policy`` then apply all rules (spec §7.1, §7.3; cfg-095, cfg-160).

        ``idx`` inserts before the rule now at that index; None or too large appends. A rule
        with the same criteria updates the priority of an existing priority rule, else
        -EALREADY."""
        rules = self.rules
        for old in rules:
            if old.same_criteria(rule):
                if old.action == rule.action == PRIORITY and old.priority != rule.priority:
                    old.priority = rule.priority
                    break
                raise LNetConfigError(-EALREADY, "cannot add udsp: Operation already in "
                                                 "progress")
        else:
            if idx is not None and 0 <= idx < len(rules):
                rules.insert(idx, rule)
            else:
                rules.append(rule)
        for r in reversed(rules):
            self._apply(r, revert=False)

    def delete(self, idx: int | None) -> None:
        """``lnet_udsp_del_policy``: revert only this rule's targets; None (``--all``, idx -1)
        is udsp.c ``lnet_udsp_destroy(false)``: each rule, first to last, has its targets
        reverted as it goes (only the shutdown path, ``unconfigure``, reverts nothing)."""
        if idx is None:
            while self.rules:
                self._apply(self.rules.pop(0), revert=True)
            return
        if not 0 <= idx < len(self.rules):
            raise LNetConfigError(-ENOENT, "cannot del udsp: No such file or directory")
        self._apply(self.rules.pop(idx), revert=True)

    def show(self, idx: int | None = None) -> dict[str, Any]:
        """``lnetctl udsp show [--idx N]`` (spec §7.4; cfg-050); no rule prints nothing."""
        rules = list(enumerate(self.rules))
        if idx is not None:
            rules = [(i, r) for i, r in rules if i == idx]
        return {"udsp": [r.show(i) for i, r in rules]} if rules else {}

    def _apply(self, rule: UDSP, *, revert: bool) -> None:
        assert self.local is not None and self.peers is not None
        kind = _kind(rule)
        if kind == "src":
            assert rule.src is not None
            for net in self.local.nets.values():
                if net.net.lnd != rule.src.lnd:
                    continue
                if rule.src.is_net_rule:   # lnet_udsp_apply_prio_rule_on_net
                    _rule_on_net(rule, net, revert)
                    continue
                for ni in net.nis:
                    _rule_on_ni(rule, ni, revert)
        elif kind is not None:
            assert rule.dst is not None
            for peer in self.peers.peers:
                for pnet in peer.nets:
                    if pnet.net.lnd != rule.dst.lnd:
                        continue
                    if _rule_on_lpn(rule, kind, pnet, revert):
                        continue
                    for lpni in pnet.lpnis:
                        self._rule_on_lpni(rule, kind, lpni, pnet, revert)

    def _rule_on_lpni(self, rule: UDSP, kind: str, lpni: PeerNI, pnet: PeerNet | None,
                      revert: bool) -> None:
        """``lnet_udsp_apply_rule_on_lpni``: NID match, or a net-form dst matching the peer
        net."""
        assert self.local is not None and self.peers is not None
        dst = rule.dst
        assert dst is not None
        if not dst.matches_nid(lpni.nid) and not (pnet is not None and dst.is_net_rule
                                                  and dst.matches_net(pnet.net)):
            return
        if kind == "pair":
            src = rule.src
            _pref_list(lpni, [ni.nid for ni in self.local.local_nis() if src is not None
                              and ni.net.net.lnd == src.lnd and src.matches_nid(ni.nid)],
                       revert, "pref_nids")
        elif kind == "rte":
            assert rule.rte is not None
            gws = [p.primary_nid for p in self.peers.peers
                   if p.rtr_refcount > 0 and rule.rte.matches_nid(p.primary_nid)]
            _pref_list(lpni, gws, revert, "rtr_pref_nids")
        else:
            lpni.sel_priority = _prio(rule, revert)

    # ------------------------------------------------------------- new constructs (§7.3)
    def on_net(self, net: LNetNet) -> None:
        """``lnet_udsp_apply_policies_on_net``: net-form src priority rules, last first."""
        for rule in reversed(self.rules):
            if _kind(rule) == "src" and rule.src is not None and rule.src.is_net_rule:
                _rule_on_net(rule, net, False)

    def on_ni(self, ni: LNetNI) -> None:
        """``lnet_udsp_apply_policies_on_ni``: NID-form src priority rules."""
        for rule in reversed(self.rules):
            if _kind(rule) == "src" and rule.src is not None and not rule.src.is_net_rule:
                _rule_on_ni(rule, ni, False)

    def on_lpn(self, pnet: PeerNet) -> None:
        """``lnet_udsp_apply_policies_on_lpn``: net-form dst priority rules."""
        for rule in reversed(self.rules):
            kind = _kind(rule)
            if kind is not None and kind != "src" and rule.dst is not None \
                    and pnet.net.lnd == rule.dst.lnd:
                _rule_on_lpn(rule, kind, pnet, False)

    def on_lpni(self, lpni: PeerNI) -> None:
        """``lnet_udsp_apply_policies_on_lpni``: dst rules matching the new peer NI's NID."""
        for rule in reversed(self.rules):
            kind = _kind(rule)
            if kind is not None and kind != "src":
                self._rule_on_lpni(rule, kind, lpni, None, False)


# ------------------------------------------------------------------------------- DLC verbs
def make_rule(src: str | None, dst: str | None, rte: str | None,
              priority: int | None) -> UDSP:
    """``lustre_lnet_add_udsp``'s checks (spec §7.1); raises LNetConfigError(-EINVAL)."""
    if not (src or dst or rte):
        raise LNetConfigError(-EINVAL, "Missing required argument(s)")
    if src and dst and rte:
        raise LNetConfigError(-EINVAL, "The combination of src, dst and rte is not supported")
    if src and rte:
        raise LNetConfigError(-EINVAL, "src and rte cannot be combined")
    if priority is not None and not 0 <= priority <= UINT_MAX:
        raise LNetConfigError(-EINVAL, f'Invalid priority "{priority}"')
    action = PRIORITY if priority is not None else PREF
    if not rte and bool(src) != bool(dst) and action != PRIORITY:
        action, priority = PRIORITY, 0  # cfg-155: a lone src/dst defaults to the highest
    descr = {}
    for key, text in (("src", src), ("dst", dst), ("rte", rte)):
        try:
            descr[key] = parse_nidrange(text) if text else None
        except LNetConfigError as e:
            raise LNetConfigError(-EINVAL, f"failed to parse {key} parameter: {e.descr}") from e
    return UDSP(descr["src"], descr["dst"], descr["rte"], action, priority or 0)


# ------------------------------------------------------------------------------- application
def _prio(rule: UDSP, revert: bool) -> int:
    return UINT_MAX if revert else rule.priority


def _kind(rule: UDSP) -> str | None:
    """``lnet_udsp_apply_single_policy``'s dispatch: which callback family, or no effect."""
    if rule.dst is not None and rule.src is not None:
        return "pair" if rule.action == PREF else None       # "Bad action type"
    if rule.dst is not None and rule.rte is not None:
        return "rte" if rule.action == PREF else None
    if rule.dst is not None:
        return "dst" if rule.action == PRIORITY else None
    if rule.src is not None:
        return "src" if rule.action == PRIORITY else None
    return None                                              # rte only: "Bad UDSP policy"


def _rule_on_net(rule: UDSP, net: LNetNet, revert: bool) -> None:
    assert rule.src is not None
    if rule.src.matches_net(net.net):
        net.sel_priority = _prio(rule, revert)


def _rule_on_ni(rule: UDSP, ni: LNetNI, revert: bool) -> None:
    assert rule.src is not None
    if rule.src.matches_nid(ni.nid):
        ni.sel_priority = _prio(rule, revert)


def _rule_on_lpn(rule: UDSP, kind: str, pnet: PeerNet, revert: bool) -> bool:
    """``lnet_udsp_apply_rule_on_lpn``: True when it was a net priority rule (handled)."""
    assert rule.dst is not None
    if kind != "dst" or not rule.dst.is_net_rule:
        return False
    if rule.dst.matches_net(pnet.net):
        pnet.sel_priority = _prio(rule, revert)
    return True


def _pref_list(lpni: PeerNI, nids: list[Any], revert: bool, attr: str) -> None:
    """``lnet_udsp_apply_ni_list``/``_rte_list_on_lpni``: clear once, then add the matches;
    nothing matching leaves the list alone; a revert clears it."""
    if not nids:
        return
    current: list[Any] = getattr(lpni, attr)
    current.clear()
    if not revert:
        current.extend(dict.fromkeys(nids))


# ------------------------------------------------------------------------------- callers
class _HasUDSP(Protocol):
    @property
    def udsp(self) -> UDSPTable: ...


def add(eng: _HasUDSP, rule: UDSP, idx: int | None = None) -> None:
    """``lnetctl udsp add`` on ``eng`` (``UDSPTable.add``)."""
    eng.udsp.add(rule, idx)


def delete(eng: _HasUDSP, idx: int | None) -> None:
    """``lnetctl udsp del`` on ``eng`` (``UDSPTable.delete``)."""
    eng.udsp.delete(idx)


def show(eng: _HasUDSP, idx: int | None = None) -> dict[str, Any]:
    """``lnetctl udsp show`` on ``eng`` (``UDSPTable.show``)."""
    return eng.udsp.show(idx)


# ------------------------------------------------------------------------------- views
def ni_info(ni: LNetNI) -> dict[str, Any]:
    """``udsp info:`` of a local NI in ``net show -v 4`` (``create_local_udsp_info``)."""
    return {"net priority": _as_int(ni.net.sel_priority), "nid priority": _as_int(ni.sel_priority)}


def lpni_info(lpni: PeerNI) -> dict[str, Any]:
    """``udsp info:`` of a peer NI in ``peer show -v 4`` (``create_remote_udsp_info``)."""
    out: dict[str, Any] = {"net priority": _as_int(lpni.peer_net.sel_priority),
                           "nid priority": _as_int(lpni.sel_priority)}
    rtrs = list(getattr(lpni, "rtr_pref_nids", []))
    if rtrs:
        out["Preferred gateway NIDs"] = {f"NID-{i}": str(n) for i, n in enumerate(rtrs)}
    if lpni.pref_nids:
        out["Preferred source NIDs"] = {f"NID-{i}": str(n) for i, n in enumerate(lpni.pref_nids)}
    return out


def _as_int(value: int) -> int:
    """lnetctl prints the u32 through ``(int)``: UINT_MAX shows as -1."""
    return value - (1 << 32) if value >= 1 << 31 else value
