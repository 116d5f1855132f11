"""``python -m testbed``: the ``testbed`` command (``testbed.cli``)."""

from testbed.cli import run

run()
