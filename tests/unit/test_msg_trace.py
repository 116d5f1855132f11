"""The message trace (TRACE-SCHEMA, issue 16 item 4) on the fabric: ``MsgTrace`` actions of
every send, resend and completion, and the health notices."""

from __future__ import annotations

from collections import Counter
from typing import Any

from enginekit import PORTAL, C, S, mr2_fabric

from nodes.lnet.actions import Action, MsgTrace
from nodes.lnet.notify import drain
from testbed.sim.fabric import Fabric


def _traced(fab: Fabric) -> list[tuple[str, MsgTrace]]:
    """Turn tracing on for every engine and collect what they emit, per node."""
    out: list[tuple[str, MsgTrace]] = []
    for name, driver in fab.drivers.items():  # every action goes through the node's driver
        driver.trace_sink = lambda act, name=name: out.append((name, act))
        fab.engines[name].trace_messages = True
    return out


def _put(fab: Fabric, **kw: Any) -> int:
    eng = fab.engines["c1"]
    return fab.call("c1", eng.put, fab.now, kw.pop("dst", S[0]), payload=bytes(64),
                    portal=PORTAL, **kw)  # type: ignore[return-value]


def _puts_over_a_dead_rail(fab: Fabric, settle: float) -> None:
    """Four PUTs on both rails, then s1's second rail down and four more (resent), with
    ``settle`` seconds after them."""
    for _ in range(4):
        _put(fab)
    fab.run_until(fab.now + 1)
    fab.set_link(S[1], False)
    for _ in range(4):
        _put(fab)
    fab.run_until(fab.now + settle)


def _by_msg(traces: list[tuple[str, MsgTrace]], node: str) -> dict[int, list[MsgTrace]]:
    out: dict[int, list[MsgTrace]] = {}
    for name, t in traces:
        if name == node:
            out.setdefault(t.msg, []).append(t)
    return out


def test_trace_is_off_by_default() -> None:
    """No engine emits a ``MsgTrace`` unless asked: each driver is given a trace sink (which
    would see every one) without turning its engine's trace on."""
    fab = mr2_fabric()
    seen: list[Action] = []
    for driver in fab.drivers.values():
        driver.trace_sink = seen.append
    mark = len(fab.event_log)
    _put(fab)
    fab.run_until(fab.now + 1)
    assert [e["type"] for e in fab.event_log[mark:] if e["kind"] == "recv"] == ["PUT", "ACK"]
    assert not any(e.trace_messages for e in fab.engines.values()) and seen == []


def test_every_send_ends_in_exactly_one_complete() -> None:
    """Clean PUTs, PUTs over a dead rail (resent) and PUTs to a dead peer (failed): each
    message that was sent has exactly one ``complete``, on both nodes (ACKs too)."""
    fab = mr2_fabric()
    traces = _traced(fab)
    _puts_over_a_dead_rail(fab, 5)
    fab.set_link(S[0], False)
    _put(fab)
    fab.run_until(fab.now + 400)
    for node in ("c1", "s1"):
        msgs = _by_msg(traces, node)
        assert msgs, node
        for mid, recs in msgs.items():
            kinds = Counter(t.event for t in recs)
            assert kinds["complete"] == 1, (node, mid, recs)
            if kinds["send"]:
                assert recs[-1].event == "complete", (node, mid, recs)
    completes = [t for n, t in traces if n == "c1" and t.event == "complete"]
    assert any(t.status == 0 and t.hstatus == "OK" for t in completes)
    assert any(t.status != 0 for t in completes)  # the PUT to a dead peer failed


