"""The front end's per-node state has one home: ``Runtime.dlc_state``, a field of every
runtime (nodes/dlc/runtime.py), gone with it; two runtimes never share it."""

from __future__ import annotations

from rtdouble import RuntimeDouble

from nodes.dlc import debuglog
from nodes.dlc.verbs import lctl_param, lctl_uuid
from nodes.lnet.nid import NID


def test_the_front_ends_state_lives_on_the_runtime() -> None:
    rt = RuntimeDouble()
    debuglog.add(rt, "a line of the front end")
    front = rt.dlc_state["dk_front_lines"]
    assert [line for _t, _m, line in front] == ["a line of the front end"]
    assert "a line of the front end" in debuglog.dump_and_clear(rt)
    assert "a line of the front end" not in debuglog.dump_and_clear(rt)
    assert lctl_uuid._table(rt) is lctl_uuid._table(rt) is rt.dlc_state["uuids"]
    assert lctl_param._stored_of(rt) is rt.dlc_state["params"]


def test_two_runtimes_keep_their_own_state() -> None:
    one, two = RuntimeDouble(), RuntimeDouble()
    one.engine.configure()
    assert lctl_uuid.add_uuid(one, ["u1", "1.2.3.4@tcp9"])[0] == 0
    assert lctl_uuid._table(one) == {"u1": [NID.parse("1.2.3.4@tcp9")]}
    assert lctl_uuid._table(two) == {} and two.dlc_state == {"uuids": {}}
