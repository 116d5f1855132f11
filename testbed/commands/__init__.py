"""The ``testbed`` CLI's subcommands, one module per concern; ``testbed.cli`` builds the parser.

Each module has ``register(sub, named)``, which adds its subparsers (``named`` adds one with
``-n NAME``), and ``cmd_*`` functions taking the parsed arguments and returning the exit
status. ``common`` holds what they share: the one-line ``CliError`` and picking the testbed
to act on, the version, tables and ``--json``. Modules: ``lifecycle`` (up, down, clean),
``status``, ``node`` (lnetctl, exec, link, traffic), ``faults`` (fault), ``sim`` (the
one-shot ``sim``, ``clock``), ``trace``, ``completion``; the observation commands (events,
check, capture, report) are ``testbed.observe.cli``.
"""
