"""setuptools' package list, plus the engine compiled with mypyc where it can be.

Packages: what ``find_namespace_packages`` finds, plus ``testbed.topologies``. The built-in
topologies stay in the top-level ``topologies/`` directory; ``package-dir`` in pyproject.toml
maps that directory to the package ``testbed.topologies`` in the wheel
(``testbed/plan/source.py`` finds it with importlib.resources). A mapped package is not found
by a directory search, and pyproject.toml's ``packages`` is either that search or a literal
list (which a new subpackage would silently fall out of); so this file adds the one mapped
package to the search. Namespace packages are searched too (``nodes/dlc`` has no
``__init__.py``), as pyproject's own ``packages.find`` does by default.

The compiled packages (issues 10, 13, 17: the engine is the CPU bound of the simulator,
explore and the node daemons, and the Python around it the next one). The packages
``nodes/native.py`` lists in ``COMPILED`` and the modules it lists in ``COMPILED_ONLY`` (each
``mypy --strict`` clean) are compiled with mypyc
into C extensions when mypy is importable and a C compiler and Python's headers are present, in
one group so that compiled code calls compiled code directly: one shared library
(``native__mypyc``, in ``nodes/lnet/_native/``) and one small module per source module, in its
package's ``_native/`` (beside the sources in an editable install, in the wheel otherwise), with
the SHA-256 of the sources they were built from in each ``_native/SOURCES``. Each package's
``__init__.py`` puts that directory first on the package's path only while the hash matches the
sources (``nodes.native.use_native``), so an edited source is never shadowed by old compiled
code. Without mypy or a compiler, or with ``LNET_TESTBED_PURE_PYTHON=1`` set, or if the compile
fails, the build goes on without them (one line on stderr) and everything runs as pure Python.
``make native`` rebuilds in place (``python setup.py build_ext --inplace``).

A read-only checkout (issue 27 item 11: ``pip install`` failed creating
``lnet_testbed.egg-info``, then ``build/``) builds outside it: when the source directory is
not writable, ``egg_info``, ``build`` and mypyc's C sources go to a fresh temporary directory
(``BUILD_BASE``); a writable checkout keeps ``build/`` and the egg-info in the tree as before.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
#: where setuptools builds: ``build`` in the tree, or a temporary directory outside a
#: read-only one (module doc)
OUT_OF_TREE = not os.access(ROOT, os.W_OK)
BUILD_BASE = tempfile.mkdtemp(prefix="lnet-testbed-build-") if OUT_OF_TREE else "build"
if OUT_OF_TREE:  # (each build hook is a process: what it built is handed over by then)
    atexit.register(shutil.rmtree, BUILD_BASE, True)
GROUP = "nodes.lnet.native"  # the shared library: nodes/lnet/_native/native__mypyc


def _say(line: str) -> None:
    print(f"lnet-testbed: {line}", file=sys.stderr)


def _native_module() -> Any:
    """``nodes/native.py`` loaded by path under another name (nothing else of ours imported)."""
    spec = importlib.util.spec_from_file_location("_lnet_native", ROOT / "nodes" / "native.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LISTS = _native_module()  # what is compiled, and the names the runtime side reads too
NATIVE: str = LISTS.NATIVE_DIR  # the compiled modules' directory inside each package
PURE_ENV: str = LISTS.PURE_ENV


class BuildEngine(build_ext):
    """``build_ext`` that compiles the listed packages with mypyc, or skips it (module doc)."""

    def finalize_options(self) -> None:
        self.digest = ""
        self.packages: list[str] = []
        exts: list[Extension] = []
        if self.distribution.ext_modules:  # (empty with PURE_ENV set)
            try:
                from mypyc.build import mypycify

                native = LISTS
                self.packages = [p.replace(".", "/") for p in native.packages()]
                self.digest = native.source_digest(str(ROOT))  # before compiling: what is
                here = os.getcwd()
                os.chdir(ROOT)
                try:
                    exts = mypycify(native.compiled_sources(str(ROOT)), group_name=GROUP,
                                    target_dir=os.path.join(BUILD_BASE, "mypyc"))
                finally:
                    os.chdir(here)
            except (Exception, SystemExit) as exc:  # mypy absent, or refused
                _say(f"not compiled (mypyc: {str(exc).strip()[:200]}); pure Python")
                exts = []
            for ext in exts:  # a.b.X -> a.b._native.X (same init symbol)
                head, _, tail = ext.name.rpartition(".")
                ext.name = f"{head}.{NATIVE}.{tail}"
                ext.sources = [str(ROOT / s) if not os.path.isabs(s) else s
                               for s in ext.sources]
                ext.include_dirs = [str(ROOT / d) if not os.path.isabs(d) else d
                                    for d in ext.include_dirs]
        self.distribution.ext_modules = exts
        super().finalize_options()

    def _native_dirs(self) -> list[tuple[Path, str]]:
        """Each compiled package's ``_native/`` (a base, its path below the base), in the
        build and, when building in place, in the tree."""
        bases = [Path(self.build_lib)]
        if self.inplace or getattr(self, "editable_mode", False):
            bases.append(ROOT)
        return [(base, f"{pkg}/{NATIVE}") for base in bases for pkg in self.packages]

    def run(self) -> None:
        keep = {Path(self.get_ext_filename(ext.name)).as_posix() for ext in self.extensions}
        for base, sub in self._native_dirs():  # no stamp until this build succeeds; no
            if (base / sub).is_dir():          # leftovers
                for old in (base / sub).iterdir():
                    if old.name == "SOURCES" or (old.suffix == ".so"
                                                 and f"{sub}/{old.name}" not in keep):
                        old.unlink()
        if not self.extensions:
            return
        for base, sub in self._native_dirs():
            (base / sub).mkdir(parents=True, exist_ok=True)
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python.h, ...: the sources still run
            _say(f"not compiled ({str(exc).strip()[:200]}); pure Python")
            return
        for base, sub in self._native_dirs():
            (base / sub / "SOURCES").write_text(self.digest + "\n")


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
      ext_modules=_ext_modules(), cmdclass={"build_ext": BuildEngine},
      options={"egg_info": {"egg_base": BUILD_BASE}, "build": {"build_base": BUILD_BASE}}
      if OUT_OF_TREE else {})
