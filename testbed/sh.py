"""The orchestrator's subprocess helpers: ``faults.sh`` (one implementation for both layers).

The code moved down to ``faults/sh.py`` so that ``faults/`` imports nothing from ``testbed/``
(issue 12 item 3); the orchestrator's many call sites keep importing it by this name.
"""

from faults.sh import DEFAULT_TIMEOUT, CommandError, Completed, ns_argv, run, run_checked

__all__ = ["DEFAULT_TIMEOUT", "CommandError", "Completed", "ns_argv", "run", "run_checked"]
