"""The ``lnet_testbed`` pytest plugin (entry point ``testbed.pytest.plugin``).

``plugin`` (hooks, options, markers; re-exports every fixture and helper: ``wait_for``,
``Traffic``, ``unique_name``...), ``fixtures`` (testbeds brought up and checked per test,
module or session), ``report`` (failure evidence, the traceability collector), ``trace``
(requirements and the traceability report, also behind ``testbed trace``). Importing this
package does not import pytest: ``testbed trace`` works without it.
"""
