"""What a socklnd connection yields: the events of its wire (``framing.py`` makes them).

Facts, in the kernel's words: the acceptor's connreq, the peer's hello, an LNet message (its
header and payload: ``bytes`` when small, a read-only view of its own buffer when bulk), a
NOOP keepalive.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.lnd import wire
from nodes.lnet.hdr import LNetHdr
from nodes.lnet.nid import NID

#: A received payload: ``bytes`` (small) or a read-only view of its own buffer (bulk).
Payload = bytes | memoryview


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnreqReceived:
    nid: NID  # acr_nid: the NI the peer wants


@dataclass(frozen=True, slots=True, kw_only=True)
class HelloReceived:
    hello: wire.KsockHello


# not frozen, as the engine's events (a frozen one's __init__ costs ~2x, once per frame); its
# __init__ written out, as theirs (actions.py: compiled, where a dataclass's is not)
@dataclass(init=False, slots=True, unsafe_hash=True, kw_only=True)
class LNetMessageReceived:
    hdr: LNetHdr
    payload: Payload
    zc_cookies: tuple[int, int] = (0, 0)

    def __init__(self, *, hdr: LNetHdr, payload: Payload,
                 zc_cookies: tuple[int, int] = (0, 0)) -> None:
        self.hdr, self.payload, self.zc_cookies = hdr, payload, zc_cookies


@dataclass(slots=True, unsafe_hash=True, kw_only=True)
class NoopReceived:
    zc_cookies: tuple[int, int] = (0, 0)


Event = ConnreqReceived | HelloReceived | LNetMessageReceived | NoopReceived