def test_resends_carry_the_failed_hstatus_and_attempts_count_up() -> None:
    """A PUT whose first attempt dies on a down rail: ``send`` attempt 0, ``resend`` with the
    REMOTE_DROPPED hstatus and the health after the update, ``send`` attempt 1, ``complete``
    OK; every send names its own deadline (a resend re-commits, spec §3.4), only the first
    the retry_count."""
    fab = mr2_fabric()
    traces = _traced(fab)
    fab.set_link(S[0], False)
    fab.set_link(S[1], False)
    _put(fab, dst=S[0])
    fab.run_until(fab.now + 0.0005)
    fab.set_link(S[1], True)
    fab.run_until(fab.now + 5)
    recs = next(r for r in _by_msg(traces, "c1").values() if r[0].type == "PUT")
    events = [(t.event, t.attempt) for t in recs]
    assert events[0] == ("send", 0) and events[-1][0] == "complete"
    sends = [t for t in recs if t.event == "send"]
    resends = [t for t in recs if t.event == "resend"]
    assert [t.attempt for t in sends] == list(range(len(sends))) and len(sends) >= 2
    assert [t.attempt for t in resends] == list(range(1, len(sends)))
    assert all(t.hstatus == "REMOTE_DROPPED" for t in resends)
    assert all(t.health is not None and dict(t.health)["lpni"] < 1000 for t in resends)
    assert sends[0].deadline is not None and sends[0].retry_count == 2
    assert all(t.deadline is not None and t.deadline >= sends[0].deadline
               and t.retry_count is None for t in sends[1:])
    assert recs[-1].hstatus == "OK" and recs[-1].status == 0
    assert sends[-1].lpni == str(S[1])


def test_fixed_ni_on_explicit_source_and_on_responses() -> None:
    """``fixed_ni``: a free PUT is the selector's choice, a PUT with ``src`` is not, nor is
    the ACK going back the way the PUT came."""
    fab = mr2_fabric()
    traces = _traced(fab)
    _put(fab)
    fab.run_until(fab.now + 1)
    _put(fab, src=C[1], dst=S[1])
    fab.run_until(fab.now + 1)
    puts = [t for n, t in traces if n == "c1" and t.event == "send" and t.type == "PUT"]
    assert [t.fixed_ni for t in puts] == [False, True]
    assert puts[1].ni == str(C[1])
    acks = [t for n, t in traces if n == "s1" and t.event == "send" and t.type == "ACK"]
    assert len(acks) == 2 and all(t.fixed_ni for t in acks)
    assert all(not t.forwarded for _, t in traces)
    assert puts[0].to_json()["type"] == "PUT" and "hstatus" not in puts[0].to_json()


def test_health_changes_are_notices_with_their_cause() -> None:
    """``ni_health`` / ``lpni_health`` on every change of a health value (TRACE-SCHEMA)."""
    fab = mr2_fabric()
    c1 = fab.engines["c1"]
    drain(c1)
    c1.net_set_health(C[0], 300, fab.now)
    c1.peer_set_health(S[1], 700, fab.now)
    notes = [(k, f) for k, f in drain(c1) if k.endswith("_health")]
    assert notes == [("ni_health", {"nid": str(C[0]), "old": 1000, "new": 300,
                                    "cause": "manual"}),
                     ("lpni_health", {"nid": str(S[1]), "old": 1000, "new": 700,
                                      "cause": "manual"})]
    fab.run_until(fab.now + 30)  # local recovery pings (through the LND) raise the NI again
    causes = {f["cause"] for k, f in drain(c1) if k == "ni_health"}
    # the ping's GET completing OK is lnet_health_check's +sensitivity ("ok"), its REPLY the
    # recovery handler's (lib-msg.c, lib-move.c lnet_handle_recovery_reply)
    assert causes == {"ok", "recovery"}
    assert c1.ni_by_nid(C[0]).healthv == 1000


def test_every_record_carries_the_now_of_the_engine_call_that_made_it() -> None:
    """``MsgTrace.at`` is the engine's ``now`` when it decided (sends, resends over a dead
    rail, completions, response timeouts): the daemon writes a record's ``t`` from it, since
    stamping at the write put a resend decided before its deadline after it (CI: 33 µs)."""
    fab = mr2_fabric()
    seen: list[tuple[float, MsgTrace]] = []
    for name, driver in fab.drivers.items():
        driver.trace_sink = lambda act: seen.append((fab.now, act))
        fab.engines[name].trace_messages = True
    _puts_over_a_dead_rail(fab, 60)
    assert {t.event for _, t in seen} == {"send", "resend", "complete"}
    assert [(now, t.event) for now, t in seen if t.at != now] == []
    assert len({t.at for _, t in seen}) > 3  # (not one stamp for all)


