"""The engine's per-message dataclasses with a written ``__init__`` (``init=False``): each one
takes exactly the fields, in order, with the dataclass's defaults, and sets every one of them.

Why they are written out (nodes/lnet/hdr.py): the ``__init__`` ``dataclass`` generates is Python
code that the compiled engine runs for every object it builds; a written one is compiled with
the class. The price is that a field added later must be added to ``__init__`` as well: this
test fails until it is. The checks run on the sources (loaded by path, so as Python, whatever
the build), since a compiled ``__init__`` has no signature to read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "nodes" / "lnet"
#: module -> the classes of it with a written ``__init__``
WRITTEN = {"hdr": ["WireHandle", "LNetHdr"], "actions": ["Transmit", "MDEvent"],
           "events": ["TxCompleted", "MessageReceived"], "msg": ["MD", "ME", "Msg"]}


def _source(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_src_lnet_{name}", ENGINE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (dataclasses resolves the module of the class)
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


CASES = [(m, c) for m, classes in WRITTEN.items() for c in classes]


@pytest.mark.parametrize(("module", "cls"), CASES, ids=[f"{m}.{c}" for m, c in CASES])
def test_written_init_takes_and_sets_every_field(module: str, cls: str) -> None:
    klass = getattr(_source(module), cls)
    assert "__init__" in vars(klass) and not klass.__dataclass_params__.init
    fields = dataclasses.fields(klass)
    params = list(inspect.signature(klass.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        kind = inspect.Parameter.KEYWORD_ONLY if f.kw_only else \
            inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert p.kind is kind, f.name
        if f.default is dataclasses.MISSING:
            assert p.default is inspect.Parameter.empty, f.name
        else:
            assert p.default is f.default or p.default == f.default, f.name
    given = {f.name: object() for f in fields}  # (the sources check no types)
    obj = klass(**given)
    assert all(getattr(obj, name) is value for name, value in given.items())
    required = {f.name: given[f.name] for f in fields if f.default is dataclasses.MISSING}
    obj = klass(**required)
    for f in fields:
        want = required.get(f.name, f.default)
        assert getattr(obj, f.name) is want, f.name


@pytest.mark.parametrize(("module", "cls"), CASES, ids=[f"{m}.{c}" for m, c in CASES])
def test_the_imported_class_keeps_its_dataclass_methods(module: str, cls: str) -> None:
    """Compiled or not: still a dataclass (fields, replace, equality where it had it)."""
    klass = getattr(importlib.import_module(f"nodes.lnet.{module}"), cls)
    assert dataclasses.is_dataclass(klass) and not klass.__dataclass_params__.init
    src = getattr(_source(module), cls)
    assert [f.name for f in dataclasses.fields(klass)] == \
        [f.name for f in dataclasses.fields(src)]
