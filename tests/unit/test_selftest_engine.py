"""What lnet_selftest needs of the engine: posted buffers with events (issue 13 item 1).

srpc posts its request buffers, reply buffers and passive bulk as match entries with events
(rpc.c ``srpc_post_passive_rdma``: threshold 1, ``LNET_UNLINK``): a PUT into one gives the
upper layer a PUT event with the payload, a GET on one a GET event, and the MD is unlinked
and its ME removed once its threshold runs out. Matching stays first-in-post-order across
exact and wildcard entries (``lnet_ptl_match_md``).
"""

from __future__ import annotations

from enginekit import C, S, mr2_fabric

from nodes.lnet.actions import MDEvent

PORTAL = 52  # mr2_fabric posts a wildcard sink here first
FREE = 50  # no entry of the harness


def _events(fab, node: str, handle: int) -> list[MDEvent]:
    return [e for e in fab.events[node] if e.handle == handle]


def test_put_into_a_posted_buffer_gives_its_payload_then_unlinks_it() -> None:
    fab = mr2_fabric()
    s1 = fab.engines["s1"]
    h = s1.attach_me(FREE, 0xABC, 0, events=True, threshold=1)
    before = len(s1.mds.mes)
    fab.call("c1", fab.engines["c1"].put, fab.now, S[0], payload=b"x" * 160, portal=FREE,
             match_bits=0xABC, ack=False)
    fab.run_until(fab.now + 1)
    evs = _events(fab, "s1", h)
    assert [(e.kind, e.unlinked, bytes(e.payload), e.mlength) for e in evs] == [
        ("PUT", True, b"x" * 160, 160)]
    assert evs[0].source in C and evs[0].target in S and evs[0].initiator == C[0]
    assert len(s1.mds.mes) == before - 1 and s1.md_by_handle(h) is None
    # a second PUT on the same bits finds nothing now: dropped, counted
    drops = s1.counters.values["drop_count"]
    fab.call("c1", fab.engines["c1"].put, fab.now, S[0], payload=b"y", portal=FREE,
             match_bits=0xABC, ack=False)
    fab.run_until(fab.now + 1)
    assert s1.counters.values["drop_count"] == drops + 1


def test_get_on_a_posted_source_reads_its_data_and_gives_a_get_event() -> None:
    fab = mr2_fabric()
    s1 = fab.engines["s1"]
    h = s1.attach_me(FREE, 7, 0, data=b"pattern!" * 4, events=True, threshold=1)
    gh = fab.call("c1", fab.engines["c1"].get, fab.now, S[0], length=32, portal=FREE,
                  match_bits=7)
    fab.run_until(fab.now + 1)
    assert [(e.kind, e.unlinked) for e in _events(fab, "s1", h)] == [("GET", True)]
    reply = _events(fab, "c1", gh)[-1]
    assert (reply.kind, bytes(reply.payload)) == ("REPLY", b"pattern!" * 4)


def test_matching_is_first_posted_across_exact_and_wildcard_entries() -> None:
    fab = mr2_fabric()
    s1 = fab.engines["s1"]  # mr2_fabric posted a wildcard sink on the portal first
    h = s1.attach_me(PORTAL, 9, 0, events=True, threshold=1)
    assert s1.mds.match(PORTAL, 9).handle != h  # the earlier wildcard wins, as a scan would
    s1.mds.mes.clear()
    s1.mds._wild.clear()
    s1.mds._exact.clear()
    s1.mds._me_of.clear()
    s1.mds._seq.clear()
    exact = s1.attach_me(PORTAL, 9, 0, events=True)
    wild = s1.attach_me(PORTAL, 0, 0xFF, events=True)
    assert s1.mds.match(PORTAL, 9).handle == exact
    assert s1.mds.match(PORTAL, 10).handle == wild
    assert s1.mds.match(PORTAL + 1, 9) is None
    fab.call("s1", s1.unlink, fab.now, exact)
    assert s1.mds.match(PORTAL, 9).handle == wild
    assert [e.kind for e in _events(fab, "s1", exact)] == ["UNLINK"]


def test_threshold_counts_down_and_an_infinite_buffer_stays() -> None:
    fab = mr2_fabric()
    s1 = fab.engines["s1"]
    two = s1.attach_me(PORTAL + 1, 1, 0, events=True, threshold=2)
    inf = s1.attach_me(PORTAL + 1, 2, 0, events=True)
    c1 = fab.engines["c1"]
    for bits in (1, 1, 2, 2, 2):
        fab.call("c1", c1.put, fab.now, S[0], payload=b"z", portal=PORTAL + 1,
                 match_bits=bits, ack=False)
    fab.run_until(fab.now + 1)
    assert [e.unlinked for e in _events(fab, "s1", two)] == [False, True]
    assert [e.unlinked for e in _events(fab, "s1", inf)] == [False, False, False]
    assert s1.md_by_handle(inf) is not None


def test_a_get_of_a_whole_posted_source_replies_with_its_buffer_uncopied() -> None:
    """lnet_selftest brw write: the server GETs the client's whole 1 MiB bulk. The REPLY
    carries the MD's buffer itself (receive.py ``_window``): compiled code copies even a
    whole-bytes slice, which cost the client a fresh 1 MiB buffer per RPC (throughput.py)."""
    fab = mr2_fabric()
    s1 = fab.engines["s1"]
    data = b"bulk" * 1024
    s1.attach_me(FREE, 8, 0, data=data, events=True, threshold=2)
    for length in (len(data), 16):
        fab.call("c1", fab.engines["c1"].get, fab.now, S[0], length=length, portal=FREE,
                 match_bits=8)
        fab.run_until(fab.now + 1)
    replies = [t.payload for _, node, t in fab.transmits
               if node == "s1" and t.hdr.type.name == "REPLY"]
    assert replies[0] is data and replies[1] == data[:16]
