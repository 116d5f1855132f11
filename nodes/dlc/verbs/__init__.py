"""The lnetctl, lctl and lst verbs of one node, and its ``/sys/module`` parameter files.

Each verb module speaks only to the engine's public surface and to the ``Runtime`` protocol
(``nodes/dlc/runtime.py``); the daemon, the simulator and the tests' doubles all run them
unchanged.
"""
