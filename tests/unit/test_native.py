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
    for package in nodes.native.packages():
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


def test_every_module_imports_compiled() -> None:
    """Each engine module but ``NOT_COMPILED``, and each module of another package that
    ``nodes.native`` lists, is the compiled one, and importing any of them first works: a
    compiled dataclass naming a type from a module not yet imported would crash the
    interpreter (mypyc issue 1209; ``nodes/lnet/__init__.py`` imports the engine first)."""
    _need_build()
    names = sorted(p.stem for p in ENGINE.glob("*.py") if p.stem not in NOT_COMPILED)
    assert names == [n.removesuffix(".py") for n in nodes.native.compiled_modules("nodes.lnet")]
    others = [f"{p}.{n.removesuffix('.py')}" for p in nodes.native.packages()
              if p != "nodes.lnet" for n in nodes.native.compiled_modules(p)]
    assert "nodes.driver" in others and "testbed.sim.fabric" in others
    env = {k: v for k, v in os.environ.items() if k != nodes.lnet.PURE_ENV}
    for name in ("nodes.lnet." + names[0], "nodes.lnet.msg", "nodes.lnet." + names[-1],
                 *others):  # alone, in a fresh interpreter
        subprocess.run([sys.executable, "-c", f"import {name}"], check=True, timeout=60,
                       env=env, cwd=ROOT)
    code = ("import importlib, sys\nfor n in sys.argv[1:]:\n"
            "    print(importlib.import_module(n).__file__)")
    wanted = [f"nodes.lnet.{n}" for n in names] + others
    out = subprocess.run([sys.executable, "-c", code, *wanted], capture_output=True,
                         text=True, check=True, timeout=60, env=env, cwd=ROOT).stdout.split()
    # (a module first imported by compiled code gets a made-up ``__file__`` under the shared
    # library's directory, nodes/lnet/_native/)
    assert len(out) == len(wanted)
    for name, where in zip(wanted, out, strict=True):
        native = ROOT.joinpath(*name.split(".")[:-1], nodes.native.NATIVE_DIR)
        assert where.startswith((str(native), str(NATIVE))) and where.endswith(SO), (name,
                                                                                    where)


def test_only_the_listed_modules_of_a_package_are_compiled_and_guarded(
        tmp_path: Path) -> None:
    """``COMPILED_ONLY``: a package's listed modules are compiled and in the digest, the rest
    of it stays Python and outside it: editing one of those keeps everything compiled,
    editing a listed one sends every compiled package back to its sources."""
    _need_build()
    assert sorted(nodes.native.COMPILED_ONLY["nodes"]) == nodes.native.compiled_modules("nodes")
    assert "echo.py" not in nodes.native.compiled_sources()
    pkg = _copy(tmp_path)
    echo = tmp_path / "nodes" / "echo.py"
    echo.write_text(echo.read_text() + "# edited\n")
    out, err = _import(tmp_path)
    assert out.split()[0] == "True" and err == ""
    driver = tmp_path / "nodes" / "driver.py"
    driver.write_text(driver.read_text() + "# edited\n")
    out, err = _import(tmp_path)
    assert out == f"False {pkg / 'engine.py'}" and "older than their sources" in err


def test_the_makefile_rebuilds_when_a_compiled_source_changes() -> None:
    """``make native`` depends on exactly what the digest covers (``nodes/native.py`` run as a
    script lists it): a compiled module or a Python one whose types compiled code reads, in
    every compiled package; nothing else triggers a rebuild."""
    text = (ROOT / "Makefile").read_text()
    assert "NATIVE_SRCS := $(shell python3 nodes/native.py 2>/dev/null)" in text
    assert "$(NATIVE_STAMP): $(NATIVE_SRCS)" in text
    listed = subprocess.run([sys.executable, "nodes/native.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split()
    assert listed == nodes.native.digested_sources(str(ROOT))
    assert {"nodes/driver.py", "nodes/lnet/select.py", "nodes/lnd/bufpool.py",
            "testbed/sim/sched.py"} <= set(listed)
    assert "testbed/sim/inproc.py" not in listed and "nodes/lnet/__init__.py" not in listed
    assert set(nodes.native.compiled_sources(str(ROOT))) <= set(listed) | {
        f"{p.replace('.', '/')}/__init__.py" for p in nodes.native.packages()}
