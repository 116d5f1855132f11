"""See what happened in a testbed: the event log, the invariant checker, captures, recorder
files and reports (issue 16). The formats are in ``docs/events.md``.

Modules: ``eventlog`` (read and filter logs, time origin), ``check``/``check_msg``/
``check_state``/``check_health``/``check_route`` (``testbed check``), ``events_cmd``
(``testbed events``), ``capture`` and ``pcapsum`` (``testbed capture``), ``recfile`` (recorder
files), ``report``/``plots``/``summary`` (``testbed report``), ``cli`` (the subcommands'
registration), ``pytest_check`` (the pytest plugin's teardown check).
"""
