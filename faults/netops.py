"""Faults by record: make, undo and find the resources a state file lists.

Theory of operation (STYLE rule 9): a fault's resources (``faults.resources``, from
``faults.realise``) are recorded in state.json *before* they are made, as the records
``Resource.to_dict`` writes. The process that built a resource keeps it typed: :func:`make`
makes it and writes back into its record what the making learnt (an interposer's pid); a
record that crossed a process edge (a host agent's, ``testbed/vagrant/agentfaults.py``) is
loaded once there and made by :func:`create` (issue 29: typed -> record -> typed happened
inside one process before); :func:`undo` undoes one; ``recorded``/``recorded_leftovers``/
``undo_recorded`` are ``testbed clean``'s view of a state file whose owner is gone. Which
resource a record is, and how it is made, is the resource type's business: no per-kind code
here.
"""

from __future__ import annotations

from typing import Any

from faults.nfqproc import read_counters
from faults.resources import TAG, FaultApplyError, Resource, load
from faults.spec import FaultError

__all__ = ["TAG", "FaultApplyError", "create", "make", "read_counters", "recorded",
           "recorded_leftovers", "undo", "undo_recorded"]


def make(res: Resource, record: dict[str, Any], env: dict[str, str]) -> None:
    """Make ``res``, recorded as ``record`` (its ``to_dict``, already in state.json); the
    record gets what the making learnt (an interposer's ``pid``).

    Raises:
        FaultApplyError: the command failed or the process did not come up.
    """
    record.update(res.create(env).to_dict())


def create(record: dict[str, Any], env: dict[str, str]) -> None:
    """Make the change a record received from another process describes (``make``).

    Raises:
        FaultApplyError: the command failed, the process did not come up, or the record is bad.
    """
    try:
        res = load(record)
    except FaultError as exc:
        raise FaultApplyError(str(exc)) from None
    make(res, record, env)


def undo(record: dict[str, Any]) -> str | None:
    """Undo one recorded resource; never raises; returns a problem description or None."""
    try:
        return load(record).undo()
    except FaultError as exc:
        return str(exc)
    except OSError as exc:
        return f"{record.get('type')}: {exc}"


def recorded(state: dict[str, Any]) -> list[Resource]:
    """Fault resources a state file lists, newest last (records that do not load skipped)."""
    out = []
    faults = state.get("faults")
    if isinstance(faults, dict):
        for info in faults.values():
            if isinstance(info, dict) and isinstance(info.get("resources"), list):
                for rec in info["resources"]:
                    try:
                        out.append(load(rec))
                    except FaultError:
                        continue
    return out


def recorded_leftovers(state: dict[str, Any]) -> list[str]:
    """What of the recorded fault resources is still there (``testbed clean``'s check)."""
    return sorted({s for r in recorded(state) if (s := r.present()) is not None})


def undo_recorded(state: dict[str, Any]) -> list[str]:
    """Undo every recorded fault resource still present, newest first (owner gone)."""
    removed = []
    for res in reversed(recorded(state)):
        what = res.present() or res.unseen()
        if what is None:
            continue
        res.undo()
        removed.append(what)
    return removed
