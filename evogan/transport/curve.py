"""CURVE ("ironhouse") for the ZeroMQ transport, and the ``evogan keys generate DIR`` command.

``DIR/public/server.key`` is pinned by every SUB, ``DIR/public/<name>.key`` are the XPUBs' allow-list, and
``DIR/private/*.key_secret`` are the secret keys: give each node only its own. Distribute the directory out of
band, never through the rendezvous store, which has no authentication. A peer whose key is not listed, or that
speaks plain ZMTP, completes no handshake and receives nothing. Cost: about 320 MB/s per stream, so leave it off on
loopback and ipc.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evogan.errors import UserError

if TYPE_CHECKING:
    import zmq

SERVER = "server"


def generate_keys(directory: str | os.PathLike[str], names: Iterable[str] = ("client",)) -> Path:
    """Create (or extend) a certificate directory: the server keypair plus one client keypair per name.

    Existing keypairs are kept, so adding a node does not invalidate the others.
    """
    import zmq.auth

    root = Path(directory)
    public, private = root / "public", root / "private"
    public.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    os.chmod(private, 0o700)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        for name in (SERVER, *names):
            if not name or "/" in name or name.startswith("."):
                raise UserError(f"bad key name {name!r}")
            if (private / f"{name}.key_secret").exists():
                continue
            public_file, secret_file = zmq.auth.create_certificates(scratch, name)
            shutil.move(public_file, public / f"{name}.key")
            shutil.move(secret_file, private / f"{name}.key_secret")
            os.chmod(private / f"{name}.key_secret", 0o600)
    return root


@dataclass(frozen=True)
class CurveKeys:
    """The keys one process needs: the server pair for its XPUBs, its client pair for its SUBs."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes
    allow_dir: Path

    def server(self, sock: zmq.Socket[Any]) -> None:
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def client(self, sock: zmq.Socket[Any]) -> None:
        sock.curve_secretkey = self.client_secret
        sock.curve_publickey = self.client_public
        sock.curve_serverkey = self.server_public


def load_keys(directory: Path, name: str) -> CurveKeys:
    """Read the server pair and client pair ``name``; a missing file is a ``UserError``."""
    import zmq
    import zmq.auth

    if not zmq.has("curve"):
        raise UserError("this libzmq was built without CURVE support")
    files = {
        "server secret": directory / "private" / f"{SERVER}.key_secret",
        "client secret": directory / "private" / f"{name}.key_secret",
    }
    for what, path in files.items():
        if not path.is_file():
            raise UserError(f"transport.curve_dir: {what} key {path} not found (run `evogan keys generate`)")
    server_public, server_secret = zmq.auth.load_certificate(files["server secret"])
    client_public, client_secret = zmq.auth.load_certificate(files["client secret"])
    if server_secret is None or client_secret is None:
        raise UserError(f"transport.curve_dir: {directory} holds no secret keys")
    return CurveKeys(server_public, server_secret, client_public, client_secret, directory / "public")


def start_authenticator(ctx: zmq.Context[Any], keys: CurveKeys) -> Any:
    """A ZAP handler on ``ctx`` that admits only the public keys in ``public/``."""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(keys.allow_dir))
    return auth


__all__ = ["CurveKeys", "generate_keys", "load_keys", "start_authenticator"]
