"""What every component of one node's engine may read about the node itself.

``NodeState`` is plain data owned by the engine facade: the LNet pid and incarnation, whether
LNet is configured, whether it is a Multi-Rail node (a "downrev" node is not, seed 000
bck-*), the ping buffer's sequence number (spec §5.1) and the node-wide round-robin stamp of
local nets and NIs (``lnet_net.net_seq``, spec §2.7). Components get it at construction
instead of a reference to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class NodeState:
    pid: int
    incarnation: int
    configured: bool = False
    multi_rail: bool = True
    ping_seq: int = 1
    net_seq: int = 0
    #: ``the_lnet.ln_nis_use_large_nids``: LNet configured with ``--large`` (an LND's
    #: interface enumeration then lists IPv6 addresses too, ``lnet_inet_enumerate``)
    large_nids: bool = False
