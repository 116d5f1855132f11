"""setuptools' package list: what ``find_packages`` finds, plus ``testbed.topologies``.

The built-in topologies stay in the top-level ``topologies/`` directory; ``package-dir`` in
pyproject.toml maps that directory to the package ``testbed.topologies`` in the wheel
(``testbed/plan/source.py`` finds it with importlib.resources). A mapped package is not found
by a directory search, and pyproject.toml cannot add one to ``packages.find``; everything
else about the build is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["testbed", "testbed.*", "nodes", "nodes.*", "faults",
                                        "faults.*"]), "testbed.topologies"])
