"""o2iblnd emulation (issue 28): the kib_msg codec and a sans-I/O emulated verbs layer.

In progress: not yet selected by the engine for ``o2ib`` nets (docs/o2ib.md).
"""
