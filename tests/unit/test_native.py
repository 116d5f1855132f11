"""The compiled packages (setup.py, ``nodes/native.py``): used only while they match the
sources; every module imports compiled; the pure-Python fallback is one variable away.

The modules compiled with mypyc sit in their package's ``_native/`` with the hash of the
sources they were built from. A copy of the compiled packages is made in a temporary directory
and imported there in a child process: with the recorded hash it runs compiled, with one source
edited it runs that source (and says so in one line), never the old compiled code.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nodes.lnet
import nodes.lnet.engine
import nodes.native

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "nodes" / "lnet"
NATIVE = ENGINE / "_native"
#: the engine's modules setup.py leaves as Python
NOT_COMPILED = {n.removesuffix(".py") for n in nodes.native.COMPILED["nodes.lnet"]}
SO = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _built() -> bool:
    """Compiled modules for these very sources are here (``make venv``/``make native`` ran
    with a C compiler)."""
    return nodes.native.built_for_sources("nodes.lnet")


#: set by .ci/run: the machine has a C compiler, so a missing build is a failure, not a skip
REQUIRE_ENV = "LNET_TESTBED_REQUIRE_NATIVE"


def _need_build() -> None:
    if _built():
        return
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set but the engine is not compiled for these sources "
                    "(the build fell back to Python: see `make native`)")
    pytest.skip("no compiled engine for these sources (no C compiler at install?)")


def _copy(tmp: Path, with_native: bool = True) -> Path:
    """``nodes/__init__.py``, ``nodes/native.py`` and every compiled package (sources, and the
    compiled modules if asked) under ``tmp``; the copy of ``nodes/lnet``."""
    (tmp / "nodes").mkdir()
    for name in ("__init__.py", "native.py"):
        shutil.copy(ROOT / "nodes" / name, tmp / "nodes")
    for package in nodes.native.COMPILED:
        sub = Path(*package.split("."))
        shutil.copytree(ROOT / sub, tmp / sub, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            "__pycache__", *(() if with_native else ("_native",))))
    return tmp / "nodes" / "lnet"


def _import(tmp: Path, pure: bool = False) -> tuple[str, str]:
    """A child imports ``nodes.lnet.engine`` from ``tmp``: (``NATIVE`` and the engine's file,
    stderr)."""
    env = {k: v for k, v in os.environ.items() if k != nodes.lnet.PURE_ENV}
    if pure:
        env[nodes.lnet.PURE_ENV] = "1"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import nodes.lnet.engine as e; "
            "import nodes.lnet as p; print(p.NATIVE, e.__file__)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp)], capture_output=True,
                         text=True, timeout=60, check=True, env=env)
    return out.stdout.strip(), out.stderr


def test_in_use_exactly_when_built_for_these_sources() -> None:
    """The compiled engine runs here when it was built for these sources and not switched off;
    the test run says which (``NATIVE``)."""
    off = bool(os.environ.get(nodes.lnet.PURE_ENV))
    if not off:
        _need_build()
    assert (_built() and not off) == nodes.lnet.NATIVE
    where = nodes.lnet.engine.__file__ or ""
    assert where.endswith(SO) if nodes.lnet.NATIVE else where == str(ENGINE / "engine.py")


def test_an_edited_source_is_not_shadowed_by_old_compiled_code(tmp_path: Path) -> None:
    _need_build()
    pkg = _copy(tmp_path)
    out, err = _import(tmp_path)
    native, where = out.split()
    assert native == "True" and Path(where).parent == pkg / "_native" and err == ""
    assert _import(tmp_path, pure=True) == (f"False {pkg / 'engine.py'}", "")
    hstatus = pkg / "hstatus.py"
    hstatus.write_text(hstatus.read_text() + "# edited\n")
    out, err = _import(tmp_path)
    assert out == f"False {pkg / 'engine.py'}"  # the sources, edited one included
    assert err.count("\n") == 1 and "older than their sources" in err and "make native" in err


def test_a_stale_or_absent_build_runs_the_sources(tmp_path: Path) -> None:
    """Without a C compiler nothing is built: the sources run, silently. A build recorded for
    other sources: the sources run, with one line (no compiled code needed to show it)."""
    pkg = _copy(tmp_path, with_native=False)
    assert _import(tmp_path) == (f"False {pkg / 'engine.py'}", "")
    (pkg / "_native").mkdir()
    (pkg / "_native" / "SOURCES").write_text("0" * 64 + "\n")
    out, err = _import(tmp_path)
    assert out == f"False {pkg / 'engine.py'}" and err.count("\n") == 1


@pytest.mark.parametrize("package", sorted(nodes.native.COMPILED))
def test_every_module_imports_compiled(package: str) -> None:
    """Each module of a compiled package but those it leaves as Python is the compiled one,
    and importing any of them first works: a compiled dataclass naming a type from a module
    not yet imported would crash the interpreter (mypyc issue 1209; each package's
    ``__init__.py`` imports its modules in a safe order first: ``nodes/lnet/__init__.py``)."""
    _need_build()
    where = ROOT.joinpath(*package.split("."))
    python = {n.removesuffix(".py") for n in nodes.native.COMPILED[package]}
    names = sorted(p.stem for p in where.glob("*.py") if p.stem not in python)
    env = {k: v for k, v in os.environ.items() if k != nodes.lnet.PURE_ENV}
    first = [names[0], "msg", names[-1]] if package == "nodes.lnet" else [names[0], names[-1]]
    for name in first:  # alone, in a fresh interpreter
        subprocess.run([sys.executable, "-c", f"import {package}.{name}"], check=True,
                       timeout=60, env=env, cwd=ROOT)
    code = ("import importlib, sys\nfor n in sys.argv[2:]:\n"
            "    print(importlib.import_module(sys.argv[1] + '.' + n).__file__)")
    out = subprocess.run([sys.executable, "-c", code, package, *names], capture_output=True,
                         text=True, check=True, timeout=60, env=env, cwd=ROOT).stdout.split()
    # (a module first imported by compiled code gets a made-up ``__file__`` under the shared
    # library's _native/, nodes/lnet/_native/)
    native = (str(where / "_native"), str(NATIVE))
    assert [f for f in out if not (f.startswith(native) and f.endswith(SO))] == []
    assert len(out) == len(names)


def test_the_makefile_rebuilds_when_a_compiled_package_changes() -> None:
    """``make native`` watches the directories of exactly the packages setup.py compiles."""
    line = next(t for t in (ROOT / "Makefile").read_text().splitlines()
                if t.startswith("NATIVE_DIRS :="))
    assert sorted(line.split(":=")[1].split()) == sorted(
        p.replace(".", "/") for p in nodes.native.COMPILED)
