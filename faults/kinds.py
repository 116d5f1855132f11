"""The fault kinds as help text: ``testbed fault kinds`` and ``testbed fault add --help``.

Everything printed comes from ``faults/spec.py`` (issue 31 item 5): the kinds and their keys,
types, defaults and ranges from ``PARAMS``, what each does from ``ABOUT`` below, the keys every
fault takes from ``COMMON`` and ``MATCH_KEYS``; a kind or key added there shows up here.
"""

from __future__ import annotations

import textwrap
from typing import Any

from faults import spec

#: kind -> what it does, one line (help text only; a kind of ``spec.PARAMS`` with no line here
#: fails tests/unit/test_help.py)
ABOUT: dict[str, str] = {
    "loss": "drop matching packets: rate, or Gilbert-Elliott p/r (interposer)",
    "delay": "hold matching packets delay ms (+- jitter) before passing them (interposer)",
    "reorder": "hold a packet back until gap later ones passed, at most hold ms (interposer)",
    "duplicate": "send matching packets twice; egress only (interposer)",
    "corrupt": "flip bits in matching packets; csum fix keeps TCP's checksum right "
               "(interposer)",
    "stall": "hold every packet of the matching connection: it hangs, open (interposer)",
    "rst": "forge TCP RSTs that kill the matching socklnd connection (interposer)",
    "bandwidth": "limit an interface's rate (tc tbf)",
    "blackhole": "drop everything, carrier up (iptables DROP)",
    "carrier": "take the link down (ip link set down)",
    "flap": "carrier (or blackhole) down for down s, up for up s, count times",
    "partition": "no traffic between nodes a and nodes b (iptables DROP)",
    "kill": "SIGKILL the node daemon (restarted after duration, if given)",
    "stop": "SIGSTOP the node daemon (SIGCONT after duration)",
    "restart": "kill and restart the node daemon at once",
    # the IB kinds (faults/ibspec.py) on an o2ib NI (iface=ib0); o2iblnd_cb.c's hstatus
    "qp-error": "QPs enter ERROR: posted WRs flush, -EIO REMOTE_DROPPED (kiblnd_tx_complete)",
    "rnr": "QPs Receiver Not Ready for ms: RNR retries exceeded, -EIO REMOTE_DROPPED",
    "rdma-error": "the next count RDMAs served fail REM_OP_ERR: -EIO REMOTE_DROPPED",
    "port-down": "IB_EVENT_PORT_ERR: the NI fatal (kiblnd_event_handler); del: port up",
    "cm-reject": "CONNREQs to it rejected: -ECONNREFUSED REMOTE_DROPPED (kiblnd_rejected)",
}
#: what ``parse_params`` requires although ``PARAMS`` gives no default
_REQUIRED = {("bandwidth", "bw"), ("partition", "a"), ("partition", "b")}
_TYPES = {float: "number", int: "integer", bool: "true|false", str: "text",
          list: "node,node,..."}


def _key(kind: str, key: str, typ: type, default: Any, rng: Any) -> str:
    """One key: ``rate=0.25 (number 0.0..1.0)``, ``bw (required; text)``."""
    if isinstance(rng, tuple) and rng and isinstance(rng[0], str):
        what = "|".join(rng)
    elif isinstance(rng, tuple):
        lo, hi = (f"{v:g}" if typ is float else str(v) for v in rng)
        what = f"{_TYPES[typ]} {lo}..{hi}"
    else:
        what = _TYPES[typ]
    if default is None:
        need = "required" if (kind, key) in _REQUIRED else "optional"
        return f"{key} ({need}; {what})"
    shown = str(default).lower() if typ is bool else f"{default:g}" \
        if isinstance(default, float) else str(default)
    return f"{key}={shown} ({what})"


def describe() -> str:
    """Every kind with its keys and defaults, then the keys every fault takes."""
    width = max(map(len, spec.PARAMS))
    lines = ["fault kinds (KEY=DEFAULT; faults/README.md has an example of each):"]
    for kind, params in spec.PARAMS.items():
        lines.append(f"  {kind:<{width}}  {ABOUT[kind]}")
        keys = [_key(kind, k, *v) for k, v in params.items()] or ["(none)"]
        if kind == "loss":
            keys.append("give rate, or p and r")
        line = f"  {'':<{width}}  keys:"
        for i, key in enumerate(keys):  # a key is never split over two lines
            word = f" {key}" + ("," if i < len(keys) - 1 else "")
            if len(line) + len(word) > 100:
                lines.append(line)
                line = f"  {'':<{width}}       "
            line += word
        lines.append(line)
    common = [k for k in spec.COMMON if k not in ("kind", "match")]
    tail = ["every kind also takes: " + ", ".join(common)
            + " (node is required but for partition; direction out|in|both, default out; "
            "start and duration in seconds; repeat=1)",
            "interposed kinds (" + ", ".join(sorted(spec.INTERPOSED)) + ") also take "
            + ", ".join(f"match.{k}" for k in spec.MATCH_KEYS)
            + f" (match.proto one of {'|'.join(spec.PROTOS)}, match.type one of "
            + f"{','.join(spec.LNET_TYPES)})"]
    for para in tail:
        lines += textwrap.wrap(para, 100, subsequent_indent="  ")
    return "\n".join(lines) + "\n"
