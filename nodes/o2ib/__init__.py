"""o2iblnd emulation (issue 28): the kib_msg codec, a sans-I/O emulated verbs layer and the
LND on it, run for the NIs of ``o2ib`` nets (docs/o2ib.md).
"""
