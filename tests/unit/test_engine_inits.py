"""The engine classes made per message, and the LND's and selftest's, have their ``__init__``
written out (mypyc compiles it; a dataclass's generated one stays interpreted Python, ~1 us for
``Msg`` or ``LNetHdr``): each must take every field, in field order, with the field's default,
as the generated one did."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import nodes.lnet
from nodes.lnd.framing import LNetMessageReceived
from nodes.lnd.lifecycle import RxMsg
from nodes.lnd.sendq import Tx
from nodes.lnet.actions import MDEvent, MsgTrace, Transmit
from nodes.lnet.events import MessageReceived, TxCompleted
from nodes.lnet.hdr import LNetHdr, WireHandle
from nodes.lnet.msg import MD, ME, Forwarding, Msg
from nodes.selftest.rpc import Bulk, Ev

WRITTEN_OUT = [WireHandle, LNetHdr, Transmit, MDEvent, MsgTrace, TxCompleted, MessageReceived,
               MD, ME, Msg, Forwarding, LNetMessageReceived, RxMsg, Tx, Ev, Bulk]


@pytest.mark.skipif(nodes.lnet.NATIVE, reason="compiled classes check their field types: "
                    "the sources' pass (make test, LNET_TESTBED_PURE_PYTHON=1) runs it")
@pytest.mark.parametrize("cls", WRITTEN_OUT, ids=lambda c: c.__name__)
def test_init_takes_every_field_with_its_default(cls: type) -> None:
    fields = dataclasses.fields(cls)
    values = {f.name: object() for f in fields}  # a distinct value per field
    kw_only = all(f.kw_only for f in fields)
    made = cls(**values) if kw_only else cls(*values.values())  # (else by position)
    assert [getattr(made, f.name) for f in fields] == list(values.values())
    required = {f.name: values[f.name] for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    made = cls(**required)
    for f in fields:
        if f.name not in required:
            assert getattr(made, f.name) == f.default, f.name


@pytest.mark.parametrize("cls", WRITTEN_OUT, ids=lambda c: c.__name__)
def test_init_is_the_written_out_one(cls: type) -> None:
    """Not the dataclass's generated one (its code is ``<string>``): compiled with the
    engine, or the module's own source."""
    init = cls.__dict__["__init__"]
    if nodes.lnet.NATIVE:
        assert not inspect.isfunction(init)
    else:
        assert inspect.getsourcefile(init) == inspect.getsourcefile(cls)
