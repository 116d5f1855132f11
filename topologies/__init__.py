"""The built-in topologies, installed as the package ``testbed.topologies`` (pyproject.toml's
``package-dir``); ``testbed.plan.builtin_topology(name)`` finds them by name."""
