"""The CURVE keys of one testbed: one pair per node daemon, one for the orchestrator.

Theory of operation (ZeroMQ's "ironhouse" pattern, STYLE rule 11): keys are generated when a
testbed comes up and live in its run directory (mode 0700, files 0600); they die with it. Each
node daemon gets its own server pair and the orchestrator's *public* key as the only admitted
client (its ZAP handler refuses every other key); the orchestrator pins each daemon's public
key, so a daemon impostor on the management network fails the handshake. Keys travel to a
guest or host inside the agent's setup request over SSH, never through a synced folder or the
Vagrantfile directory. Files use ``zmq.auth``'s certificate format, which the daemon's
authenticator reads (``nodes/daemon/control.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from nodes.daemon.client import CurveKeys

CLIENT = "orchestrator"


@dataclass(frozen=True)
class NodeKeys:
    """What a node's host needs: the daemon's pair and the admitted client's public key."""

    public: bytes
    secret: bytes
    client_public: bytes

    def files(self) -> dict[str, str]:
        """Relative path -> content of the daemon's ``--curve-dir``."""
        return {"server.key_secret": cert_text(self.public, self.secret),
                f"clients/{CLIENT}.key": cert_text(self.client_public, None)}


def cert_text(public: bytes, secret: bytes | None) -> str:
    """A ``zmq.auth`` certificate file (ZPL), as ``create_certificates`` writes it."""
    lines = ["#   ZeroMQ CURVE certificate (lnet-testbed)", "metadata", "curve",
             f'    public-key = "{public.decode("ascii")}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class TestbedKeys:
    """The key store under ``<rundir>/curve``; ``generate`` once, then read."""

    __test__ = False

    def __init__(self, rdir: Path) -> None:
        self.dir = rdir / "curve"

    def generate(self, nodes: list[str]) -> None:
        """Fresh pairs for the orchestrator and every node (never reused across testbeds)."""
        pub, sec = zmq.curve_keypair()
        _write_private(self.dir / f"{CLIENT}.key_secret", cert_text(pub, sec))
        for node in nodes:
            npub, nsec = zmq.curve_keypair()
            _write_private(self.dir / "nodes" / f"{node}.key_secret", cert_text(npub, nsec))

    def _load(self, path: Path) -> tuple[bytes, bytes]:
        public, secret = zmq.auth.load_certificate(str(path))
        if secret is None:
            raise ValueError(f"{path}: no secret key")
        return public, secret

    def client(self, node: str) -> CurveKeys:
        """What the orchestrator needs to talk to ``node`` (its pair, ``node``'s pinned key)."""
        pub, sec = self._load(self.dir / f"{CLIENT}.key_secret")
        server, _ = self._load(self.dir / "nodes" / f"{node}.key_secret")
        return CurveKeys(public=pub, secret=sec, server=server)

    def node(self, node: str) -> NodeKeys:
        pub, sec = self._load(self.dir / "nodes" / f"{node}.key_secret")
        cpub, _ = self._load(self.dir / f"{CLIENT}.key_secret")
        return NodeKeys(public=pub, secret=sec, client_public=cpub)
