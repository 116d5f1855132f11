"""setuptools' package list, plus the engine compiled with mypyc where it can be.

Packages: what ``find_namespace_packages`` finds, plus ``testbed.topologies``. The built-in
topologies stay in the top-level ``topologies/`` directory; ``package-dir`` in pyproject.toml
maps that directory to the package ``testbed.topologies`` in the wheel
(``testbed/plan/source.py`` finds it with importlib.resources). A mapped package is not found
by a directory search, and pyproject.toml's ``packages`` is either that search or a literal
list (which a new subpackage would silently fall out of); so this file adds the one mapped
package to the search. Namespace packages are searched too (``nodes/dlc`` has no
``__init__.py``), as pyproject's own ``packages.find`` does by default.

The compiled engine (issues 10, 13, 17: the engine is the CPU bound of the simulator, explore
and the node daemons). ``nodes/lnet`` (``mypy --strict`` clean) is compiled with mypyc into C
extensions when mypy is importable and a C compiler and Python's headers are present: one
shared library (``native__mypyc``) and one small module per source module, all in
``nodes/lnet/_native/`` (beside the sources in an editable install, in the wheel otherwise),
with the SHA-256 of the sources they were built from in ``_native/SOURCES``.
``nodes/lnet/__init__.py`` puts that directory first on the package's path only while the hash
matches the sources, so an edited source is never shadowed by old compiled code. Without
mypy or a compiler, or with ``LNET_TESTBED_PURE_PYTHON=1`` set, or if the compile fails, the
build goes on without them (one line on stderr) and the engine runs as pure Python.
``make native`` rebuilds in place (``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
ENGINE = "nodes/lnet"
NATIVE = "_native"  # the compiled modules' directory inside the package
PURE_ENV = "LNET_TESTBED_PURE_PYTHON"


def _say(line: str) -> None:
    print(f"lnet-testbed: {line}", file=sys.stderr)


#: engine modules left as Python, and why
NOT_COMPILED = {
    "__init__.py": "picks compiled or source modules at import",
    "errors.py": "its exceptions are subclassed outside the engine (nodes/dlc, nodes/daemon), "
                 "which mypyc's compiled classes refuse",
}


def _engine_sources() -> list[str]:
    """The modules compiled: the engine's but ``NOT_COMPILED``."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / ENGINE).glob("*.py")
                  if p.name not in NOT_COMPILED)


def _source_digest() -> str:
    """``nodes.lnet.source_digest`` of the sources: the package's ``__init__.py`` loaded by
    path under another name (nothing of the engine is imported)."""
    spec = importlib.util.spec_from_file_location(
        "_lnet_init", ROOT / ENGINE / "__init__.py", submodule_search_locations=[])
    assert spec is not None and spec.loader is not None
    init = importlib.util.module_from_spec(spec)
    os.environ[PURE_ENV] = "1"  # (its import-time path choice has nothing to do here)
    spec.loader.exec_module(init)
    digest: str = init.source_digest(str(ROOT / ENGINE))
    return digest


class BuildEngine(build_ext):
    """``build_ext`` that compiles the engine with mypyc, or skips it (module doc)."""

    def finalize_options(self) -> None:
        self.digest = ""
        exts: list[Extension] = []
        if self.distribution.ext_modules:  # (empty with PURE_ENV set)
            try:
                from mypyc.build import mypycify

                self.digest = _source_digest()  # before compiling: what gets compiled
                here = os.getcwd()
                os.chdir(ROOT)
                try:
                    exts = mypycify(_engine_sources(), group_name="nodes.lnet.native",
                                    target_dir="build/mypyc")
                finally:
                    os.chdir(here)
            except (Exception, SystemExit) as exc:  # mypy absent, or refused
                _say(f"engine not compiled (mypyc: {str(exc).strip()[:200]}); pure Python")
                exts = []
            for ext in exts:  # nodes.lnet.X -> nodes.lnet._native.X (same init symbol)
                head, _, tail = ext.name.rpartition(".")
                ext.name = f"{head}.{NATIVE}.{tail}"
                ext.sources = [str(ROOT / s) if not os.path.isabs(s) else s
                               for s in ext.sources]
                ext.include_dirs = [str(ROOT / d) if not os.path.isabs(d) else d
                                    for d in ext.include_dirs]
        self.distribution.ext_modules = exts
        super().finalize_options()

    def _native_dirs(self) -> list[Path]:
        dirs = [Path(self.build_lib) / ENGINE / NATIVE]
        if self.inplace or getattr(self, "editable_mode", False):
            dirs.append(ROOT / ENGINE / NATIVE)
        return dirs

    def run(self) -> None:
        keep = {Path(self.get_ext_filename(ext.name)).name for ext in self.extensions}
        for d in self._native_dirs():  # no stamp until this build succeeds; no leftovers
            if d.is_dir():
                for old in d.iterdir():
                    if old.name == "SOURCES" or (old.suffix == ".so" and old.name not in keep):
                        old.unlink()
        if not self.extensions:
            return
        for d in self._native_dirs():
            d.mkdir(parents=True, exist_ok=True)
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python.h, ...: the sources still run
            _say(f"engine not compiled ({str(exc).strip()[:200]}); pure Python")
            return
        for d in self._native_dirs():
            if d.is_dir():
                (d / "SOURCES").write_text(self.digest + "\n")


def _ext_modules() -> list[Extension]:
    """One placeholder, replaced at ``build_ext`` time (mypyc's work is done only when
    building, not for metadata), or none: then the wheel is pure."""
    if os.environ.get(PURE_ENV):
        return []
    return [Extension(f"nodes.lnet.{NATIVE}.native__mypyc", sources=[])]


setup(packages=[*find_namespace_packages(include=["testbed", "testbed.*", "nodes", "nodes.*",
                                                  "faults", "faults.*"],
                                         exclude=["*.__pycache__", f"*.{NATIVE}"]),
                "testbed.topologies"],
      ext_modules=_ext_modules(), cmdclass={"build_ext": BuildEngine})
