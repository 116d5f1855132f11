"""The IB fault kinds (issue 28): their keys for ``faults/spec.py`` and the o2ib-NI check.

Each kind acts on one o2ib NI (``iface=ib0``) of a node's o2iblnd (``nodes/o2ib/ibfaults.py``
says what it does to the emulated HCA); the hstatus each failure gets is the one
``o2iblnd_cb.c`` sets (see ``ABOUT`` in ``faults/kinds.py``)::

    qp-error    the NI's established QPs enter ERROR once (posted WRs flush)
    rnr         the NI's QPs answer SENDs Receiver Not Ready for ms
    rdma-error  the next count RDMAs the NI's QPs serve fail REM_OP_ERR
    port-down   IB_EVENT_PORT_ERR on the NI's port (the NI fatal); fault del: port up
    cm-reject   every CONNREQ to the NI is rejected with reason (fault del: accepted again)
"""

from __future__ import annotations

from typing import Any

#: IBLND_REJECT_* names as ``reason=`` takes them (nodes/o2ib/msg.py ``RejectReason``)
REASONS = ("conn_race", "no_resources", "fatal", "conn_uncompat", "conn_stale", "rdma_frags",
           "msg_queue_size", "invalid_srv_id")
IB_PARAMS: dict[str, dict[str, tuple[type, Any, Any]]] = {
    "qp-error": {},
    "rnr": {"ms": (float, 1000.0, (1.0, 600_000.0))},
    "rdma-error": {"count": (int, 1, (1, 1_000_000))},
    "port-down": {},
    "cm-reject": {"reason": (str, "fatal", REASONS)},
}
IB = frozenset(IB_PARAMS)


def ib_nid(spec: Any, plan: Any) -> str | None:
    """The NID of the o2ib NI an IB fault ``spec`` acts on (``plan``: the testbed's
    ``TopologyPlan``), or None for any other kind; the sim and the Mininet supervisor both ask.

    Raises:
        FaultError: one line naming the fault, the node and the interface when it is not an
            o2ib NI (GUIDE: bad input).
    """
    from faults.spec import FaultError  # (faults.spec imports this module)

    if spec.kind not in IB:
        return None
    kind, node, iface = spec.kind, spec.node, spec.iface
    if iface is None:
        raise FaultError(f"{kind}: iface is required (an o2ib NI's interface, e.g. iface=ib0)")
    nid = next((i.nid for i in plan.node(node).interfaces if i.name == iface), None)
    if nid is None or not str(nid).split("@", 1)[-1].startswith("o2ib"):
        raise FaultError(f"{kind}: node {node} interface {iface} is not an o2ib NI "
                         f"({nid or 'no NID'}); IB faults act on an o2ib NI's ib* interface")
    return str(nid)
