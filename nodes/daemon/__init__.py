"""The node daemon: one per emulated node (``__main__``), its runtime and control server; the
lnetctl/lctl/lst verbs it serves live in ``nodes/dlc/verbs``.

``nodes/native.py`` says which of its modules run compiled (``runtime`` here, with the
engine): they are picked at import, here, as in ``nodes/__init__.py``.
"""

from __future__ import annotations

from nodes.native import use_native

#: True when ``nodes.daemon.runtime`` imports the compiled module
NATIVE = use_native(__path__, __name__)
