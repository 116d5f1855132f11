"""What outside pip a feature needs, said in one line when it is missing (issue 18).

``pip install lnet-testbed`` gives the simulator, ``trace``, ``report`` and ``check`` with
nothing else. The Mininet backend needs root and Mininet (Debian's ``mininet`` package,
importable by this interpreter: a venv made with ``--system-site-packages``), ``ip``;
fault rules need ``iptables``; ``capture`` needs ``dumpcap`` and ``tshark``. Each check
returns the one-line reason naming the missing part and how to get it, or None; callers
raise it as their own error type (TestbedError, FaultError, CaptureFailed).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

#: Debian package that provides each program this project runs
APT = {"ip": "iproute2", "iptables": "iptables", "tc": "iproute2", "dumpcap": "tshark",
       "tshark": "tshark", "nsenter": "util-linux"}


def root(what: str) -> str | None:
    """``what`` needs root, and this process is not root."""
    if os.geteuid() == 0:
        return None
    return f"{what} needs root (uid {os.geteuid()}): run it as root, or use the sim backend"


def program(name: str, what: str) -> str | None:
    """``what`` runs the program ``name``, and it is not on PATH."""
    if shutil.which(name) is not None:
        return None
    return (f"{what} needs {name}, which is not installed (not on PATH): "
            f"apt install {APT.get(name, name)}")


def mininet(what: str = "the mininet backend") -> str | None:
    """``what`` needs the ``mininet`` Python package, and this interpreter cannot import it."""
    if importlib.util.find_spec("mininet") is not None:
        return None
    return (f"{what} needs Mininet, which this Python cannot import: apt install mininet, "
            "and use /usr/bin/python3 or a venv made with --system-site-packages")


def mininet_backend() -> str | None:
    """The first thing the Mininet backend lacks here (root first), or None."""
    what = "the mininet backend"
    return root(what) or mininet(what) or program("ip", what) or program("nsenter", what)
