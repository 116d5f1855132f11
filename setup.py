"""setuptools' package list: what ``find_namespace_packages`` finds, plus ``testbed.topologies``.

The built-in topologies stay in the top-level ``topologies/`` directory; ``package-dir`` in
pyproject.toml maps that directory to the package ``testbed.topologies`` in the wheel
(``testbed/plan/source.py`` finds it with importlib.resources). A mapped package is not found
by a directory search, and pyproject.toml's ``packages`` is either that search or a literal
list (which a new subpackage would silently fall out of); so this file adds the one mapped
package to the search. Everything else about the build is in pyproject.toml. Namespace
packages are searched too (``nodes/dlc`` has no ``__init__.py``), as pyproject's own
``packages.find`` does by default.
"""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["testbed", "testbed.*", "nodes", "nodes.*",
                                                  "faults", "faults.*"],
                                         exclude=["*.__pycache__"]), "testbed.topologies"])
