"""The node side: the LNet engine (``lnet``), the socklnd (``lnd``), lnet_selftest
(``selftest``), the node daemon (``daemon``) and the driver they share (``driver``).

``nodes/native.py`` says which modules run compiled (``driver`` here, with the engine): they
are picked at import, here, as in ``nodes/lnet/__init__.py``.
"""

from __future__ import annotations

from nodes.native import use_native

#: True when ``nodes.driver`` imports the compiled module
NATIVE = use_native(__path__, __name__)
