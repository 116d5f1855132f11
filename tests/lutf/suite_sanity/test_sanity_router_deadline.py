"""sanity-lnet.sh test 256: a router does not drop messages that are past their deadline, at
lustre-release c881f8ebcb. Nodes: ``routed-pbc.yaml`` (``setup_router_test
peer_buffer_credits=1024``: the router's buffer credits per peer are not what runs out).

After ``do_basic_rtr_test`` the router gets retry_count 0 and an LNet transaction timeout of
10 s (``set_ltt_node``), fail_loc 0xe002 (CFS_FAIL_DELAY_MSG_FORWARD: ``lnet_parse`` skips the
delay rules, so they apply where the router sends, ``lnet_post_send_locked``, after the
message took its peer NI tx credit) and delay rules of 11 s on GETs from this host to the
remote peer. This host pings the remote peer as many times as the router has tx credits for
it, plus one, all in the background (``ping --timeout 13 ... &``); the last one waits on the
router's peer NI credit queue past its deadline. After 11 s the delay rules go; every ping
must succeed and the router must count no dropped GET for the remote peer: a router never
drops a message for its deadline (lib-move.c ``lnet_check_message_drop``: "Routers always
attempt delivery")."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lutf import background
from lutf.suite_sanity.routers import Routed
from lutf.suite_sanity.sanity import REMOTE_NET, run

pytestmark = [pytest.mark.mininet, pytest.mark.topology("routed-pbc.yaml")]


def _credits(node: Any, nid: str) -> int:
    """``peer show -v --nid NID | awk '/max_ni_tx_credits:/' | sum``."""
    out = run(node, f"peer show -v --nid {nid}").out
    return sum(int(line.split()[-1]) for line in out.splitlines()
               if line.strip().startswith("max_ni_tx_credits:"))


def _dropped_gets(node: Any, nid: str) -> int:
    doc = yaml.safe_load(run(node, f"peer show -v 2 --nid {nid}").out)
    return sum(int(ni["dropped_stats"]["get"]) for peer in doc["peer"]
               for ni in peer["peer ni"])


def test_sanity_256_router_keeps_messages_past_their_deadline(module_topology: Any) -> None:
    tb = module_topology
    t = Routed(tb)
    t.basic()
    r = tb.node("r")
    rtr_pc, my_pc = _credits(r, t.pnid), _credits(t.l, t.rnids["r"][0])
    assert 0 < rtr_pc <= my_pc, (rtr_pc, my_pc)  # sanity-lnet skips otherwise
    old = yaml.safe_load(run(r, "global show").out)["global"]
    ltt, delay = 10, 11
    run(r, "set retry_count 0")
    run(r, f"net set --net {REMOTE_NET} --lnd-timeout {(ltt - 1) // 1}")  # set_ltt_node
    run(r, f"set transaction_timeout {ltt}")
    try:
        assert r.lctl("set_param fail_loc=0xe002").rc == 0
        for lnid in t.l.lctl("list_nids").out.split():
            for rnid in t.p.lctl("list_nids").out.split():
                res = r.lctl(f"net_delay_add -s {lnid} -d {rnid} -l {delay} -r 1 -m GET")
                assert res.rc == 0, res
        pings = [(t.l, "lnetctl", f"ping --timeout {delay + 2} {t.pnid}")] * (rtr_pc + 1)
        done, _ = background.run(tb, pings, delay, then=[(r, "lctl", "net_delay_del -a")])
        assert [res.rc for res in done] == [0] * len(pings), [res.err for res in done]
    finally:
        r.lctl("net_delay_del -a")
        r.lctl("set_param fail_loc=0")
        run(r, f"set retry_count {old['retry_count']}")
        run(r, f"set transaction_timeout {old['transaction_timeout']}")
        run(r, f"net set --net {REMOTE_NET} --lnd-timeout 0")
    assert _dropped_gets(r, t.pnid) == 0