def test_to_json_has_every_field_in_order() -> None:
    """``MsgTrace.to_json`` (written out field by field) has every field but ``at``, in field
    order, leaves out the ones that are None, and ``record`` puts ``t``/``kind``/``node``
    first (the simulator's event-log record)."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(MsgTrace) if f.name != "at"]
    full = MsgTrace(event="send", msg=1, type="PUT", src="a", dst="b", ni="c", lpni="d",
                    attempt=0, fixed_ni=False, forwarded=True, deadline=1.5, retry_count=2,
                    hstatus="OK", status=0, health=(("ni", 1000), ("lpni", 900)),
                    dropped="x", at=3.0)
    out = full.to_json()
    assert list(out) == names
    assert out["health"] == {"ni": 1000, "lpni": 900} and out["attempt"] == 0
    bare = MsgTrace(event="complete", msg=2, type="ACK", src="a", dst="b")
    assert bare.to_json() == {"event": "complete", "msg": 2, "type": "ACK", "src": "a",
                              "dst": "b", "forwarded": False}
    rec = full.record(1.25, "c1")
    assert list(rec) == ["t", "kind", "node", *names]
    assert rec == {"t": 1.25, "kind": "msg", "node": "c1", **out}


def test_record_shapes_match_to_json() -> None:
    """``record`` builds a ``send``'s and a ``complete``'s usual fields in one display each
    (no dict growth): for every mix of present and absent fields it is ``{"t", "kind",
    "node"}`` then exactly ``to_json()``, in the same order."""
    import itertools

    optional = {"ni": "c", "lpni": "d", "attempt": 0, "fixed_ni": False, "deadline": 1.5,
                "retry_count": 2, "hstatus": "OK", "status": 0,
                "health": (("ni", 1000), ("lpni", 900)), "dropped": "x"}
    for mask in itertools.product((False, True), repeat=len(optional)):
        kw = {k: v for (k, v), on in zip(optional.items(), mask, strict=True) if on}
        trace = MsgTrace(event="send", msg=1, type="PUT", src="a", dst="b", forwarded=True,
                         **kw)  # type: ignore[arg-type]
        rec = trace.record(0.5, "r1")
        assert list(rec.items()) == [("t", 0.5), ("kind", "msg"), ("node", "r1"),
                                     *trace.to_json().items()]


def test_json_line_is_the_encoders_text_of_the_record() -> None:
    """The daemon's trace line (``MsgTrace.json_line``, written out for speed: issue 31 item
    5) is exactly ``json.JSONEncoder(sort_keys=True).encode`` of ``record`` with ``t`` and
    ``deadline`` shifted to unix seconds, for every mix of present and absent fields, and for
    strings that need escaping (quotes, backslashes, control and non-ASCII characters)."""
    import itertools
    import json

    encode = json.JSONEncoder(sort_keys=True).encode
    offset = 1_764_700_000.123456
    optional = {"ni": "10.10.0.1@tcp", "lpni": "10.10.0.2@tcp", "attempt": 3,
                "fixed_ni": False, "deadline": 61.0000004, "retry_count": 2,
                "hstatus": "REMOTE_DROPPED", "status": -110,
                "health": (("ni", 1000), ("lpni", 899)), "dropped": "drop rule"}
    for mask in itertools.product((False, True), repeat=len(optional)):
        kw = {k: v for (k, v), on in zip(optional.items(), mask, strict=True) if on}
        for forwarded in (False, True):
            trace = MsgTrace(event="send", msg=123456789, type="PUT", src="10.10.0.1@tcp",
                             dst="12.0.0.2@o2ib1", forwarded=forwarded,
                             **kw)  # type: ignore[arg-type]
            want = trace.record(round(0.25 + offset, 6), "c1")
            if trace.deadline is not None:
                want["deadline"] = round(trace.deadline + offset, 6)
            assert trace.json_line(0.25, "c1", offset) == encode(want)
    odd = MsgTrace(event='se"nd', msg=1, type="P\\UT", src="a\nb", dst="\u00e9", ni="\x7f",
                   fixed_ni=True, health=(("n\ti", 5),), dropped="\u2028")
    want = odd.record(7.5, "nö\"de")
    assert odd.json_line(7.5, "nö\"de", 0.0) == encode(want)
    assert json.loads(odd.json_line(7.5, "nö\"de", 0.0)) == json.loads(encode(want))
