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

The compile (issue 31 item 1): mypyc writes one C file per module (``multi_file``), gcc compiles
them ``LNET_TESTBED_BUILD_JOBS`` at a time (default: every CPU), and an object whose source,
headers and command line are unchanged since the last build (in ``BUILD_BASE``) is not compiled
again, so an edit recompiles the modules whose C changed. Each step prints one progress line, on the
terminal when there is one (pip hides a build's output unless ``-v``), else on stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
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
JOBS_ENV = "LNET_TESTBED_BUILD_JOBS"  # parallel C compiles (default: every CPU)


class Progress:
    """One line per build step, where a user sees it: pip captures a build's stdout and
    stderr (shown only with ``-v``), so the controlling terminal when there is one."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.out: Any = sys.stderr
        if not sys.stderr.isatty():
            with contextlib.suppress(OSError):  # no terminal (CI, setsid): stderr
                self.out = open("/dev/tty", "w")  # noqa: SIM115 (for the whole build)

    def say(self, line: str) -> None:
        try:
            head = "\r" if self.out is not sys.stderr else ""  # over pip's spinner
            self.out.write(f"{head}lnet-testbed: [{time.monotonic() - self.start:5.0f} s] "
                           f"{line}\n")
            self.out.flush()
        except OSError:
            pass


def _jobs() -> int:
    try:
        return max(1, int(os.environ.get(JOBS_ENV, "0"))) if os.environ.get(JOBS_ENV) \
            else max(1, len(os.sched_getaffinity(0)))
    except ValueError:
        _say(f"{JOBS_ENV}={os.environ[JOBS_ENV]!r} is not a number; compiling on every CPU")
        return max(1, len(os.sched_getaffinity(0)))


def _headers(include_dirs: list[str], depends: list[str]) -> float:
    """The newest mtime of the headers an object may include (the group's, the runtime's)."""
    newest = 0.0
    for d in include_dirs:
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name.endswith(".h"):
                    newest = max(newest, os.path.getmtime(os.path.join(d, name)))
    for dep in depends:
        if os.path.exists(dep):
            newest = max(newest, os.path.getmtime(dep))
    return newest


def parallel_compile(compiler: Any, progress: Progress, jobs: int) -> None:
    """Replace ``compiler.compile`` (distutils' serial loop over sources) with one that compiles
    ``jobs`` sources at a time and skips the objects that are up to date (module doc)."""

    def compile(sources: list[str], output_dir: str | None = None, macros: Any = None,
                include_dirs: list[str] | None = None, debug: bool = False,
                extra_preargs: list[str] | None = None, extra_postargs: list[str] | None = None,
                depends: list[str] | None = None) -> list[str]:
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
        newest = _headers([*(include_dirs or []), *compiler.include_dirs], depends or [])
        todo = []
        for obj in objects:
            if obj not in build:
                continue
            src, ext = build[obj]
            cmd = repr([*compiler.compiler_so, *cc_args, src, *(extra_postargs or [])])
            try:
                with open(obj + ".cmd") as f:
                    same = f.read() == cmd
                fresh = same and os.path.getmtime(obj) >= max(os.path.getmtime(src), newest)
            except OSError:
                fresh = False
            if not fresh:
                todo.append((obj, src, ext, cmd))
        if len(objects) > 1:
            progress.say(f"compiling {len(todo)} of {len(objects)} C files ({jobs} at a time; "
                         f"{len(objects) - len(todo)} unchanged since the last build)")

        def one(obj: str, src: str, ext: str, cmd: str) -> tuple[str, float]:
            t0 = time.monotonic()
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)
            with open(obj + ".cmd", "w") as f:
                f.write(cmd)
            return src, time.monotonic() - t0

        with ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(one, *job) for job in todo]
            for n, fut in enumerate(as_completed(futures), 1):
                src, took = fut.result()
                if len(todo) > 1:
                    progress.say(f"  [{n}/{len(todo)}] {os.path.relpath(src, ROOT)} "
                                 f"({took:.0f} s)")
        return objects  # type: ignore[no-any-return]

    compiler.compile = compile


class BuildEngine(build_ext):
    """``build_ext`` that compiles the listed packages with mypyc, or skips it (module doc)."""

    def finalize_options(self) -> None:
        self.digest = ""
        self.progress = Progress()
        self.packages: list[str] = []
        exts: list[Extension] = []
        if self.distribution.ext_modules and not _metadata_only():  # (empty: PURE_ENV)
            try:
                from mypyc.build import mypycify

                native = LISTS
                self.packages = [p.replace(".", "/") for p in native.packages()]
                self.digest = native.source_digest(str(ROOT))  # before compiling: what is
                here = os.getcwd()
                os.chdir(ROOT)
                sources = native.compiled_sources(str(ROOT))
                self.progress.say(f"mypyc: type-checking {len(sources)} modules and writing "
                                  "their C (one C file each)")
                try:
                    exts = mypycify(sources, group_name=GROUP,
                                    target_dir=os.path.join(BUILD_BASE, "mypyc"),
                                    multi_file=True)
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
                # multi_file's C files sit in BUILD_BASE/mypyc/, the group's headers below it in
                # the group's package directory: point the compiler there
                ext.include_dirs.append(str(ROOT / BUILD_BASE / "mypyc" / GROUP.rpartition(
                    ".")[0].replace(".", "/")))  # (ROOT / an absolute BUILD_BASE: BUILD_BASE)
        self.distribution.ext_modules = exts
        super().finalize_options()

    def build_extensions(self) -> None:
        """The shared library's C files in parallel and cached (module doc); then the rest."""
        parallel_compile(self.compiler, self.progress, _jobs())
        super().build_extensions()

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
            self.progress.say(f"compiled {len(self.extensions)} extension modules")
        except Exception as exc:  # no compiler, no Python.h, ...: the sources still run
            _say(f"not compiled ({str(exc).strip()[:200]}); pure Python")
            return
        for base, sub in self._native_dirs():
            (base / sub / "SOURCES").write_text(self.digest + "\n")


def _metadata_only() -> bool:
    """This run of setup.py only writes metadata (pip's ``egg_info`` and ``dist_info``
    hooks, which finalize ``build_ext`` too): no mypyc for it, only for the build."""
    words = {a for a in sys.argv[1:] if not a.startswith("-")}
    return bool(words & {"egg_info", "dist_info"}) and not words & {
        "build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


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
